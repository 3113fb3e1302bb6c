#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The cost model's benchmark: fit on 4 simulated nodes, then compare its
# predictions with the simulator at 8, 64 and 256 ranks (allreduce 4 KiB
# to 16 MiB, all-to-all 16 KiB to 1 MiB, the PS scenario), and print the
# planner's table for examples/hybrid_model.json at 64 and 256 ranks.
# Writes the model to ${CS_MODEL:-build/model.json} and the log to
# docs/logs/model-check.txt. Usage: scripts/model-check.sh [--no-big]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${CS_BUILD_DIR:-build}
M=${CS_MODEL:-$B/model.json}
big=--big
[ "${1:-}" = --no-big ] && big=
export CS_PS_SCEN=${CS_PS_SCEN:-$B/tests/ps/ps_scen}
log=docs/logs/model-check.txt
mkdir -p docs/logs
{
	echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(uname -n), $(nproc) CPUs"
	echo "\$ collstack model fit -o $M"
	"$B"/tools/collstack model fit -o "$M" 2>&1
	echo "\$ collstack model check -m $M $big"
	"$B"/tools/collstack model check -m "$M" $big || true
	for n in 64 256; do
		echo "\$ collstack plan examples/hybrid_model.json --ranks $n -m $M"
		"$B"/tools/collstack plan examples/hybrid_model.json --ranks $n -m "$M"
	done
} 2>&1 | tee "$log"
