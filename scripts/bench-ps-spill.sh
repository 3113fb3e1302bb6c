#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Trainer tables with every row in memory vs most rows on the SSD tier,
# in one run on one 4-node netns cluster: `cs-trainer-ps train` (one
# trainer per node; a step is a push of KPP keys, waited for, then a pull
# of them, waited for; sync, SGD, f32 rows of DIM values, ROWS keys),
# once with mem_budget 0 and once with --budget BYTES per shard, ROUNDS
# times alternately. Prints each run's load average before it, the
# shards' rows held / in memory / written / read (from the sidecars' logs),
# and the sum over the 4 trainers of their pushes/s and pulls/s.
#
#   scripts/bench-ps-spill.sh [--steps S] [--rows R] [--dim D] [--kpp P]
#                             [--budget BYTES] [--rounds N] [--blocking]
#
# --blocking: the sidecars with ps.spill_async=0 (a pull's rows on disk
# read with the lcore waiting for them; default: read while it serves on).
#
# CS_CLUSTER (default pb) names the cluster; it is brought up here (spill
# files in a new folder under /var/tmp, ps.spill_dir) and taken down at
# exit. Needs root and a build (build/, or CS_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
TRAINER=$BUILD/tests/netns/cs-trainer-ps
STEPS=2000 ROWS=100000 DIM=16 KPP=64 BUDGET=65536 ROUNDS=2 ASYNC=1
while [ $# -gt 0 ]; do
	case $1 in
	--blocking) ASYNC=0; shift; continue ;;
	--steps) STEPS=$2 ;;
	--rows) ROWS=$2 ;;
	--dim) DIM=$2 ;;
	--kpp) KPP=$2 ;;
	--budget) BUDGET=$2 ;;
	--rounds) ROUNDS=$2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
	shift 2
done
export CS_CLUSTER=${CS_CLUSTER:-pb}
ENV=/run/collstack/cluster-$CS_CLUSTER.env
SD=$(mktemp -d /var/tmp/cs-ps-spill.XXXXXX)
trap 'scripts/cluster.sh down >/dev/null 2>&1; rm -rf "$SD"' EXIT
CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 --set ps.spill_dir="$SD" \
	--set ps.spill_async=$ASYNC

run() {	# BUDGET
	local out load i
	load=$(cut -d' ' -f1 /proc/loadavg)
	out=$(timeout 900 "$CLI" launch -T 1 --cluster "$ENV" --timeout 800 \
		--all-output -- "$TRAINER" train --steps "$STEPS" \
		--rows "$ROWS" --dim "$DIM" --kpp "$KPP" --budget "$1" 2>&1) ||
		{ echo "$out"; echo "FAIL: budget $1"; exit 1; }
	[ "$(grep -c '^ps_trainer ok .* wrong=0$' <<<"$out")" = 4 ] ||
		{ echo "$out"; echo "FAIL: budget $1: not 4 ok lines"; exit 1; }
	[ "$1" = 0 ] || for ((i = 0; i < 4; i++)); do
		grep 'spill file .* removed' "/run/collstack/${CS_CLUSTER}n$i.log" |
			tail -1 | sed 's/.*removed: /  n'$i': /' || true
	done
	grep '^ps_trainer rate' <<<"$out" | sed 's/^/  /'
	awk -v b="$1" -v a="$ASYNC" -v l="$load" '/^ps_trainer rate/ {
		for (i = 1; i <= NF; i++) {
			split($i, kv, "=")
			if (kv[1] == "pushes_per_s") pu += kv[2]
			if (kv[1] == "pulls_per_s") pl += kv[2]
		}
	} END {
		printf "ps_spill budget=%s spill_async=%s load=%s pushes_per_s=%.0f pulls_per_s=%.0f pushpull_per_s=%.0f\n",
			b, a, l, pu, pl, pu + pl
	}' <<<"$out"
}

for ((r = 0; r < ROUNDS; r++)); do
	run 0
	run "$BUDGET"
done
