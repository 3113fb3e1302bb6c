#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# DDP-style overlap on the transport core: N buckets of B bytes allreduced
# over a 4-node netns cluster, posted back to back (all in
# flight) against posted one after another (each waited for before the
# next), alternated R times in one run; prints each run and the ratio of
# the medians (serial / overlapped). Root; uses scripts/cluster.sh.
#
#   scripts/bench-overlap.sh [--port af_packet|udp] [--buckets N]
#                            [--bytes B] [--reps R] [--bridge-loss P]
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=af_packet BUCKETS=16 BYTES=4M REPS=3 LOSS=()
while [ $# -gt 0 ]; do
	case $1 in
	--port) PORT=$2; shift 2 ;;
	--buckets) BUCKETS=$2; shift 2 ;;
	--bytes) BYTES=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--bridge-loss) LOSS=(--bridge-loss "$2"); shift 2 ;;
	*) echo "bench-overlap: unknown option $1" >&2; exit 2 ;;
	esac
done
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
export CS_CLUSTER=${CS_CLUSTER:-ovl}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 --port "$PORT" \
	"${LOSS[@]}" >/dev/null
ser=() ovl=()
for ((r = 0; r < REPS; r++)); do
	for mode in serial overlapped; do
		args=(--buckets "$BUCKETS" --bytes "$BYTES")
		[ $mode = serial ] && args+=(--serial)
		out=$("$CLI" run buckets "${args[@]}")
		echo "$out"
		t=$(sed -n 's/.* time_us=\([0-9.]*\).*/\1/p' <<<"$out")
		[ $mode = serial ] && ser+=("$t") || ovl+=("$t")
	done
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ms=$(median "${ser[@]}") mo=$(median "${ovl[@]}")
awk -v s="$ms" -v o="$mo" -v p="$PORT" -v b="$BUCKETS" -v B="$BYTES" 'BEGIN {
	printf "overlap port=%s buckets=%s bytes=%s serial_ms=%.1f overlapped_ms=%.1f speedup=%.2f\n",
	       p, b, B, s / 1e3, o / 1e3, s / o }'
