#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Set up a Debian 12 machine for collstack, then build into build/.
# Idempotent. As root it installs packages and reserves hugepages; as another
# user it only checks and builds (and says what it could not do).
#
#   CS_HUGEPAGES=N   2 MiB hugepages to reserve (default 256; 0 skips)
#   CS_SKIP_APT=1    do not call apt-get (packages must already be there)
#   CS_BUILD_DIR=D   build folder (default build)
set -euo pipefail
cd "$(dirname "$0")/.."

HUGEPAGES=${CS_HUGEPAGES:-256}
BUILD=${CS_BUILD_DIR:-build}

# Every Debian package the build, tests, demo and benchmarks use.
PKGS=(
	build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
	libcriterion-dev liburing-dev libnuma-dev libhwloc-dev libsodium-dev libssl-dev
	libjansson-dev etcd-server
	dpdk libdpdk-dev libibverbs-dev rdma-core libxdp-dev libbpf-dev
	openmpi-bin libopenmpi-dev iperf3 gnuplot-nox
	libmicrohttpd-dev prometheus curl
	python3 python3-numpy python3-cffi python3-torch
	iproute2 nftables iptables procps util-linux kmod ethtool
)

log() { printf 'setup: %s\n' "$*"; }
warn() { printf 'setup: WARNING: %s\n' "$*" >&2; }

is_root() { [ "$(id -u)" -eq 0 ]; }

missing_pkgs() {
	local p out=()
	for p in "${PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q 'install ok installed' || out+=("$p")
	done
	printf '%s\n' "${out[@]}"
}

install_packages() {
	local miss
	miss=$(missing_pkgs)
	[ -z "$miss" ] && { log "packages: all present"; return 0; }
	if [ "${CS_SKIP_APT:-0}" = 1 ] || ! is_root; then
		warn "missing packages (run as root to install):" $miss
		return 0
	fi
	log "installing:" $miss
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $miss >/dev/null
}

setup_hugepages() {
	[ "$HUGEPAGES" -gt 0 ] 2>/dev/null || { log "hugepages: skipped"; return 0; }
	if ! is_root; then
		warn "not root: hugepages not reserved (DPDK ports then need --no-huge)"
		return 0
	fi
	if ! grep -qs ' /dev/hugepages hugetlbfs' /proc/mounts; then
		mkdir -p /dev/hugepages
		mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null ||
			warn "could not mount hugetlbfs on /dev/hugepages"
	fi
	local f=/proc/sys/vm/nr_hugepages have
	have=$(cat $f 2>/dev/null || echo 0)
	if [ "$have" -lt "$HUGEPAGES" ]; then
		echo "$HUGEPAGES" >$f 2>/dev/null || true
		have=$(cat $f 2>/dev/null || echo 0)
	fi
	if [ "$have" -lt "$HUGEPAGES" ]; then
		warn "only $have of $HUGEPAGES hugepages could be reserved; DPDK ports fall back to --no-huge"
	else
		log "hugepages: $have x 2 MiB reserved, hugetlbfs on /dev/hugepages"
	fi
}

build() {
	if [ ! -f "$BUILD/build.ninja" ]; then
		meson setup "$BUILD" >/dev/null
	fi
	ninja -C "$BUILD" >/dev/null
	log "built into $BUILD/"
}

install_packages
setup_hugepages
build
