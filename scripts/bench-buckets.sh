#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# DDP buckets on ONE trainer group through collstackd: `collstack bench -k
# K` (each iteration posts K allreduce buckets of B bytes on buffers of
# their own before waiting for any) against -k 1 (each bucket waited for
# before the next is posted), alternated R times on the same 4-node
# cluster; every element of every bucket is checked (#wrong must be 0).
# With --also-serial-ipc it brings up a second cluster with
# ipc.group_inflight=1 (a group's operations one at a time, as before)
# and runs -k K there too. Prints each run (per-bucket time in us, busbw
# in GB/s, out of place) and the medians. Root; uses scripts/cluster.sh.
#
#   scripts/bench-buckets.sh [--port af_packet|udp] [--trainers T]
#                            [--bytes B] [--buckets K] [--reps R]
#                            [--iters N] [--also-serial-ipc]
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=af_packet T=1 BYTES=4M K=8 REPS=3 ITERS=4 SERIAL_IPC=0
while [ $# -gt 0 ]; do
	case $1 in
	--port) PORT=$2; shift 2 ;;
	--trainers) T=$2; shift 2 ;;
	--bytes) BYTES=$2; shift 2 ;;
	--buckets) K=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--also-serial-ipc) SERIAL_IPC=1; shift ;;
	*) echo "bench-buckets: unknown option $1" >&2; exit 2 ;;
	esac
done
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
NODES=4
export CS_CLUSTER=${CS_CLUSTER:-bkt}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT

up() {	# [--set k=v ...]
	scripts/cluster.sh down >/dev/null 2>&1 || true
	CS_BUILD_DIR=$BUILD scripts/cluster.sh up $NODES --port "$PORT" "$@" \
		>/dev/null
}

# one run: K -> "us busbw" of the out-of-place row (per bucket)
run() {
	local out row
	out=$("$CLI" bench -o allreduce -b "$BYTES" -e "$BYTES" -n "$ITERS" \
		-w 1 -k "$1" --trainers-per-node "$T" --timeout 600)
	row=$(awk '!/^#/ && $12 == "out"' <<<"$out")
	[ -n "$row" ] || { echo "$out" >&2; echo "bench-buckets: no row" >&2; exit 1; }
	[ "$(awk '{print $9}' <<<"$row")" = 0 ] ||
		{ echo "$out" >&2; echo "bench-buckets: wrong elements" >&2; exit 1; }
	awk '{print $6, $8}' <<<"$row"
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

declare -A us
up
for ((r = 0; r < REPS; r++)); do
	for k in 1 "$K"; do
		read -r t bw < <(run "$k")
		echo "run $r k=$k us_per_bucket=$t busbw=$bw load=$(cut -d' ' -f1 /proc/loadavg)"
		us[$k]="${us[$k]:-} $t"
	done
done
if [ $SERIAL_IPC = 1 ]; then
	up --set ipc.group_inflight=1
	for ((r = 0; r < REPS; r++)); do
		read -r t bw < <(run "$K")
		echo "run $r k=$K ipc.group_inflight=1 us_per_bucket=$t busbw=$bw load=$(cut -d' ' -f1 /proc/loadavg)"
		us[serial]="${us[serial]:-} $t"
	done
fi
# shellcheck disable=SC2086
m1=$(median ${us[1]}) mk=$(median ${us[$K]})
line="buckets port=$PORT trainers=$T bytes=$BYTES k=$K k1_us=$m1 k${K}_us=$mk speedup=$(awk -v a="$m1" -v b="$mk" 'BEGIN { printf "%.2f", a / b }')"
if [ $SERIAL_IPC = 1 ]; then
	# shellcheck disable=SC2086
	ms=$(median ${us[serial]})
	line="$line k${K}_group_inflight1_us=$ms"
fi
echo "$line"
