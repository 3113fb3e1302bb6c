#!/bin/sh
# SPDX-License-Identifier: MIT
# The figures of docs/alltoall.md: collstack sim alltoall at 64 ranks
# (8 nodes x 8 ranks, 100 Gb/s per rank, 1 MiB switch port buffers):
# flat vs two-level vs two-level unbucketed, even and skewed block sizes,
# 4 KiB and 64 KiB blocks, clean and 1 % loss, flat with receiver credit.
# Every element is verified in every run. Output: one line per run.
# Usage: scripts/sim-alltoall.sh [build dir] (about 15 min on 2 cores)
set -eu
B=${1:-build}
C="$B/tools/collstack sim alltoall --nodes 8 --ranks-per-node 8"
date -u
for bytes in 256K 4M; do
	for extra in "" "--uneven" "--loss 0.01"; do
		for algo in "flat" "two-level" "two-level --no-bucket"; do
			$C --bytes $bytes --algo $algo $extra
		done
	done
	$C --bytes $bytes --algo flat --credit 256K
	$C --bytes $bytes --algo auto
done
