#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The trainer <-> sidecar IPC path, both sides polling (issue 6 goals):
#  1. post + completion of an empty operation (1-rank barrier), 1 trainer;
#  2. 8-byte allreduce across 4 local trainers through one sidecar, next to
#     Open MPI's shared-memory MPI_Allreduce (btl self,vader) with 4 ranks,
#     in the same run.
#   CS_IPC_ITERS (5000), CS_IPC_MPI_ITERS (2000: with more processes
#   polling than cores an Open MPI operation can take a scheduler time
#   slice, ~8 ms), CS_IPC_MPI_TIMEOUT seconds (300)
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
export COLLSTACK_SOCKET=$dir/cs.sock COLLSTACK_SPIN_POLLS=100000000
COLLSTACK_SIDECAR_BUSY=1 "$B/tests/client/mini_sidecar" "$COLLSTACK_SOCKET" \
	2>/dev/null &
sc=$!
for _ in $(seq 500); do [ -S "$COLLSTACK_SOCKET" ] && break; sleep 0.01; done

echo "# $(date -u '+%F %T') $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 1. empty operation, 1 trainer, sidecar and trainer both polling"
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
	"$B/examples/ipc_latency" --op barrier --iters "$ITERS"
echo "# 2. 8-byte allreduce, 4 local trainers through the sidecar"
pids=()
for r in 0 1 2 3; do
	RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 \
		"$B/examples/ipc_latency" --op allreduce --bytes 8 \
		--iters "$ITERS" >"$dir/r$r.out" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
cat "$dir"/r*.out
kill -TERM "$sc"; wait "$sc" 2>/dev/null || true; sc=""
echo "# 2'. Open MPI shared memory (btl self,vader), 4 ranks, 8 bytes"
timeout "$MPI_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np 4 \
	--bind-to none --mca btl self,vader --mca mpi_yield_when_idle 0 \
	"$B/tools/cs-mpi-bench" -o allreduce -b 8 -e 8 -f 2 \
	-n "$MPI_ITERS" -w 100 2>&1 | grep -v '^\s*$' ||
	echo "# Open MPI: no result within $MPI_TIMEOUT s"
