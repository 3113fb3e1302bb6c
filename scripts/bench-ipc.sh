#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The trainer <-> sidecar IPC path, both sides polling (issue 6 goals):
#  1. post + completion of an empty operation (1-rank barrier), 1 trainer,
#     sidecar and trainer spinning (two pollers, two cores);
#  2. 8-byte allreduce across 4 local trainers through one sidecar, next to
#     Open MPI's shared-memory MPI_Allreduce (btl self,vader) with 4 ranks,
#     in the same run. Here pollers outnumber the cores (5 or 4 on 2), so
#     both stacks run twice: spinning without yielding, and yielding the
#     CPU while they wait (sidecar COLLSTACK_SIDECAR_BUSY=yield; Open MPI
#     --mca mpi_yield_when_idle 1). The trainers yield after 32 idle polls
#     in both runs (libcollstack's default, COLLSTACK_SPIN_YIELD).
#   CS_IPC_ITERS (5000), CS_IPC_MPI_ITERS (2000: with more processes
#   polling than cores an Open MPI operation can take a scheduler time
#   slice, ~8 ms), CS_IPC_MPI_TIMEOUT seconds per Open MPI run (300)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${CS_BUILD_DIR:-build}
ITERS=${CS_IPC_ITERS:-5000}
MPI_ITERS=${CS_IPC_MPI_ITERS:-2000}
MPI_TIMEOUT=${CS_IPC_MPI_TIMEOUT:-300}
dir=$(mktemp -d)
sc=""
cleanup() {
	[ -n "$sc" ] && kill -TERM "$sc" 2>/dev/null && wait "$sc" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
export COLLSTACK_SOCKET=$dir/cs.sock COLLSTACK_SPIN_POLLS=100000000 COLLSTACK_SPIN_US=100000000

sidecar() {	# start the mini sidecar in mode $1 (COLLSTACK_SIDECAR_BUSY)
	COLLSTACK_SIDECAR_BUSY=$1 "$B/tests/client/mini_sidecar" \
		"$COLLSTACK_SOCKET" 2>/dev/null &
	sc=$!
	for _ in $(seq 500); do
		[ -S "$COLLSTACK_SOCKET" ] && break
		sleep 0.01
	done
}

sidecar_stop() {
	kill -TERM "$sc"
	wait "$sc" 2>/dev/null || true
	sc=""
	rm -f "$COLLSTACK_SOCKET"
}

allreduce4() {	# 4 local trainers, 8 bytes
	local pids=() r p
	for r in 0 1 2 3; do
		RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 \
			"$B/examples/ipc_latency" --op allreduce --bytes 8 \
			--iters "$ITERS" >"$dir/r$r.out" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done
	cat "$dir"/r*.out
}

mpi4() {	# Open MPI vader, 4 ranks, 8 bytes; $1: mpi_yield_when_idle
	timeout "$MPI_TIMEOUT" mpirun --allow-run-as-root --oversubscribe \
		-np 4 --bind-to none --mca btl self,vader \
		--mca mpi_yield_when_idle "$1" \
		"$B/tools/cs-mpi-bench" -o allreduce -b 8 -e 8 -f 2 \
		-n "$MPI_ITERS" -w 100 2>&1 | grep -v '^\s*$' ||
		echo "# Open MPI: no result within $MPI_TIMEOUT s"
}

echo "# $(date -u '+%F %T') $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 1. empty operation, 1 trainer, sidecar and trainer both polling"
sidecar 1
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
	"$B/examples/ipc_latency" --op barrier --iters "$ITERS"
echo "# 2a. 8-byte allreduce, 4 local trainers, sidecar spinning"
allreduce4
sidecar_stop
echo "# 2b. 8-byte allreduce, 4 local trainers, sidecar yielding when idle"
sidecar yield
allreduce4
sidecar_stop
echo "# 2'a. Open MPI shared memory (btl self,vader), 4 ranks, 8 bytes, mpi_yield_when_idle 0"
mpi4 0
echo "# 2'b. the same, mpi_yield_when_idle 1"
mpi4 1
