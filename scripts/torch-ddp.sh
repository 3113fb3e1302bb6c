#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# DDP over the collstack torch.distributed backend on a 4-node netns
# cluster, 2 trainers per node, against gloo in the same processes from
# the same seed (python/examples/ddp_mlp.py). Prints rank 0's line:
#
#   ddp ok backend=collstack steps=N max_param_diff_vs_gloo=X
#       step_ms_collstack=A step_ms_gloo=B
#
# and exits 0, or prints 'ddp FAIL ...' and exits 1; 77 when it cannot run
# here (not root, no torch for /usr/bin/python3, not built).
#
#   scripts/torch-ddp.sh [--nodes N] [--trainers T] [--steps S]
#                        [--port P] [--width W] [--batch B] [--bench]
#
# --bench: afterwards, on the same cluster, a 64 MiB f32 allreduce through
# torch.distributed (python/examples/torch_allreduce_bench.py: a tensor in
# a shared segment, and an ordinary one) and through `collstack bench`
# (the same trainers-per-node), 5 timed iterations each; their lines are
# printed after the ddp line.
#
# Environment: CS_BUILD_DIR (build), CS_CLUSTER (torch: namespaces
# torchn0.., its own cluster state file), CS_TORCH_MASTER_PORT (29533).
# The logs of every trainer: $CS_TORCH_LOG_DIR (default a temporary
# folder, kept on failure).
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=4 T=2 STEPS=30 PORT=af_packet WIDTH=512 BATCH=64 BENCH=0
while [ $# -gt 0 ]; do
	case $1 in
	--nodes) NODES=$2; shift 2 ;;
	--trainers) T=$2; shift 2 ;;
	--steps) STEPS=$2; shift 2 ;;
	--port) PORT=$2; shift 2 ;;
	--width) WIDTH=$2; shift 2 ;;
	--batch) BATCH=$2; shift 2 ;;
	--bench) BENCH=1; shift ;;
	*) echo "usage: $0 [--nodes N] [--trainers T] [--steps S] [--port P] [--width W] [--batch B] [--bench]" >&2
	   exit 2 ;;
	esac
done

BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
export CS_CLUSTER=${CS_CLUSTER:-torch} CS_BUILD_DIR=$BUILD
MPORT=${CS_TORCH_MASTER_PORT:-29533}
PY=/usr/bin/python3

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
[ -x "$PY" ] && "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
	skip "no torch with gloo for $PY (Debian: apt-get install python3-torch)"
LIB=$BUILD/client/libcollstack.so
[ -f "$LIB" ] && [ -x "$BUILD/sidecar/collstackd" ] || skip "not built ($BUILD)"

LOGS=${CS_TORCH_LOG_DIR:-$(mktemp -d /tmp/cs-torch-ddp.XXXXXX)}
mkdir -p "$LOGS"
ENV_FILE=/run/collstack/cluster-$CS_CLUSTER.env
[ "$CS_CLUSTER" = cs ] && ENV_FILE=/run/collstack/cluster.env

pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	scripts/cluster.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT

scripts/cluster.sh up "$NODES" --port "$PORT" >"$LOGS/cluster.log" 2>&1 || {
	cat "$LOGS/cluster.log" >&2
	echo "ddp FAIL: cluster.sh up failed" >&2
	exit 1
}
# shellcheck disable=SC1090
. "$ENV_FILE"
read -r -a nodes <<<"$CS_NODES"
read -r -a cpus <<<"${CS_CPUS:-}"

world=$((NODES * T))
# launch SCRIPT ARGS...: every trainer, rank r's output in $LOGS/<tag>$r.log
launch() {
	local tag=$1 i l r ns pin
	shift
	for ((i = 0; i < NODES; i++)); do
		ns=${nodes[$i]}
		pin=()
		[ -n "${cpus[$i]:-}" ] && pin=(taskset -c "${cpus[$i]}")
		for ((l = 0; l < T; l++)); do
			r=$((i * T + l))
			ip netns exec "$ns" env RANK=$r WORLD_SIZE=$world \
				LOCAL_RANK=$l LOCAL_WORLD_SIZE=$T \
				MASTER_ADDR=10.77.0.1 MASTER_PORT="$MPORT" \
				GLOO_SOCKET_IFNAME="${CS_CLUSTER}d$i" \
				COLLSTACK_SOCKET="$CS_RUN/$ns/collstack.sock" \
				COLLSTACK_LIB="$LIB" PYTHONPATH="$PWD/python" \
				PYTHONWARNINGS=ignore OMP_NUM_THREADS=1 \
				timeout 900 "${pin[@]}" "$PY" "$@" \
				>"$LOGS/$tag$r.log" 2>&1 &
			pids+=($!)
		done
	done
	rc=0
	for p in "${pids[@]}"; do
		wait "$p" || rc=1
	done
	pids=()
	return $rc
}
rc=0
launch rank python/examples/ddp_mlp.py --steps "$STEPS" --width "$WIDTH" \
	--batch "$BATCH" || rc=1
line=$(grep -h '^ddp ' "$LOGS/rank0.log" || true)
if [ $rc != 0 ] || [ -z "$line" ] || [[ $line != "ddp ok"* ]]; then
	echo "${line:-ddp FAIL: no result from rank 0}"
	for f in "$LOGS"/rank*.log; do
		echo "--- $f"
		tail -5 "$f"
	done
	echo "logs kept in $LOGS"
	exit 1
fi
echo "$line"
if [ $BENCH = 1 ]; then
	launch bench python/examples/torch_allreduce_bench.py \
		--bytes $((64 << 20)) --iters 5 --warmup 1 || {
		for f in "$LOGS"/bench*.log; do echo "--- $f"; tail -n 5 "$f"; done
		echo "torch allreduce bench FAIL (logs in $LOGS)"
		exit 1
	}
	grep -h '^torch allreduce' "$LOGS/bench0.log"
	"$BUILD/tools/collstack" bench --cluster "$ENV_FILE" -o allreduce \
		-b 64M -e 64M -n 5 -w 1 --trainers-per-node "$T" 2>&1 |
		grep -v '^#' | sed 's/^/collstack bench: /'
fi
[ -z "${CS_TORCH_LOG_DIR:-}" ] && rm -rf "$LOGS"
exit 0
