#!/bin/sh
# SPDX-License-Identifier: MIT
# The MoE figures of docs/alltoall.md: collstack sim moe at 32 ranks
# (4 nodes x 8), 256 tokens of 1024 f32 per rank, top-8 of 64 experts,
# uniform and Zipf 1.1, flat vs two-level vs rail vs rail with a token's
# row once per node (--node-rows) vs that with the combine summed per node
# (--node-sum), clean and 1 % loss. Every dispatched row and every output
# value is checked bit for bit.
# Usage: scripts/sim-moe.sh [build dir]
set -eu
B=${1:-build}
C="$B/tools/collstack sim moe --nodes 4 --ranks-per-node 8 --tokens 256 --hidden 1024 --topk 8 --experts 64"
date -u
for skew in 0 1.1; do
	for loss in 0 0.01; do
		for algo in flat two-level rail "rail --node-rows" "rail --node-sum"; do
			$C --skew $skew --loss $loss --algo $algo
		done
	done
done
