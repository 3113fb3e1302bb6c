#!/bin/sh
# SPDX-License-Identifier: MIT
# Parameter server, engine only: what one core of a shard store applies
# (push rows/s), serves (pull rows/s), and push rows/s while a checkpoint
# of the whole shard is written (io_uring, control thread). 64-byte and
# 1 KiB rows. No network (the engine alone: scripts/bench-ps-vs-mpi.sh
# has the PS through the sidecars). The load average is printed first: on
# a shared machine the figures move with it.
#
#   scripts/bench-ps.sh [SHARD_MB (256)] [SECONDS (3)] [SHARE (0.05)]
#
# The checkpoint runs twice per row size: paced (its snapshot steps take
# at most SHARE of the core's time, struct cs_ps_snap_pace) and unpaced
# (1024 rows after every 4 pushes); each compares the push rate while it
# runs with the mean of the windows right before and right after it.
set -eu
cd "$(dirname "$0")/.."
mb=${1:-256}
secs=${2:-3}
share=${3:-0.05}
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build tests/ps/ps_bench >/dev/null
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cs-ps-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo ?)" \
	"load: $(cut -d' ' -f1-3 /proc/loadavg) cpus: $(nproc)"
for dim in 16 256; do
	for pace in "--share $share" "--step 1024"; do
		# shellcheck disable=SC2086
		build/tests/ps/ps_bench --dim "$dim" --mb "$mb" --seconds "$secs" \
			--keys-per-msg 256 --ckpt "$tmp/ckpt" $pace
		rm -f "$tmp/ckpt"
	done
done
