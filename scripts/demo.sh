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
say "allreduce sweep across the cluster (every element verified)"
$CLI run allreduce -b 4K -e 16M --iters 5
scripts/cluster.sh down
trap - EXIT
say "done"
