#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A bare N-namespace bridge for benchmarks that need no collstackd (the Open
# MPI side of bench-vs-mpi.sh, development runs). Names differ from
# scripts/cluster.sh so both can be up at once:
#
#   namespaces csb0..csbN-1, bridge csbbr0, host-side veths csbv<i>,
#   namespace-side veths csbd<i> with 10.78.0.<i+1>/24.
#
#   scripts/lib/netns.sh up N     (2..32)
#   scripts/lib/netns.sh down
#   scripts/lib/netns.sh status
#
# State: /run/collstack-bench/netns.env, in the same variables as
# cluster.sh's cluster.env (CS_NODES, CS_BRIDGE, CS_VETHS) plus CS_IFACES and
# CS_ADDRS (namespace-side interface and address of each node, in order).
# Only root namespace state it makes is the bridge and the host-side veths;
# `down` removes exactly what the state file lists.
set -euo pipefail

NB_RUN=${CS_NETNS_RUN:-/run/collstack-bench}
NB_ENV=$NB_RUN/netns.env
NB_PREFIX=csb
NB_BR=csbbr0
NB_NET=10.78.0

nb_die() { echo "netns: $*" >&2; exit 1; }

nb_down() {
	local n v
	[ -f "$NB_ENV" ] || return 0
	# shellcheck disable=SC1090
	. "$NB_ENV"
	for n in ${CS_NODES:-}; do
		ip netns del "$n" 2>/dev/null || true
	done
	for v in ${CS_VETHS:-}; do
		ip link del "$v" 2>/dev/null || true
	done
	ip link del "${CS_BRIDGE:-$NB_BR}" 2>/dev/null || true
	rm -f "$NB_ENV"
	rmdir "$NB_RUN" 2>/dev/null || true
	echo "netns: down"
}

nb_up() {
	local n=${1:-} i nodes="" veths="" ifaces="" addrs=""
	[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 32 ] ||
		nb_die "usage: netns.sh up N (2..32)"
	[ "$(id -u)" -eq 0 ] || nb_die "needs root"
	[ -f "$NB_ENV" ] && nb_die "already up ($NB_ENV): down first"
	for ((i = 0; i < n; i++)); do
		ip netns list | grep -qw "$NB_PREFIX$i" &&
			nb_die "namespace $NB_PREFIX$i exists but is not ours"
		nodes+="$NB_PREFIX$i "
		veths+="${NB_PREFIX}v$i "
		ifaces+="${NB_PREFIX}d$i "
		addrs+="$NB_NET.$((i + 1)) "
	done
	ip link show "$NB_BR" >/dev/null 2>&1 &&
		nb_die "link $NB_BR exists but is not ours"
	mkdir -p "$NB_RUN"
	# Record first, so `down` can undo a half-made set-up.
	cat >"$NB_ENV" <<EOF
# written by scripts/lib/netns.sh up; read by bench-vs-mpi.sh and netns.sh down
CS_NODES="${nodes% }"
CS_BRIDGE=$NB_BR
CS_VETHS="${veths% }"
CS_IFACES="${ifaces% }"
CS_ADDRS="${addrs% }"
CS_PREFIXLEN=24
EOF
	trap 'echo "netns: set-up failed, tearing down" >&2; nb_down; exit 1' ERR
	ip link add "$NB_BR" type bridge
	ip link set "$NB_BR" up
	for ((i = 0; i < n; i++)); do
		local ns=$NB_PREFIX$i
		ip netns add "$ns"
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
		ip -n "$ns" link set lo up
		ip link add "${NB_PREFIX}v$i" type veth peer name \
			"${NB_PREFIX}d$i" netns "$ns"
		ip link set "${NB_PREFIX}v$i" master "$NB_BR" up
		ip -n "$ns" addr add "$NB_NET.$((i + 1))/24" dev "${NB_PREFIX}d$i"
		ip -n "$ns" link set "${NB_PREFIX}d$i" up
	done
	trap - ERR
	echo "netns: up: $n namespaces (${nodes% }), bridge $NB_BR, $NB_NET.0/24"
}

nb_status() {
	[ -f "$NB_ENV" ] || { echo "netns: not up"; return 1; }
	cat "$NB_ENV"
}

# Run as a command unless sourced.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	case ${1:-} in
	up) shift; nb_up "$@" ;;
	down) nb_down ;;
	status) nb_status ;;
	*) echo "usage: $0 up N | down | status" >&2; exit 2 ;;
	esac
fi
