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
#                            [--trainers]
#
# --trainers: the buckets are trainers' (one per node, libcollstack
# through collstackd's IPC), bucket i on a group of its own (a group's
# operations still run one at a time; different groups' run together,
# up to ipc.inflight), 4 rounds each run (tests/netns/cs-trainer-groups,
# every element checked; time: node 0's trainer, posts and waits only).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=af_packet BUCKETS=16 BYTES=4M REPS=3 LOSS=() TRAINERS=0
while [ $# -gt 0 ]; do
	case $1 in
	--port) PORT=$2; shift 2 ;;
	--buckets) BUCKETS=$2; shift 2 ;;
	--bytes) BYTES=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--bridge-loss) LOSS=(--bridge-loss "$2"); shift 2 ;;
	--trainers) TRAINERS=1; shift ;;
	*) echo "bench-overlap: unknown option $1" >&2; exit 2 ;;
	esac
done
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
GRP=$BUILD/tests/netns/cs-trainer-groups
NODES=4
export CS_CLUSTER=${CS_CLUSTER:-ovl}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
CS_BUILD_DIR=$BUILD scripts/cluster.sh up $NODES --port "$PORT" \
	"${LOSS[@]}" >/dev/null
# --trainers: one trainer per node, bucket i on group b<i>; prints node
# 0's line ("ok groups=.. wrong=0 time_us=..")
trainers_run() {	# serial|overlapped
	local i pids=() groups count mode=() out
	groups=$(seq -s, -f 'b%g' 0 $((BUCKETS - 1)))
	count=$(numfmt --from=iec "$BYTES")
	count=$((count / 4))
	[ "$1" = serial ] && mode=(serial)
	for ((i = 0; i < NODES; i++)); do
		ip netns exec "${CS_CLUSTER}n$i" env \
			COLLSTACK_SOCKET=/run/collstack/${CS_CLUSTER}n$i/collstack.sock \
			"$GRP" "$i" "$NODES" 0 1 "$groups" 4 "$count" "${mode[@]}" \
			>"/tmp/overlap-$CS_CLUSTER-$i.out" 2>&1 &
		pids+=($!)
	done
	for ((i = 0; i < NODES; i++)); do
		wait "${pids[$i]}" || {
			cat "/tmp/overlap-$CS_CLUSTER-$i.out" >&2
			echo "bench-overlap: trainer $i failed" >&2
			exit 1
		}
	done
	out=$(cat "/tmp/overlap-$CS_CLUSTER-0.out")
	rm -f /tmp/overlap-"$CS_CLUSTER"-*.out
	echo "$1 $out"
}

[ $TRAINERS = 0 ] || [ -x "$GRP" ] || { echo "bench-overlap: not built: $GRP" >&2; exit 1; }
ser=() ovl=()
for ((r = 0; r < REPS; r++)); do
	for mode in serial overlapped; do
		if [ $TRAINERS = 1 ]; then
			out=$(trainers_run $mode)
		else
			args=(--buckets "$BUCKETS" --bytes "$BYTES")
			[ $mode = serial ] && args+=(--serial)
			out=$("$CLI" run buckets "${args[@]}")
		fi
		echo "$out"
		t=$(sed -n 's/.* time_us=\([0-9.]*\).*/\1/p' <<<"$out")
		[ $mode = serial ] && ser+=("$t") || ovl+=("$t")
	done
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ms=$(median "${ser[@]}") mo=$(median "${ovl[@]}")
awk -v s="$ms" -v o="$mo" -v p="$PORT" -v b="$BUCKETS" -v B="$BYTES" \
    -v t="$TRAINERS" 'BEGIN {
	printf "overlap port=%s buckets=%s bytes=%s trainers=%s serial_ms=%.1f overlapped_ms=%.1f speedup=%.2f\n",
	       p, b, B, t, s / 1e3, o / 1e3, s / o }'
