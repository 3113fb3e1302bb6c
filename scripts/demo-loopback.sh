#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A 4-node collstack cluster without root: four collstackd processes on
# loopback with the io_uring UDP port (no namespaces, no hugepages), real
# allreduces across them, then a clean shutdown (SIGTERM, by PID).
#
#   CS_DEMO_NODES=N (4)  CS_DEMO_BASE_PORT=P (17700)
set -euo pipefail
cd "$(dirname "$0")/.."

N=${CS_DEMO_NODES:-4}
BASE=${CS_DEMO_BASE_PORT:-17700}
BUILD=${CS_BUILD_DIR:-build}
RUN=$(mktemp -d "${TMPDIR:-/tmp}/collstack-demo.XXXXXX")
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$RUN"
}
trap cleanup EXIT

nodes=""
: >"$RUN/peers"
for ((i = 0; i < N; i++)); do
	printf '%d 127.0.0.1 02:77:00:00:01:%02x %d lo%d\n' $i $((i + 1)) \
		$((BASE + i)) $i >>"$RUN/peers"
	nodes+="lo$i "
done
for ((i = 0; i < N; i++)); do
	"$BUILD/sidecar/collstackd" --set name=lo$i --set run_dir="$RUN/lo$i" \
		--set node.rank=$i --set node.peers="$RUN/peers" \
		--set port.type=udp --set port.ip=127.0.0.1 \
		--set port.udp_port=$((BASE + i)) --set lcore.poll=adaptive \
		</dev/null >"$RUN/lo$i.log" 2>&1 &
	pids+=($!)
done
printf 'CS_NODES="%s"\nCS_RUN=%s\n' "${nodes% }" "$RUN" >"$RUN/cluster.env"
for ((i = 0; i < N; i++)); do
	for _ in $(seq 300); do
		[ -f "$RUN/lo$i/ready" ] && break
		kill -0 "${pids[$i]}" 2>/dev/null || {
			echo "demo: collstackd lo$i exited:"; cat "$RUN/lo$i.log"
			exit 1
		}
		sleep 0.1
	done
	[ -f "$RUN/lo$i/ready" ] || { echo "demo: lo$i not ready"; exit 1; }
done
echo "demo: $N sidecars on loopback (udp port), run folder $RUN"
"$BUILD/tools/collstack" run allreduce --cluster "$RUN/cluster.env" \
	-b 4K -e 4M --iters 5
"$BUILD/tools/collstack" bench -o allreduce -b 4K -e 1M -f 4 -n 5 -w 1 \
	--trainers-per-node 1 --cluster "$RUN/cluster.env" --no-netns
