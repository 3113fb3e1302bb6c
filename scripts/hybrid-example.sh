#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 28's example on a 4-node netns cluster, 2 trainers per node:
# python/examples/train_hybrid.py (a dense MLP, a 200,000 x 8 embedding,
# an MoE layer of 8 experts 24 -> 512 -> 24) twice:
#
#   1. each parameter group on the strategy `collstack plan` picks for it
#      (examples/train_hybrid_model.json, a cost model fitted on the
#      simulator): allreduce for the MLP, ps for the embedding, expert
#      parallelism for the MoE layer (its experts on "local", the tokens
#      through 4 all-to-alls per step);
#   2. the embedding on allreduce until step 50, where every rank switches
#      it to ps; rank 0 prints the step time before and after and writes
#      the timeline (Chrome trace events: one per step and per exchange).
#
# Root; uses scripts/cluster.sh; numpy for /usr/bin/python3.
#
#   scripts/hybrid-example.sh [--steps S] [--switch-at K] [--timeline FILE]
#                             [--port af_packet|udp]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=80 AT=50 TL=/tmp/collstack-hybrid-timeline.json PORT=af_packet
while [ $# -gt 0 ]; do
	case $1 in
	--steps) STEPS=$2; shift 2 ;;
	--switch-at) AT=$2; shift 2 ;;
	--timeline) TL=$2; shift 2 ;;
	--port) PORT=$2; shift 2 ;;
	*) echo "usage: $0 [--steps S] [--switch-at K] [--timeline FILE] [--port P]" >&2
	   exit 2 ;;
	esac
done
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
export CS_CLUSTER=${CS_CLUSTER:-hyx}
ENV=/run/collstack/cluster-$CS_CLUSTER.env
TMP=$(mktemp -d /tmp/cs-hybrid-ex.XXXXXX)
trap 'scripts/cluster.sh down >/dev/null 2>&1; rm -rf "$TMP"' EXIT

"$CLI" model fit --sim -o "$TMP/model.json" >/dev/null
"$CLI" plan examples/train_hybrid_model.json --ranks 8 --ranks-per-node 2 \
	-m "$TMP/model.json" -o "$TMP/plan.conf"
scripts/cluster.sh down >/dev/null 2>&1 || true
CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 --port "$PORT" >/dev/null
run() {
	COLLSTACK_LIB=$BUILD/client/libcollstack.so PYTHONPATH=$PWD/python \
		timeout 600 "$CLI" launch -T 2 --cluster "$ENV" --timeout 500 -- \
		/usr/bin/python3 python/examples/train_hybrid.py --rows 200000 \
		--experts 8 --ffn 512 --steps "$STEPS" "$@"
}
echo "== 1. the plan's strategies ($(grep '^group' "$TMP/plan.conf" |
	awk '{ printf "%s%s=%s", (n++ ? ", " : ""), $2, $3 }'))"
run --config "$TMP/plan.conf"
echo "== 2. the embedding on allreduce, switched to ps at step $AT"
run --config examples/hybrid_expert_parallel.conf --switch-at "$AT" \
	--timeline "$TL"
echo "draw it: scripts/trace-plot.py $TL timeline.png"
