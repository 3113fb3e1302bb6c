#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A bare N-namespace bridge for benchmarks that need no collstackd (the Open
# MPI side of bench-vs-mpi.sh, development runs). Names differ from
# scripts/cluster.sh so both can be up at once:
#
#   namespaces csb0..csbN-1, the switch namespace csbsw with the bridge
#   csbbr0 and the switch-side veths csbv<i>, node-side veths csbd<i>
#   (MAC 02:78:00:00:00:<i+1>, 10.78.0.<i+1>/24). As in cluster.sh, the
#   bridge has a namespace of its own, where bridge-nf-call-iptables is
#   off: the host's firewall never sees the frames of either stack.
#
#   scripts/lib/netns.sh up N [--daemons udp|af_packet] [--mtu M]  (N: 2..32)
#                             [--cpus auto|none|LIST]
#   scripts/lib/netns.sh down
#   scripts/lib/netns.sh status
#
# --daemons starts one collstackd per namespace the way scripts/cluster.sh
# does (same settings, same nft ingress rule for DPDK ports), with its run
# directory under /run/collstack-bench, so `collstack run allreduce
# --cluster /run/collstack-bench/netns.env` works while a cluster.sh cluster
# is up too. --cpus picks one CPU per node as cluster.sh does (the
# default, auto: node i on the (i mod k)-th CPU this script may use); the
# sidecars run there, and CS_CPUS in the state file tells bench-vs-mpi.sh
# where to run each node's Open MPI rank.
#
# State: /run/collstack-bench/netns.env, in the same variables as
# cluster.sh's cluster.env (CS_NODES, CS_RUN, CS_BRIDGE, CS_VETHS, CS_PIDS,
# CS_PEERS, CS_SWITCH, ...) plus CS_IFACES and CS_ADDRS (namespace-side
# interface and address of each node, in order). It makes nothing in the
# root namespace; `down` removes exactly what the state file lists and
# stops only the collstackd PIDs it lists.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/switch.sh"

# CS_CLUSTER=P (1-6 lower-case letters/digits) renames everything to
# Pb<i>, Pbsw, Pbbr0, Pbv<i>, Pbd<i> and the run folder to
# /run/collstack-bench-P, so that helpers sharing a machine never meet;
# unset: the csb names above and /run/collstack-bench.
if [ -n "${CS_CLUSTER:-}" ]; then
	[[ "$CS_CLUSTER" =~ ^[a-z0-9]{1,6}$ ]] ||
		{ echo "netns: bad CS_CLUSTER '$CS_CLUSTER'" >&2; exit 2; }
	NB_PREFIX=${CS_CLUSTER}b
	NB_RUN=${CS_NETNS_RUN:-/run/collstack-bench-$CS_CLUSTER}
else
	NB_PREFIX=csb
	NB_RUN=${CS_NETNS_RUN:-/run/collstack-bench}
fi
NB_ENV=$NB_RUN/netns.env
NB_BR=${NB_PREFIX}br0
NB_SW=${NB_PREFIX}sw
NB_NET=10.78.0
NB_UDP_PORT=${CS_UDP_PORT:-7700}
NB_BUILD=${CS_BUILD_DIR:-build}
case $NB_BUILD in /*) ;; *) NB_BUILD=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/$NB_BUILD ;; esac
NB_DAEMON=$NB_BUILD/sidecar/collstackd

nb_die() { echo "netns: $*" >&2; exit 1; }

nb_down() {
	local n v
	[ -f "$NB_ENV" ] || return 0
	# shellcheck disable=SC1090
	. "$NB_ENV"
	nb_stop_daemons "${CS_PIDS:-}"
	for n in ${CS_NODES:-}; do
		ip netns del "$n" 2>/dev/null || true
		rm -rf "${NB_RUN:?}/$n" "$NB_RUN/$n.log"
	done
	rm -f "$NB_RUN/peers"
	if [ -n "${CS_SWITCH:-}" ]; then	# with the bridge and its veths
		ip netns del "$CS_SWITCH" 2>/dev/null || true
	else	# a state file of before the switch namespace
		for v in ${CS_VETHS:-}; do
			ip link del "$v" 2>/dev/null || true
		done
		ip link del "${CS_BRIDGE:-$NB_BR}" 2>/dev/null || true
	fi
	rm -f "$NB_ENV"
	rmdir "$NB_RUN" 2>/dev/null || true
	echo "netns: down"
}

nb_stop_daemons() {	# PIDs: TERM, wait, KILL; only live collstackd ones
	local p alive
	for p in $1; do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = collstackd ] &&
			kill -TERM "$p" 2>/dev/null
	done
	for _ in $(seq 50); do
		alive=0
		for p in $1; do
			[ "$(cat /proc/"$p"/comm 2>/dev/null)" = collstackd ] && alive=1
		done
		[ $alive = 0 ] && return 0
		sleep 0.1
	done
	for p in $1; do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = collstackd ] &&
			kill -KILL "$p" 2>/dev/null
	done
	return 0
}

nb_env() {	# (re)write the state file
	cat >"$NB_ENV" <<EOF
# written by scripts/lib/netns.sh up; read by bench-vs-mpi.sh, collstack run
# (--cluster) and netns.sh down
CS_NODES="$NB_NODES"
CS_RUN=$NB_RUN
CS_PORT=${NB_PORT:-none}
CS_UDP_PORT=$NB_UDP_PORT
CS_BRIDGE=$NB_BR
CS_SWITCH=$NB_SW
CS_VETHS="$NB_VETHS"
CS_IFACES="$NB_IFACES"
CS_ADDRS="$NB_ADDRS"
CS_PREFIXLEN=24
CS_PIDS="$NB_PIDS"
CS_PEERS=$NB_RUN/peers
CS_CPUS="${NB_CPUS[*]}"
EOF
}

nb_daemons() {	# start collstackd in every namespace, wait until ready
	local port=$1 i ns pid args deadline
	[ -x "$NB_DAEMON" ] || nb_die "$NB_DAEMON not built"
	case $port in
	udp) ;;
	af_packet)
		"$NB_DAEMON" --help-config | grep 'port types:.* dpdk' >/dev/null ||
			nb_die "collstackd built without DPDK: only udp" ;;
	*) nb_die "--daemons udp|af_packet" ;;
	esac
	: >"$NB_RUN/peers"
	for ((i = 0; i < NB_N; i++)); do
		echo "$i $NB_NET.$((i + 1)) $(printf '02:78:00:00:00:%02x' $((i + 1))) $NB_UDP_PORT $NB_PREFIX$i" >>"$NB_RUN/peers"
	done
	for ((i = 0; i < NB_N; i++)); do
		ns=$NB_PREFIX$i
		args=(--set "name=$ns" --set "run_dir=$NB_RUN/$ns"
		      --set "node.rank=$i" --set "node.peers=$NB_RUN/peers"
		      --set "port.ip=$NB_NET.$((i + 1))"
		      --set "port.udp_port=$NB_UDP_PORT" --set "port.mtu=$NB_MTU")
		if [ "$port" = udp ]; then
			args+=(--set port.type=udp)
		else
			args+=(--set port.type=dpdk --set "port.dev=$port"
			       --set "port.iface=${NB_PREFIX}d$i")
			# The namespace kernel must not answer or eat our frames:
			# dropped at ingress, after the packet socket's tap and
			# before the IP stack (no routing, no ICMP), as in
			# scripts/cluster.sh.
			ip netns exec "$ns" nft -f - <<EOF
table netdev collstack {
	chain ingress {
		type filter hook ingress device ${NB_PREFIX}d$i priority 0; policy accept;
		udp dport $NB_UDP_PORT drop
	}
}
EOF
		fi
		local pin=()
		if [ ${#NB_CPUS[@]} -gt 0 ]; then
			pin=(taskset -c "${NB_CPUS[i]}")
		fi
		ip netns exec "$ns" "${pin[@]}" "$NB_DAEMON" "${args[@]}" \
			</dev/null >"$NB_RUN/$ns.log" 2>&1 &
		NB_PIDS+="$! "
		nb_env
	done
	deadline=$((SECONDS + 60))
	i=0
	for pid in $NB_PIDS; do
		ns=$NB_PREFIX$i
		until [ -f "$NB_RUN/$ns/ready" ]; do
			kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ] || {
				echo "netns: collstackd in $ns not ready; its log:" >&2
				cat "$NB_RUN/$ns.log" >&2
				return 1
			}
			sleep 0.1
		done
		i=$((i + 1))
	done
}

nb_up() {
	local n=${1:-} i nodes="" veths="" ifaces="" addrs=""
	[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 32 ] ||
		nb_die "usage: netns.sh up N (2..32) [--daemons udp|af_packet]"
	shift
	NB_PORT="" NB_MTU=1500 NB_CPUS=()
	local cpus=auto cpu_words
	while [ $# -gt 0 ]; do
		case $1 in
		--cpus) cpus=${2:?--cpus auto|none|LIST}; shift 2 ;;
		--daemons) NB_PORT=${2:?--daemons udp|af_packet}; shift 2 ;;
		--mtu) NB_MTU=${2:?--mtu M}; shift 2
			[[ "$NB_MTU" =~ ^[0-9]+$ ]] && [ "$NB_MTU" -ge 576 ] &&
				[ "$NB_MTU" -le 9000 ] || nb_die "--mtu 576..9000" ;;
		*) nb_die "unknown option $1" ;;
		esac
	done
	[ "$(id -u)" -eq 0 ] || nb_die "needs root"
	cpu_words=$(cs_node_cpus "$cpus" "$n") ||
		nb_die "--cpus auto, none or a CPU list like 0,2-3 (got '$cpus')"
	read -r -a NB_CPUS <<<"$cpu_words"
	[ -f "$NB_ENV" ] && nb_die "already up ($NB_ENV): down first"
	for ((i = 0; i < n; i++)); do
		grep -qw "$NB_PREFIX$i" < <(ip netns list) &&
			nb_die "namespace $NB_PREFIX$i exists but is not ours"
		nodes+="$NB_PREFIX$i "
		veths+="${NB_PREFIX}v$i "
		ifaces+="${NB_PREFIX}d$i "
		addrs+="$NB_NET.$((i + 1)) "
	done
	grep -qw "$NB_SW" < <(ip netns list) &&
		nb_die "namespace $NB_SW exists but is not ours"
	mkdir -p "$NB_RUN"
	NB_N=$n NB_NODES=${nodes% } NB_VETHS=${veths% } NB_IFACES=${ifaces% }
	NB_ADDRS=${addrs% } NB_PIDS=""
	# Record first, so `down` can undo a half-made set-up.
	nb_env
	trap 'echo "netns: set-up failed, tearing down" >&2; nb_down; exit 1' ERR
	cs_switch_up "$NB_SW" "$NB_BR"
	for ((i = 0; i < n; i++)); do
		local ns=$NB_PREFIX$i
		ip netns add "$ns"
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
		ip -n "$ns" link set lo up
		ip -n "$NB_SW" link add "${NB_PREFIX}v$i" type veth peer name \
			"${NB_PREFIX}d$i" netns "$ns"
		ip -n "$NB_SW" link set "${NB_PREFIX}v$i" mtu "$NB_MTU"
		ip -n "$ns" link set "${NB_PREFIX}d$i" mtu "$NB_MTU"
		ip -n "$NB_SW" link set "${NB_PREFIX}v$i" master "$NB_BR" up
		ip -n "$ns" link set "${NB_PREFIX}d$i" address \
			"$(printf '02:78:00:00:00:%02x' $((i + 1)))"
		ip -n "$ns" addr add "$NB_NET.$((i + 1))/24" dev "${NB_PREFIX}d$i"
		ip -n "$ns" link set "${NB_PREFIX}d$i" up
	done
	if [ -n "$NB_PORT" ]; then
		nb_daemons "$NB_PORT" || { nb_down; exit 1; }
	fi
	trap - ERR
	echo "netns: up: $n namespaces (${nodes% }), bridge $NB_BR, $NB_NET.0/24, CPUs ${NB_CPUS[*]:-any}${NB_PORT:+, collstackd on port $NB_PORT}"
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
