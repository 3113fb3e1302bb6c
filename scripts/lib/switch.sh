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

cs_cpu_list() {	# LIST ("0,2-3") -> the CPUs, one word each; non-zero if bad
	local part a b c parts=()
	[[ "$1" =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] || return 1
	IFS=, read -r -a parts <<<"$1"
	for part in "${parts[@]}"; do
		a=${part%-*} b=${part#*-}
		[ "$b" -ge "$a" ] || return 1
		for ((c = a; c <= b; c++)); do printf '%s ' "$c"; done
	done
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
# Prints N words (empty for none); non-zero on a bad MODE, or (with a
# message) on a CPU outside this shell's affinity.
cs_node_cpus() {
	local mode=$1 n=$2 allowed list c i cpus=()
	allowed=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
	case $mode in
	none) return 0 ;;
	auto) list=$allowed ;;
	*) list=$mode ;;
	esac
	list=$(cs_cpu_list "$list") || return 1
	read -r -a cpus <<<"$list"
	[ ${#cpus[@]} -ge 1 ] || return 1
	if [ "$mode" != auto ]; then	# only CPUs this process may run on
		allowed=" $(cs_cpu_list "$allowed")"
		for c in "${cpus[@]}"; do
			[[ $allowed == *" $c "* ]] || {
				echo "CPU $c is not one this shell may run on (allowed: $(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status))" >&2
				return 1
			}
		done
	fi
	for ((i = 0; i < n; i++)); do
		printf '%s%s' "$([ $i = 0 ] || echo ' ')" "${cpus[i % ${#cpus[@]}]}"
	done
	echo
}
