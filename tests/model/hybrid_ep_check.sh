#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# train_hybrid.py's MoE layer expert-parallel (the experts on "local", the
# tokens through collstack.moe's all-to-alls) against the same job
# data-parallel (every expert on every rank, gradients allreduced): both
# on 4 ranks of a mini sidecar, from one seed; the final loss must agree
# to 1e-6 relative (the rows cross the all-to-alls as float32, the
# gradients are summed in another order), and each run must end with its
# parameters identical on every rank.
# Usage: hybrid_ep_check.sh PYTHON RUN_LOCAL MINI_SIDECAR LIBCOLLSTACK CONF
set -uo pipefail
py=$1 run_local=$2 mini=$3 lib=$4 conf=$5
loss() {	# config-args...
	local out
	out=$(HYBRID_ARGS="--steps 25 --ffn 32 $*" "$py" "$run_local" "$mini" \
		"$lib" 4 train_hybrid.py 2>&1) || { echo "$out" >&2; return 1; }
	echo "$out" >&2
	grep -q "params identical on every rank: True" <<<"$out" || return 1
	sed -n 's/^final loss //p' <<<"$out"
}
dp=$(loss) || { echo "FAIL: the data-parallel run"; exit 1; }
ep=$(loss --config "$conf") || { echo "FAIL: the expert-parallel run"; exit 1; }
grep -q . <<<"$ep" || { echo "FAIL: no final loss"; exit 1; }
echo "final loss: data-parallel $dp, expert-parallel $ep"
awk -v a="$dp" -v b="$ep" 'BEGIN { d = a - b; if (d < 0) d = -d
	exit !(a > 0 && d <= 1e-6 * a) }' || {
	echo "FAIL: the losses differ by more than 1e-6 relative"; exit 1; }
echo "expert parallelism ok"
