#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU check of collstack (docs/gpu.md), in two steps:
#
#   scripts/gpu-check.sh pack   on a development machine: build build-gpu/
#                               (no DPDK, no verbs, no Criterion) and put the
#                               binaries and the shared libraries they need
#                               (ldd, glibc excepted) in build-gpu/carry/
#   scripts/gpu-check.sh        on a GPU machine (or here): run from
#                               build-gpu/carry/ (or $CS_GPU_CARRY):
#     1. test_gpu_core, test_ipc_dev  (no GPU needed)
#     2. test_gpu_dev     kernels vs the CPU reference, staging, IPC handles,
#                         dma-buf registration (skips with the reason, 77)
#     3. cs-gpu-bench     kernel GB/s vs device copy, staging vs pinned copy
#     4. 2- and 4-node allreduce, device buffers next to host buffers:
#        collstackd per node on loopback (udp port), cs-gpu-allreduce per
#        node, verified element by element; at 2 nodes also the Python
#        binding (python/examples/gpu_allreduce.py) and the torch backend
#        with CUDA tensors (python/examples/gpu_torch.py); then the 2-node
#        rows again with ipc.dev_pipe=0 (one operation's copies no longer
#        beside its own network step), and each run's count of pipelined
#        pieces
#
# Output goes to stdout and to $OUT/gpu-check-output.txt ($OUT: the device
# runner's folder; else build-gpu/). Every step has a time limit; the whole
# run takes well under 5 minutes. Exit 0 if nothing failed (skips are not
# failures), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = pack ]; then
	set -e
	[ -d build-gpu ] || meson setup build-gpu -Ddpdk=disabled \
		-Dverbs=disabled -Dtests=disabled -Dfuzz=disabled
	ninja -C build-gpu -j"${CS_JOBS:-2}" sidecar/collstackd \
		tests/gpu/test_gpu_core tests/gpu/test_ipc_dev \
		tests/gpu/test_gpu_dev tests/gpu/cs-gpu-bench \
		tests/gpu/cs-gpu-allreduce client/libcollstack.so.0.1.0
	rm -rf build-gpu/carry
	mkdir -p build-gpu/carry/bin build-gpu/carry/lib
	cp build-gpu/sidecar/collstackd build-gpu/tests/gpu/test_gpu_core \
		build-gpu/tests/gpu/test_ipc_dev build-gpu/tests/gpu/test_gpu_dev \
		build-gpu/tests/gpu/cs-gpu-bench \
		build-gpu/tests/gpu/cs-gpu-allreduce build-gpu/carry/bin/
	cp -L build-gpu/client/libcollstack.so.0 build-gpu/carry/lib/
	git rev-parse --short HEAD >build-gpu/carry/COMMIT
	git status --porcelain --untracked-files=no | grep -q . &&
		echo "(with uncommitted changes)" >>build-gpu/carry/COMMIT
	for b in build-gpu/carry/bin/*; do
		ldd "$b" | awk '/=> \// { print $3 }'
	done | sort -u | while read -r lib; do
		case "$(basename "$lib")" in
		libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|\
		ld-linux*|libcollstack.so*|libcuda.so*) ;;
		*) cp -L "$lib" build-gpu/carry/lib/ ;;
		esac
	done
	du -sh build-gpu/carry
	ls build-gpu/carry/bin build-gpu/carry/lib
	exit 0
fi

CARRY=${CS_GPU_CARRY:-build-gpu/carry}
BIN=$CARRY/bin
export LD_LIBRARY_PATH=$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUTDIR=${OUT:-build-gpu}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/gpu-check-output.txt
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

if [ ! -x "$BIN/test_gpu_dev" ]; then
	echo "gpu-check: no binaries in $BIN: run 'scripts/gpu-check.sh pack'" \
		"on a development machine first"
	exit 1
fi

fails=0
skips=0
summary=()
step() { # name limit_s command...
	local name=$1 limit=$2 rc
	shift 2
	echo
	echo "=== $name ($(date -u +%H:%M:%S) UTC, limit ${limit}s)"
	timeout -k 5 "$limit" "$@"
	rc=$?
	case $rc in
	0) summary+=("PASS $name") ;;
	77) summary+=("SKIP $name"); skips=$((skips + 1)) ;;
	124|137) summary+=("FAIL $name (timed out)"); fails=$((fails + 1)) ;;
	*) summary+=("FAIL $name (exit $rc)"); fails=$((fails + 1)) ;;
	esac
}

echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M:%S') UTC on $(hostname)," \
	"$(nproc) CPUs, binaries of commit $(tr '\n' ' ' <"$CARRY/COMMIT" \
	2>/dev/null || echo '?')"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total \
		--format=csv,noheader || true
	nvidia-smi topo -m 2>/dev/null | head -20 || true
else
	echo "nvidia-smi: not here"
fi
has_gpu=0
[ -e /dev/nvidiactl ] || nvidia-smi -L >/dev/null 2>&1 && has_gpu=1

step test_gpu_core 30 "$BIN/test_gpu_core"
step test_ipc_dev 30 "$BIN/test_ipc_dev"
step test_gpu_dev 75 "$BIN/test_gpu_dev"
if [ $has_gpu = 1 ]; then
	step cs-gpu-bench 45 "$BIN/cs-gpu-bench"
else
	echo; echo "=== cs-gpu-bench: skipped, no GPU (/dev/nvidiactl absent)"
	summary+=("SKIP cs-gpu-bench (no GPU)"); skips=$((skips + 1))
fi

# ---- allreduce of device buffers next to host buffers -----------------------
RUN=$(mktemp -d "${TMPDIR:-/tmp}/cs-gpu-check.XXXXXX")
pids=()
stop_cluster() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop_cluster; rm -rf "$RUN"' EXIT

# allreduce N [PIPE [any]]: N sidecars on loopback, one trainer each;
# PIPE: their ipc.dev_pipe (default: the sidecar's, 0: off); any: cut host
# buffers' operations too (ipc.dev_pipe_any=1)
allreduce() {
	local n=$1 pipe=${2:-} base=$((17900 + 20 * $1)) i dir tp=() rc=0
	local tag=$n${2:+p$2}${3:+a} extra=()
	[ -n "$pipe" ] && extra=(--set "ipc.dev_pipe=$pipe")
	[ -n "${3:-}" ] && extra+=(--set ipc.dev_pipe_any=1)
	: >"$RUN/peers$n"
	for ((i = 0; i < n; i++)); do
		printf '%d 127.0.0.1 02:78:00:00:%02x:%02x %d gc%d\n' $i $n \
			$((i + 1)) $((base + i)) $i >>"$RUN/peers$n"
	done
	for ((i = 0; i < n; i++)); do
		dir=$RUN/n$tag-$i
		"$BIN/collstackd" --set name=gc$n-$i --set run_dir="$dir" \
			--set node.rank=$i --set node.peers="$RUN/peers$n" \
			--set port.type=udp --set port.ip=127.0.0.1 \
			--set port.udp_port=$((base + i)) \
			--set lcore.poll=adaptive ${extra[@]+"${extra[@]}"} \
			</dev/null >"$RUN/n$tag-$i.log" 2>&1 &
		pids+=($!)
	done
	for ((i = 0; i < n; i++)); do
		for _ in $(seq 300); do
			[ -f "$RUN/n$tag-$i/ready" ] && break
			sleep 0.1
		done
		if [ ! -f "$RUN/n$tag-$i/ready" ]; then
			echo "collstackd $i of $n not ready:"
			tail -20 "$RUN/n$tag-$i.log"
			stop_cluster
			return 1
		fi
	done
	for ((i = 0; i < n; i++)); do
		COLLSTACK_SOCKET=$RUN/n$tag-$i/collstack.sock timeout -k 5 50 \
			"$BIN/cs-gpu-allreduce" $i "$n" >"$RUN/tr$n-$i.out" 2>&1 &
		tp+=($!)
	done
	for ((i = 0; i < n; i++)); do
		wait "${tp[$i]}" || rc=$?
	done
	cat "$RUN/tr$n-0.out"
	for ((i = 1; i < n; i++)); do
		[ -s "$RUN/tr$n-$i.out" ] && sed "s/^/rank $i: /" "$RUN/tr$n-$i.out"
	done
	# the Python binding: torch / CuPy tensors straight into allreduce
	if [ "$rc" = 0 ] && [ "$n" = 2 ] && [ -z "$pipe" ] &&
		command -v python3 >/dev/null; then
		tp=()
		for ((i = 0; i < n; i++)); do
			COLLSTACK_SOCKET=$RUN/n$tag-$i/collstack.sock \
			COLLSTACK_LIB=$CARRY/lib/libcollstack.so.0 \
				timeout -k 5 40 python3 python/examples/gpu_allreduce.py \
				$i "$n" >"$RUN/py$n-$i.out" 2>&1 &
			tp+=($!)
		done
		for ((i = 0; i < n; i++)); do
			wait "${tp[$i]}" || rc=$?
		done
		cat "$RUN"/py$n-*.out
		[ "$rc" = 77 ] && { echo "python: no torch/CuPy"; rc=0; }
	fi
	# the torch backend: CUDA tensors through init_process_group
	# ("collstack"), collectives and a few DDP steps (docs/torch.md)
	if [ "$rc" = 0 ] && [ "$n" = 2 ] && command -v python3 >/dev/null; then
		tp=()
		for ((i = 0; i < n; i++)); do
			COLLSTACK_SOCKET=$RUN/n$n-$i/collstack.sock \
			COLLSTACK_LIB=$CARRY/lib/libcollstack.so.0 \
			MASTER_ADDR=127.0.0.1 MASTER_PORT=$((base + 10)) \
				timeout -k 5 60 python3 python/examples/gpu_torch.py \
				$i "$n" >"$RUN/pt$n-$i.out" 2>&1 &
			tp+=($!)
		done
		for ((i = 0; i < n; i++)); do
			wait "${tp[$i]}" || rc=$?
		done
		cat "$RUN"/pt$n-*.out
		[ "$rc" = 77 ] && { echo "torch backend: no torch or no GPU"; rc=0; }
	fi
	echo "--- sidecar 0 log (gpu lines):"
	grep -E "gpu:|device" "$RUN/n$tag-0.log" | head -8
	stop_cluster
	# logged at stop: how many operations were cut into ipc.dev_pipe
	# slices and how many copy pieces ran beside their own operation's
	# network step (docs/gpu.md); nothing with ipc.dev_pipe=0
	echo "--- pipeline (sidecar 0, ipc.dev_pipe=${pipe:-0}):"
	grep -h "device pipeline:" "$RUN/n$tag-0.log" ||
		echo "no operation was pipelined"
	return $rc
}
# CS_GPU_HOST_ONLY=1: run the allreduce rows without a GPU, host buffers
# only (checks this harness on a development machine)
if [ $has_gpu = 1 ] || [ -n "${CS_GPU_HOST_ONLY:-}" ]; then
	export CS_GPU_HOST_ONLY
	for n in 2 4; do
		echo
		echo "=== allreduce-$n ($(date -u +%H:%M:%S) UTC, trainers'" \
			"limit 50s)"
		allreduce "$n" 16M
		rc=$?
		case $rc in
		0) summary+=("PASS allreduce-$n") ;;
		77) summary+=("SKIP allreduce-$n"); skips=$((skips + 1)) ;;
		*) summary+=("FAIL allreduce-$n (exit $rc)")
		   fails=$((fails + 1)) ;;
		esac
	done
	# One operation's copies beside its own network step: the 2-node
	# rows again with the pipeline off (ipc.dev_pipe=0: copy in, network,
	# copy out in sequence). Above, rows over 16M are cut into 16M
	# slices; the device rows' busbw of both runs side by side, and the
	# sidecar's count of copy pieces that ran beside their step, show the
	# overlap (figures printed, nothing asserted on time).
	echo
	echo "=== allreduce-2 with ipc.dev_pipe=0, the pipeline off" \
		"($(date -u +%H:%M:%S) UTC)"
	allreduce 2 0
	rc=$?
	case $rc in
	0) summary+=("PASS allreduce-2 (ipc.dev_pipe=0)") ;;
	77) summary+=("SKIP allreduce-2 (ipc.dev_pipe=0)"); skips=$((skips + 1)) ;;
	*) summary+=("FAIL allreduce-2 (ipc.dev_pipe=0, exit $rc)")
	   fails=$((fails + 1)) ;;
	esac
fi
# Without a GPU (CS_GPU_HOST_ONLY=1): the cut itself across real sidecars,
# host buffers cut into 1M slices (ipc.dev_pipe_any=1: nothing to
# overlap, but every slice is its own step on the wire, matched across
# the nodes by its id), verified element by element as above
if [ $has_gpu = 0 ] && [ -n "${CS_GPU_HOST_ONLY:-}" ]; then
	echo
	echo "=== allreduce-2, host buffers cut into 1M slices" \
		"(ipc.dev_pipe_any=1, $(date -u +%H:%M:%S) UTC)"
	allreduce 2 1M any
	rc=$?
	case $rc in
	0) summary+=("PASS allreduce-2 (1M slices, host)") ;;
	*) summary+=("FAIL allreduce-2 (1M slices, host, exit $rc)")
	   fails=$((fails + 1)) ;;
	esac
fi
if [ $has_gpu = 0 ] && [ -z "${CS_GPU_HOST_ONLY:-}" ]; then
	echo; echo "=== allreduce-2, allreduce-4: skipped, no GPU"
	summary+=("SKIP allreduce-2/4 (no GPU)"); skips=$((skips + 1))
fi

echo
echo "=== summary ($(date -u +%H:%M:%S) UTC)"
printf '%s\n' "${summary[@]}"
echo "gpu-check: $fails failed, $skips skipped"
[ $fails = 0 ]
