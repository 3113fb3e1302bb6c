#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: set up this machine (packages, hugepages, build), check the
# building blocks, run the collectives in the simulator, then bring up a
# 4-node cluster of sidecars in network namespaces, run real allreduces
# across it and tear it down.
#
#   CS_DEMO_PORT=af_packet|af_xdp|memif|udp   cluster port (af_packet)
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${CS_DEMO_PORT:-af_packet}
CLI=build/tools/collstack

say() { printf '\n== %s\n' "$*"; }

scripts/setup.sh

say "selftest: codec, authentication, reduction kernels"
$CLI selftest

say "simulator: 8-rank ring allreduce of 64 MiB on 100 Gb/s links"
$CLI sim allreduce --ranks 8 --bytes 64M
$CLI sim allreduce --ranks 8 --bytes 64M --loss 0.01
say "simulator: 64 ranks, 4 MiB, f32 and bf16"
$CLI sim allreduce --ranks 64 --bytes 4M --dtype f32
$CLI sim allreduce --ranks 64 --bytes 4M --dtype bf16

if [ "$(id -u)" -ne 0 ]; then
	say "not root: network namespaces unavailable, using the udp port on loopback"
	exec scripts/demo-loopback.sh
fi

say "cluster: 4 sidecars in network namespaces, port $PORT"
trap 'scripts/cluster.sh down >/dev/null 2>&1 || true' EXIT
mtu=9000
[ "$PORT" = af_xdp ] && mtu=3500
scripts/cluster.sh up 4 --port "$PORT" --mtu $mtu
say "allreduce sweep across the cluster, sidecars' own buffers (every element verified)"
$CLI run allreduce -b 4K -e 16M --iters 5
say "allreduce through libcollstack: 2 trainers per node, 8 ranks"
$CLI bench -o allreduce -b 4K -e 4M -f 4 -n 5 -w 1 --trainers-per-node 2
say "data-parallel logistic regression, one trainer per node (numpy over shared buffers)"
. /run/collstack/cluster.env
lib=$PWD/build/client/libcollstack.so
pids=()
i=0
for ns in $CS_NODES; do
	ip netns exec "$ns" env RANK=$i WORLD_SIZE=4 LOCAL_RANK=0 \
		LOCAL_WORLD_SIZE=1 COLLSTACK_LIB="$lib" \
		COLLSTACK_SOCKET="$CS_RUN/$ns/collstack.sock" \
		timeout 300 /usr/bin/python3 python/examples/train_logreg.py &
	pids+=($!)
	i=$((i + 1))
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ $rc = 0 ] || echo "demo: training FAILED"
scripts/cluster.sh down
trap - EXIT
say "done"
