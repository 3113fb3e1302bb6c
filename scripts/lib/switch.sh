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
