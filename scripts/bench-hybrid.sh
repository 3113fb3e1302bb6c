#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 28's goal, measured: python/examples/train_hybrid.py on a 4-node
# cluster (T trainers per node) with the strategies `collstack plan`
# picks (its config column, for examples/train_hybrid_model.json, which
# describes the example at the sizes below: a 200,000 x 8 embedding, 8
# experts of 24 -> 512 -> 24) against every single strategy that can
# carry the whole model ("allreduce", "ps": the experts data-parallel),
# the three configs alternated R times on the same cluster. The plan's
# all-to-all for the MoE layer is expert parallelism (the experts on
# "local", 4 all-to-alls per step through the sidecars). Prints each
# run's mean step time (rank 0: exchanges and numpy) and one line with
# the medians:
#   hybrid plan=... plan_ms=A allreduce_ms=B ps_ms=C plan_vs_best=A/min(B,C)
# Root; uses scripts/cluster.sh; numpy for /usr/bin/python3.
#
#   scripts/bench-hybrid.sh [--port af_packet|udp] [--trainers T]
#                           [--steps S] [--reps R] [--model MODEL.json]
# (--model: a `collstack model fit` file; default: fitted on the simulator)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=af_packet T=2 STEPS=60 REPS=3 MODEL=
while [ $# -gt 0 ]; do
	case $1 in
	--port) PORT=$2; shift 2 ;;
	--trainers) T=$2; shift 2 ;;
	--steps) STEPS=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--model) MODEL=$2; shift 2 ;;
	*) echo "bench-hybrid: unknown option $1" >&2; exit 2 ;;
	esac
done
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
NODES=4
export CS_CLUSTER=${CS_CLUSTER:-hyb}
ENV=/run/collstack/cluster-$CS_CLUSTER.env
TMP=$(mktemp -d /tmp/cs-hybrid.XXXXXX)
trap 'scripts/cluster.sh down >/dev/null 2>&1; rm -rf "$TMP"' EXIT

if [ -z "$MODEL" ]; then
	MODEL=$TMP/model.json
	"$CLI" model fit --sim -o "$MODEL" >/dev/null 2>&1
fi
# the plan's config column as a strategies file
"$CLI" plan examples/train_hybrid_model.json --ranks $((NODES * T)) \
	--ranks-per-node "$T" -m "$MODEL" -o "$TMP/plan.conf" >"$TMP/plan.txt" ||
	{ cat "$TMP/plan.txt"; exit 1; }
for s in allreduce ps; do
	awk -v s=$s '$1 == "group" { print "group", $2, s }' "$TMP/plan.conf" \
		>"$TMP/$s.conf"
done
sed 's/^/  /' "$TMP/plan.txt"
PLAN=$(awk '$1 == "group" { printf "%s%s=%s", (n++ ? "," : ""), $2, $3 }' \
	"$TMP/plan.conf")

scripts/cluster.sh down >/dev/null 2>&1 || true
CS_BUILD_DIR=$BUILD scripts/cluster.sh up $NODES --port "$PORT" >/dev/null
declare -A ms
for ((r = 0; r < REPS; r++)); do
	for c in plan allreduce ps; do
		out=$(COLLSTACK_LIB=$BUILD/client/libcollstack.so \
			PYTHONPATH=$PWD/python timeout 600 "$CLI" launch -T "$T" \
			--cluster "$ENV" --timeout 500 -- /usr/bin/python3 \
			python/examples/train_hybrid.py --steps "$STEPS" \
			--rows 200000 --experts 8 --ffn 512 --config "$TMP/$c.conf" 2>&1) || {
			echo "$out"
			echo "bench-hybrid: $c run $r failed" >&2
			exit 1
		}
		grep -q "params identical on every rank: True" <<<"$out" || {
			echo "$out"
			echo "bench-hybrid: $c run $r: parameters differ" >&2
			exit 1
		}
		v=$(sed -n 's/^step time: mean \([0-9.]*\) ms.*/\1/p' <<<"$out")
		echo "run $r $c step_ms=$v load=$(cut -d' ' -f1 /proc/loadavg)" \
			"$(grep -o 'the 4 all-to-alls: .*' <<<"$out")"
		ms[$c]="${ms[$c]:-} $v"
	done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
p=$(median <<<"${ms[plan]}")
a=$(median <<<"${ms[allreduce]}")
q=$(median <<<"${ms[ps]}")
echo "hybrid plan=$PLAN nodes=$NODES trainers=$T steps=$STEPS plan_ms=$p" \
	"allreduce_ms=$a ps_ms=$q plan_vs_best=$(awk -v p="$p" -v a="$a" \
	-v q="$q" 'BEGIN { b = a < q ? a : q; printf "%.3f", p / b }')"
