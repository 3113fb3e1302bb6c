#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A collstack cluster on one machine: N network namespaces joined by veth
# pairs to a Linux bridge, one collstackd in each.
#
#   scripts/cluster.sh up N [--port af_packet|af_xdp|memif|udp] [--mtu M]
#                           [--bridge-loss PCT] [--set KEY=VALUE]...
#                           [--cpus auto|none|LIST]
#                           [--no-daemons]   (network only, e.g. for testpmd)
#                           [--boot]   (membership from the coordinator in
#                                       ${P}n0, job token in $RUN/$P-job.token)
#                           [--rendezvous tcp|etcd]   (tcp: as --boot; etcd:
#                                       no coordinator: a real etcd in
#                                       namespace ${P}etcd on the bridge,
#                                       10.77.0.254:2379, log $RUN/$P-etcd.log;
#                                       node.rendezvous=etcd://10.77.0.254:2379/$P-job)
#   scripts/cluster.sh join [--set KEY=VALUE]...   (a cluster up with
#                                       --rendezvous etcd: one more node,
#                                       the next rank; elastic groups grow)
#   scripts/cluster.sh down
#   scripts/cluster.sh status
#
# Names: namespaces csn0..csnN-1, the switch namespace cssw holding the
# bridge csbr0 and the switch-side veths csv<i>, node-side veths csd<i>
# (MAC 02:77:00:00:00:<i+1>, 10.77.0.<i+1>/24). The bridge lives in a
# namespace of its own so that nothing of the host's firewall applies to
# it: bridge-nf-call-iptables (br_netfilter, on by default where Docker or
# Kubernetes run) is switched off there, and the host's FORWARD policy
# never sees our frames (2 nodes, MTU 9000: the raw rate +11 %).
# CS_CLUSTER=P (1-6 lower-case letters/digits, default cs) renames all of
# them (Pn<i>, Psw, Pbr0, Pv<i>, Pd<i>, table bridge Ploss) and the state file
# (/run/collstack/cluster-P.env), so several clusters (e.g. test runs of
# different checkouts) can be up at once; give the CLI that file with
# --cluster or CS_CLUSTER_ENV.
# memif needs no veth: two sidecars share a memif socket file
# (socket-abstract=no, so it is reachable across namespaces).
#
# Packet authentication: every `up` writes a fresh random job token to
# $RUN/$P-job.token (mode 600) and gives it to every sidecar
# (boot.token_file), so auth.enable=auto (collstackd's default) tags and
# checks every frame under keys derived from it; `--set auth.enable=0`
# turns authentication off (docs/auth.md).
#
# State: /run/collstack/cluster.env (nodes, PIDs, everything `down` removes),
# /run/collstack/<P>-peers (the static address table every sidecar reads),
# /run/collstack/<node>/{ctl.sock,ready,pid}, /run/collstack/<node>.log,
# /run/collstack/<P>-flight (flight records the sidecars write on their
# own: docs/observe.md; `down` removes it).
#
# In each namespace an nft netdev ingress rule drops UDP to the dataplane
# port on the veth, so the namespace kernel neither answers (no ICMP port
# unreachable) nor processes frames the DPDK port also sees (af_packet's
# tap runs before the ingress hook and gets every frame). The udp port
# needs the kernel, so it gets no such rule; memif has no veth.
#
# --cpus: node i's sidecar runs on one CPU, the (i mod k)-th of LIST (auto,
# the default: the CPUs this script may use; none: unpinned). `collstack
# bench` starts each trainer on its sidecar's CPUs. See cs_node_cpus in
# scripts/lib/switch.sh.
#
# --bridge-loss PCT adds an nft rule on the bridge that drops PCT percent
# of the dataplane frames it forwards (real network loss, below the ports).
#
# Environment: CS_BUILD_DIR (default build), CS_UDP_PORT (7700),
# CS_READY_TIMEOUT seconds (60).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/switch.sh

RUN=/run/collstack
P=${CS_CLUSTER:-cs}
[[ "$P" =~ ^[a-z0-9]{1,6}$ ]] || { echo "cluster: bad CS_CLUSTER '$P'" >&2; exit 2; }
if [ "$P" = cs ]; then
	ENV_FILE=$RUN/cluster.env
else
	ENV_FILE=$RUN/cluster-$P.env
fi
BR=${P}br0
SW=${P}sw
PEERS=$RUN/$P-peers
MEMIF_SOCK=$RUN/$P-memif.sock
TOKEN=$RUN/$P-job.token
UDP_PORT=${CS_UDP_PORT:-7700}
ETCD_NS=${P}etcd
ETCD_IP=10.77.0.254
ETCD_PORT=2379
ETCD_DATA=$RUN/$P-etcd.data
BOOT_PORT=${CS_BOOT_PORT:-7701}
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
DAEMON=$BUILD/sidecar/collstackd
READY_TIMEOUT=${CS_READY_TIMEOUT:-60}

die() { echo "cluster: $*" >&2; exit 1; }
log() { echo "cluster: $*"; }

need_root() {
	[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
	for t in ip nft; do
		command -v $t >/dev/null || die "missing tool: $t"
	done
}

mac_of() { printf '02:77:00:00:00:%02x' $(($1 + 1)); }
ip_of() { echo "10.77.0.$(($1 + 1))"; }

# Remove everything recorded in the state file (and our fixed names).
down() {
	need_root
	local pids="" nodes="" n
	if [ -f "$ENV_FILE" ]; then
		# shellcheck disable=SC1090
		. "$ENV_FILE"
		pids=${CS_PIDS:-}
		nodes=${CS_NODES:-}
	fi
	# Stop our sidecars by PID (checking the PID is still a collstackd).
	for p in $pids; do
		if [ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ]; then
			kill -TERM "$p" 2>/dev/null || true
		fi
	done
	for _ in $(seq 100); do
		local alive=0
		for p in $pids; do
			[ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ] && alive=1
		done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in $pids; do
		if [ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ]; then
			echo "cluster: PID $p ignored SIGTERM, killing" >&2
			kill -KILL "$p" 2>/dev/null || true
		fi
	done
	# etcd after the sidecars (they revoke their leases on the way out)
	if [ -n "${CS_ETCD_PID:-}" ] &&
	   [ "$(cat /proc/$CS_ETCD_PID/comm 2>/dev/null)" = etcd ]; then
		kill -TERM "$CS_ETCD_PID" 2>/dev/null || true
		for _ in $(seq 50); do
			[ -d /proc/$CS_ETCD_PID ] || break
			sleep 0.1
		done
		kill -KILL "$CS_ETCD_PID" 2>/dev/null || true
	fi
	if [ -n "${CS_ETCD_NS:-}" ]; then
		ip netns del "$CS_ETCD_NS" 2>/dev/null || true
		rm -rf "$ETCD_DATA" "$RUN/$P-etcd.log"
	fi
	for n in $nodes; do
		ip netns del "$n" 2>/dev/null || true
		rm -rf "${RUN:?}/$n" "/var/run/dpdk/cs-$n"
		rm -f "$RUN/$n.log"
	done
	# The switch namespace takes the bridge, its veths and the loss
	# table with it (a state file of before it had them in the host).
	if [ -n "${CS_SWITCH:-}" ]; then
		ip netns del "$CS_SWITCH" 2>/dev/null || true
	else
		for v in ${CS_VETHS:-}; do
			ip link del "$v" 2>/dev/null || true
		done
		ip link del "$BR" 2>/dev/null || true
		nft delete table bridge "${P}loss" 2>/dev/null || true
	fi
	rm -f "$MEMIF_SOCK" "$PEERS" "$ENV_FILE" "$TOKEN"
	rm -rf "${RUN:?}/$P-flight" # flight records the sidecars wrote
	rmdir "$RUN" 2>/dev/null || true
	log "down"
}

# node_net I PORT MTU: namespace ${P}n<I>, its veth on the bridge, the nft
# rule that keeps the namespace kernel off dataplane frames.
node_net() {
	local i=$1 port=$2 mtu=$3
	local ns=${P}n$i
	ip netns add "$ns"
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
	ip -n "$ns" link set lo up
	if [ "$port" != memif ]; then
		ip -n "$SW" link add "${P}v$i" mtu "$mtu" type veth \
			peer name "${P}d$i" mtu "$mtu" netns "$ns"
		ip -n "$SW" link set "${P}v$i" master "$BR" up
		ip -n "$ns" link set "${P}d$i" address "$(mac_of $i)"
		ip -n "$ns" addr add "$(ip_of $i)/24" dev "${P}d$i"
		ip -n "$ns" link set "${P}d$i" up
	fi
	if [ "$port" = af_xdp ]; then
		# veth delivers XDP-transmitted frames only with NAPI on
		# the peer: GRO on the host side turns it on.
		ip netns exec "$SW" ethtool -K "${P}v$i" gro on \
			>/dev/null 2>&1 || true
	fi
	if [ "$port" != udp ] && [ "$port" != memif ]; then
		# The namespace kernel must not answer (ICMP) or eat
		# our frames: dropped at the interface's ingress hook,
		# which runs after the packet socket's tap and before
		# the IP stack, so frames cost no routing or inet
		# filtering either (4 nodes, 64 MiB: +5 % busbw).
		ip netns exec "$ns" nft -f - <<EOF
table netdev collstack {
chain ingress {
	type filter hook ingress device ${P}d$i priority 0; policy accept;
	udp dport $UDP_PORT drop
}
}
EOF
	fi
}

status() {
	[ -f "$ENV_FILE" ] || { echo "cluster: not up"; return 1; }
	cat "$ENV_FILE"
	# shellcheck disable=SC1090
	. "$ENV_FILE"
	for n in $CS_NODES; do
		printf '%s: ' "$n"
		cat "$RUN/$n/ready" 2>/dev/null || echo "not ready"
	done
}

# start_daemon I WORLD PORT MTU ETCD BOOT [taskset ...] -- [--set K=V ...]:
# collstackd of node I in ${P}n<I>, in the background ($! is its PID).
start_daemon() {
	local i=$1 n=$2 port=$3 mtu=$4 etcd=$5 boot=$6 pin=() ns=${P}n$1 args=()
	shift 6
	while [ $# -gt 0 ] && [ "$1" != -- ]; do pin+=("$1"); shift; done
	shift
	args=(--set name=$ns --set run_dir=$RUN/$ns --set node.rank=$i
	      --set flight.dir=$RUN/$P-flight
	      --set node.peers=$PEERS --set port.ip=$(ip_of $i)
	      --set port.udp_port=$UDP_PORT --set port.mtu=$mtu
	      --set boot.token_file=$TOKEN)	# packet auth keys (auto)
	case $port in
	udp)	args+=(--set port.type=udp) ;;
	af_packet|af_xdp)
		args+=(--set port.type=dpdk --set port.dev=$port
		       --set port.iface=${P}d$i) ;;
	memif)
		args+=(--set port.type=dpdk --set port.dev=memif
		       --set port.memif_socket=$MEMIF_SOCK
		       --set port.mac=$(mac_of $i)
		       --set port.memif_role=$([ $i = 0 ] && echo server || echo client)) ;;
	esac
	if [ $etcd = 1 ]; then	# ctlplane: the etcd store
		args+=(--set node.peers=
		       --set node.rendezvous=etcd://$ETCD_IP:$ETCD_PORT/$P-job
		       --set boot.world=$n)
	elif [ $boot = 1 ]; then	# ctlplane: the coordinator instead of peers
		args+=(--set node.peers= --set boot.addr=$(ip_of 0):$BOOT_PORT)
		if [ $i = 0 ]; then
			args+=(--set boot.coordinator=1
			       --set boot.world=$n)
		fi
	fi
	ip netns exec "$ns" "${pin[@]}" "$DAEMON" "${args[@]}" "$@" \
		</dev/null >"$RUN/$ns.log" 2>&1 &
}

# wait_ready NS PID: until collstackd in NS wrote ready (its log and 1
# when it exited or READY_TIMEOUT passed).
wait_ready() {
	local ns=$1 pid=$2 deadline=$((SECONDS + READY_TIMEOUT))
	until [ -f "$RUN/$ns/ready" ]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "cluster: collstackd in $ns exited; its log:" >&2
			cat "$RUN/$ns.log" >&2
			return 1
		fi
		if [ $SECONDS -ge $deadline ]; then
			echo "cluster: $ns not ready after ${READY_TIMEOUT}s" >&2
			cat "$RUN/$ns.log" >&2
			return 1
		fi
		sleep 0.1
	done
}

# join [--set K=V]...: one more node (the next index) in a running cluster
# started with --rendezvous etcd; it joins the group as its next rank and
# elastic trainer groups grow at their next operation (docs/ctlplane.md).
join() {
	local sets=() i ns pid cpus=()
	while [ $# -gt 0 ]; do
		case $1 in
		--set) sets+=(--set "$2"); shift 2 ;;
		*) die "join: unknown option $1" ;;
		esac
	done
	need_root
	[ -f "$ENV_FILE" ] || die "join: no cluster is up ($ENV_FILE)"
	# shellcheck disable=SC1090
	. "$ENV_FILE"
	[ -n "${CS_ETCD_NS:-}" ] ||
		die "join: the cluster must be up with --rendezvous etcd (the TCP coordinator admits boot.world members only)"
	read -r -a cpus <<<"${CS_CPUS:-}"
	i=$(wc -w <<<"$CS_NODES")
	[ "$i" -lt 64 ] || die "join: 64 nodes at most"
	ns=${P}n$i
	echo "$i $(ip_of $i) $(mac_of $i) $UDP_PORT $ns" >>"$PEERS"
	# recorded first, so that `down` removes a half-made node
	sed -i -e "s/^CS_NODES=\"\(.*\)\"/CS_NODES=\"\1 $ns\"/" \
		-e "s/^CS_VETHS=\"\(.*\)\"/CS_VETHS=\"\1${P}v$i \"/" "$ENV_FILE"
	node_net "$i" "$CS_PORT" "$CS_MTU"
	local pin=()
	if [ ${#cpus[@]} -gt 0 ]; then
		pin=(taskset -c "${cpus[i % ${#cpus[@]}]}")
	fi
	start_daemon "$i" "$i" "$CS_PORT" "$CS_MTU" 1 1 "${pin[@]}" -- \
		"${sets[@]}"
	pid=$!
	sed -i -e "s/^CS_PIDS=\"\(.*\)\"/CS_PIDS=\"\1$pid \"/" "$ENV_FILE"
	wait_ready "$ns" "$pid" || exit 1
	log "joined: $ns (rank $i, PID $pid)"
}

up() {
	local n=${1:-}; shift || true
	local port=af_packet mtu=1500 loss="" sets=() daemons=1 boot=0 cpus=auto
	local etcd=0 etcd_pid="" etcd_ns=""
	[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 64 ] ||
		die "usage: cluster.sh up N (2..64) [--port P] [--mtu M]"
	while [ $# -gt 0 ]; do
		case $1 in
		--port) port=$2; shift 2 ;;
		--mtu) mtu=$2; shift 2 ;;
		--bridge-loss) loss=$2; shift 2 ;;
		--set) sets+=(--set "$2"); shift 2 ;;
		--no-daemons) daemons=0; shift ;;
		--boot) boot=1; shift ;;
		--rendezvous)
			case ${2:-} in
			tcp) boot=1 ;;
			etcd) boot=1; etcd=1 ;;
			*) die "--rendezvous tcp or etcd (got '${2:-}')" ;;
			esac
			shift 2 ;;
		--cpus) cpus=$2; shift 2 ;;
		*) die "unknown option $1" ;;
		esac
	done
	need_root
	case $port in
	af_packet|af_xdp|udp) ;;
	memif) [ "$n" -eq 2 ] || die "memif links two nodes: up 2 --port memif" ;;
	*) die "unknown --port $port (af_packet, af_xdp, memif, udp)" ;;
	esac
	if [ "$port" = af_xdp ] && [ "$mtu" -gt 3506 ]; then
		die "af_xdp on veth works up to MTU 3506 (got $mtu)"
	fi
	[ -x "$DAEMON" ] || die "$DAEMON not built (ninja -C $BUILD)"
	if [ "$port" != udp ] &&
	   ! "$DAEMON" --help-config | grep 'port types:.* dpdk' >/dev/null; then
		die "collstackd was built without DPDK: only --port udp works"
	fi
	local node_cpus=() cpu_words
	cpu_words=$(cs_node_cpus "$cpus" "$n") ||
		die "--cpus auto, none or a CPU list like 0,2-3 (got '$cpus')"
	read -r -a node_cpus <<<"$cpu_words"
	[ -f "$ENV_FILE" ] && die "a cluster is up already ($ENV_FILE): down first"
	mkdir -p "$RUN"

	local nodes="" i
	for ((i = 0; i < n; i++)); do nodes+="${P}n$i "; done
	nodes=${nodes% }
	# Record first, so `down` can undo a half-made cluster.
	write_env() {
		cat >"$ENV_FILE" <<EOF
# written by scripts/cluster.sh up; read by collstack run/bench and cluster.sh down
CS_NODES="$nodes"
CS_RUN=$RUN
CS_PORT=$port
CS_MTU=$mtu
CS_UDP_PORT=$UDP_PORT
CS_BRIDGE=$BR
CS_SWITCH=$3
CS_VETHS="$1"
CS_PIDS="$2"
CS_PEERS=$PEERS
CS_CPUS="${node_cpus[*]}"
CS_ETCD_NS=$etcd_ns
CS_ETCD_PID=$etcd_pid
EOF
	}
	local veths="" sw=""
	if [ "$port" != memif ]; then
		for ((i = 0; i < n; i++)); do veths+="${P}v$i "; done
		sw=$SW
	fi
	write_env "$veths" "" "$sw"
	trap 'echo "cluster: set-up failed, tearing down" >&2; down; exit 1' ERR

	: >"$PEERS"
	for ((i = 0; i < n; i++)); do
		echo "$i $(ip_of $i) $(mac_of $i) $UDP_PORT ${P}n$i" >>"$PEERS"
	done

	if [ "$port" != memif ]; then
		cs_switch_up "$SW" "$BR" "$mtu"
	fi
	for ((i = 0; i < n; i++)); do
		node_net "$i" "$port" "$mtu"
	done
	if [ -n "$loss" ]; then
		local per10k
		per10k=$(awk -v p="$loss" 'BEGIN { printf "%d", p * 100 + 0.5 }')
		ip netns exec "$SW" nft -f - <<EOF
table bridge ${P}loss {
	chain forward {
		type filter hook forward priority 0; policy accept;
		udp dport $UDP_PORT numgen random mod 10000 < $per10k counter drop
	}
}
EOF
		log "bridge drops $loss% of dataplane frames (nft table bridge ${P}loss)"
	fi

	# a fresh job token for every cluster, never on a command line: the
	# bootstrap's admission and the packet tags' keys (auth.enable=auto
	# turns authentication on with it; --set auth.enable=0 turns it off)
	(umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TOKEN")
	if [ $boot = 1 ]; then
		if [ $etcd = 1 ]; then
			log "rendezvous: etcd in $ETCD_NS on $ETCD_IP:$ETCD_PORT, token in $TOKEN (mode 600)"
		else
			log "bootstrap: coordinator in csn0 on $(ip_of 0):$BOOT_PORT, token in $TOKEN (mode 600)"
		fi
	fi
	if [ $etcd = 1 ]; then	# a real etcd on the bridge, a namespace of its own
		[ "$port" != memif ] || die "--rendezvous etcd needs the bridge (not memif)"
		command -v etcd >/dev/null || die "no etcd binary (apt-get install etcd-server)"
		etcd_ns=$ETCD_NS
		write_env "$veths" "" "$sw"
		ip netns add "$ETCD_NS"
		ip -n "$ETCD_NS" link set lo up
		ip -n "$SW" link add "${P}ve" mtu "$mtu" type veth \
			peer name "${P}de" mtu "$mtu" netns "$ETCD_NS"
		ip -n "$SW" link set "${P}ve" master "$BR" up
		ip -n "$ETCD_NS" addr add "$ETCD_IP/24" dev "${P}de"
		ip -n "$ETCD_NS" link set "${P}de" up
		rm -rf "$ETCD_DATA"
		ip netns exec "$ETCD_NS" etcd --name "$P" --data-dir "$ETCD_DATA" \
			--listen-client-urls "http://$ETCD_IP:$ETCD_PORT" \
			--advertise-client-urls "http://$ETCD_IP:$ETCD_PORT" \
			--listen-peer-urls http://127.0.0.1:2380 \
			--initial-advertise-peer-urls http://127.0.0.1:2380 \
			--initial-cluster "$P=http://127.0.0.1:2380" \
			</dev/null >"$RUN/$P-etcd.log" 2>&1 &
		etcd_pid=$!
		write_env "$veths" "" "$sw"
		local t=$((SECONDS + READY_TIMEOUT))
		until ip netns exec "$ETCD_NS" bash -c \
			"exec 3<>/dev/tcp/$ETCD_IP/$ETCD_PORT && printf 'GET /health HTTP/1.0\r\n\r\n' >&3 && cat <&3" \
			2>/dev/null | grep -q '"health":"true"'; do
			kill -0 "$etcd_pid" 2>/dev/null ||
				{ cat "$RUN/$P-etcd.log" >&2; die "etcd exited"; }
			[ $SECONDS -lt $t ] || die "etcd not healthy after ${READY_TIMEOUT}s"
			sleep 0.1
		done
		log "etcd up (PID $etcd_pid)"
	fi
	local pids=""
	if [ $daemons = 0 ]; then
		trap - ERR
		log "up: $n namespaces ($nodes), no sidecars, MTU $mtu"
		return 0
	fi
	for ((i = 0; i < n; i++)); do
		local pin=()
		if [ ${#node_cpus[@]} -gt 0 ]; then
			pin=(taskset -c "${node_cpus[i]}")
		fi
		start_daemon "$i" "$n" "$port" "$mtu" "$etcd" "$boot" \
			"${pin[@]}" -- "${sets[@]}"
		pids+="$! "
		write_env "$veths" "$pids" "$sw"
		# memif: the server must have made the socket first.
		if [ "$port" = memif ] && [ $i = 0 ]; then
			for _ in $(seq 100); do
				[ -S "$MEMIF_SOCK" ] && break
				sleep 0.1
			done
		fi
	done
	trap - ERR

	for ((i = 0; i < n; i++)); do
		wait_ready "${P}n$i" "$(echo $pids | cut -d' ' -f$((i + 1)))" ||
			{ down; exit 1; }
	done
	log "up: $n nodes ($nodes), port $port, MTU $mtu, CPUs ${node_cpus[*]:-any}, state in $ENV_FILE"
}

case ${1:-} in
up) shift; up "$@" ;;
join) shift; join "$@" ;;
down) down ;;
status) status ;;
*) echo "usage: $0 up N [--port af_packet|af_xdp|memif|udp] [--mtu M] [--bridge-loss PCT] [--cpus auto|none|LIST] [--boot] [--rendezvous tcp|etcd] [--set K=V]... | join [--set K=V]... | down | status" >&2
   exit 2 ;;
esac
