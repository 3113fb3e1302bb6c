#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The switch of a cluster on one machine: namespace NS holding bridge BR.
# The bridge has a namespace of its own so that nothing of the host's
# firewall applies to it: bridge-nf-call-* (br_netfilter, on where Docker
# or Kubernetes run) is off there (the sysctls are per namespace and
# absent without br_netfilter), and the host's FORWARD policy never sees
# the frames. IPv6 is off (no router solicitations on the dataplane).
# Sourced by scripts/cluster.sh, scripts/lib/netns.sh and
# tests/netns/test_trainers.sh; removing NS removes the bridge and the
# veth ends in it.

cs_switch_up() {	# NS BR [MTU]; non-zero if NS or BR cannot be made
	ip netns add "$1" || return
	ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
	ip netns exec "$1" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
	for f in iptables ip6tables arptables; do
		ip netns exec "$1" sysctl -qw \
			"net.bridge.bridge-nf-call-$f=0" 2>/dev/null || true
	done
	ip -n "$1" link add "$2" type bridge || return
	ip -n "$1" link set "$2" ${3:+mtu "$3"} up
}

# The CPU of each node of a cluster on one machine: node i runs on the
# (i mod k)-th of the k CPUs this shell may use (its affinity), so each
# node's sidecar, and the trainers `collstack bench` starts beside it
# (they follow the sidecar's affinity), share a CPU as a real node's
# processes share its cores. On a 2-core machine with 4 nodes this halved
# the 4 KiB allreduce time (docs/dataplane.md): a hand-off between a
# trainer and its sidecar, or between two sidecars on one CPU, is a
# context switch instead of a wake-up on another, possibly halted, CPU.
#   cs_node_cpus MODE N    MODE: auto, none, or a CPU list ("0,2-3") to
#                          use instead of the affinity
# Prints N words (empty for none); non-zero on a bad MODE.
cs_node_cpus() {
	local mode=$1 n=$2 list part a b c i cpus=() parts=()
	case $mode in
	none) return 0 ;;
	auto) list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status) ;;
	*) list=$mode ;;
	esac
	[[ "$list" =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] || return 1
	IFS=, read -r -a parts <<<"$list"
	for part in "${parts[@]}"; do
		a=${part%-*} b=${part#*-}
		[ "$b" -ge "$a" ] || return 1
		for ((c = a; c <= b; c++)); do cpus+=("$c"); done
	done
	[ ${#cpus[@]} -ge 1 ] || return 1
	for ((i = 0; i < n; i++)); do
		printf '%s%s' "$([ $i = 0 ] || echo ' ')" "${cpus[i % ${#cpus[@]}]}"
	done
	echo
}
