#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Trainers (libcollstack) on a namespace cluster: two-level collectives
# through collstackd (docs/ipcd.md).
#
#   test_trainers.sh CASE           (meson suite netns; CS_BUILD_DIR set)
#   test_trainers.sh bench N T [collstack bench args...]   (figures)
#
# Cases: ar_2x1, ar_2x2, ar_4x1, ar_4x2 (nodes x trainers per node: every
# element of every iteration checked bit for bit on every rank; lcore 0
# serves the trainers, ipc.on_lcore), ar_4x2_thread (the same with a
# thread of its own serving them, ipc.on_lcore=0), gather_2x2
# (all_gather, broadcast, reduce_scatter; two trainers per node in node
# blocks: reduce_scatter and all_gather on the ring itself), gather_4x1
# (the same with one trainer per node, 3 % loss), layout_2x2
# (reduce_scatter and all_gather of groups in node blocks, interleaved,
# and 3 + 1 ranks per node: every element checked), kill_2x2 (a trainer killed mid-run: the
# sidecars survive, the other trainers end with an error instead of
# hanging, and a new run then works), python_2x1 (python/examples/
# train_local.py across nodes), moe_4x2 (python/examples/train_moe.py,
# expert parallelism over all-to-alls, 4 nodes x 2 trainers, 3 % loss:
# loss curve and expert weights equal to a single-process run's), peer_lost_4x1 (membership through the
# bootstrap coordinator; kill -9 one sidecar during a loop of 16 MiB
# allreduces: the 3 other trainers get CS_ERR_PEER_LOST naming its node
# within 2 x member.fail_timeout, re-form a 3-rank group, and its
# allreduces are correct; IPCD_LOSS=link cuts the node's link instead, so
# that only missed heartbeats tell; docs/peerlost.md), peer_lost_4x2 (the
# same with 2 trainers per node, 4 MiB), peer_lost_etcd_4x1 (peer_lost_4x1
# with the etcd rendezvous, started in the switch namespace on
# 10.79.0.254, and node 0 lost: no coordinator goes with it), early_4x1 (small allreduces done
# at result-ready, coll.direct_early, with 5 % loss: frames of finished ops
# resent, delivery implied by the peers' next op; reduce_scatter on the
# ring in between; then the same with coll.direct_early=0: none early),
# members_size_2x1 (hostile joins: a group joined as size 2 on one node
# and size 3 on the other, then one whose rank 2 is on no node: both
# refused at their first operation on both nodes, each naming the other
# node, the next operation too, and a proper group then works),
# members_rank_2x1 (the same rank claimed on both nodes, for an allreduce
# and for an all-gather: refused naming the other node, not "peer lost"),
# members_desc_2x2 (a descriptor one node refuses reaches the other node's
# rank as that error, not as a lost peer), groups_2x1 and groups_2x2
# (three groups per trainer posted in opposite orders on the two nodes,
# all in flight together; clean, then 3 % loss), alltoall_2x2 and
# alltoall_4x2 (cs_alltoall: 3 trainers of one node alone, then every
# node's trainers, two-level, then one trainer per node; every element of
# every iteration checked; 4x2 with 3 % loss), alltoall_bad_2x2 (layouts
# that do not add up and sizes that differ: a clear error on every rank,
# the sidecars go on, a proper all-to-all then works), alltoall_lost_3x2
# (a sidecar killed under a loop of all-to-alls: the other trainers get
# CS_ERR_PEER_LOST naming its node, none hangs), alltoallv_4x2
# (cs_alltoallv, 3 % loss: Zipf-skewed counts with a quarter of the blocks
# empty and rank 3 sending nothing, then every rank sending everything to
# rank 5, then one trainer per node; every element and every gap of every
# iteration checked), alltoallv_bad_2x2 (counts that do not add up, then
# a block past its buffer: a clear error on every rank, nothing sent, the
# sidecars go on and proper ones then work), pipe_4x2 (every trainer
# posts 8 allreduce buckets of one group before waiting for any, 64 KiB
# to 4 MiB, every element of every bucket checked; several of the group's
# operations on the transport core at once), peer_lost_pipe_4x2
# (peer_lost_4x2 with 8 buckets of 1 MiB in flight per iteration: each
# one finished before the loss or fails with CS_ERR_PEER_LOST, none
# hangs, and the survivors' group runs 8 at once again), sendrecv_4x2
# (`collstack bench -o sendrecv`, 3 % loss: rank i and rank i + n/2
# exchange size bytes both ways, cs_recv + cs_send; 8 trainers with 3
# buckets of their own tags in flight, sizes the rank count does not
# divide, -m iter and b2b, then one trainer per node; every element of
# every iteration checked).
#
# Its own names, so it never meets scripts/cluster.sh or another helper:
# namespaces ipn<i> (CS_CLUSTER=P: Pn<i>), bridge ipbr0, veths ipv<i>/ipd<i>, 10.79.0.<i+1>/24,
# state in /run/collstack-ipcd. Needs root (else exit 77); tears down what
# it made (trap) and nothing else. Port: af_packet when collstackd has
# DPDK, else udp (IPCD_PORT=udp|af_packet overrides).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/netns/lib.sh
. scripts/lib/switch.sh

BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
DAEMON=$BUILD/sidecar/collstackd
TRAINER=$BUILD/tools/cs-trainer-bench
PEERLOST=$BUILD/tools/cs-trainer-peerlost
JOIN=$BUILD/tests/netns/cs-trainer-join
GRPBIN=$BUILD/tests/netns/cs-trainer-groups
# CS_CLUSTER=P: namespaces Pn<i> and Psw, state in /run/collstack-ipcd-P
# (default: ipn<i>, ipsw, /run/collstack-ipcd), so that two helpers'
# runs never meet
P=${CS_CLUSTER:-ip}
[[ "$P" =~ ^[a-z0-9]{1,6}$ ]] || { echo "FAIL: bad CS_CLUSTER '$P'"; exit 1; }
RUN=/run/collstack-ipcd
[ "$P" = ip ] || RUN=/run/collstack-ipcd-$P
ENV_FILE=$RUN/cluster.env
BR=${P}br0
SW=${P}sw	# the bridge's own namespace (as in scripts/cluster.sh)
UDP=7790
BOOT_PORT=7791
BOOT=0	# 1: membership from a coordinator in ${P}n0 (up's nodes, boot.*)
ETCD=0	# 1 (with BOOT=1): from an etcd in the switch namespace instead
ETCD_PID=
PIDS=()
TPIDS=()	# trainers of case_peer_lost, killed on the way out
NODES=()
NODE_ARGS=()	# up(): more collstackd args of node i (words), after "$@"
MADE_BR=0
MADE_RUN=0

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; dump_logs; exit 1; }
dump_logs() {
	for n in "${NODES[@]}"; do
		echo "--- $n.log (tail)"
		tail -n 15 "$RUN/$n.log" 2>/dev/null
	done
	if [ -f "$RUN/etcd.log" ]; then
		echo "--- etcd.log (tail)"
		tail -n 15 "$RUN/etcd.log"
	fi
}

[ -x "$CLI" ] && [ -x "$DAEMON" ] && [ -x "$TRAINER" ] ||
	{ echo "FAIL: not built: $CLI $DAEMON $TRAINER"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null || skip "missing tool: ip"
PORT=${IPCD_PORT:-}
if [ -z "$PORT" ]; then
	if "$DAEMON" --help-config | grep 'port types:.* dpdk' >/dev/null; then
		PORT=af_packet
	else
		PORT=udp
	fi
fi
[ "$PORT" = af_packet ] && ! command -v nft >/dev/null && PORT=udp

down() {
	for p in "${TPIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
	if [ -n "$ETCD_PID" ] &&
	   [ "$(cat /proc/$ETCD_PID/comm 2>/dev/null)" = etcd ]; then
		kill -KILL "$ETCD_PID" 2>/dev/null
		wait "$ETCD_PID" 2>/dev/null
	fi
	ETCD_PID=
	for p in "${PIDS[@]}"; do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ] &&
			kill -TERM "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do
			[ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ] || break
			sleep 0.1
		done
		[ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ] &&
			kill -KILL "$p" 2>/dev/null
	done
	for n in "${NODES[@]}"; do
		ip netns del "$n" 2>/dev/null
		rm -rf "/var/run/dpdk/cs-$n"
	done
	[ $MADE_BR = 1 ] && ip netns del "$SW" 2>/dev/null
	[ $MADE_RUN = 1 ] && rm -rf "$RUN"
	NODES=()
	PIDS=()
	MADE_BR=0
	MADE_RUN=0
}

up() {	# N [collstackd --set args...]
	local n=$1 i ns; shift
	# someone else's run of this script: wait for it, never touch it
	for _ in $(seq 120); do
		grep -q "^${P}n" < <(ip netns list) || [ -d "$RUN" ] || break
		sleep 1
	done
	grep -q "^${P}n" < <(ip netns list) && skip "${P}n* namespaces are in use"
	[ -d "$RUN" ] && skip "$RUN exists: another run is active"
	trap down EXIT
	mkdir -p "$RUN" && MADE_RUN=1
	MADE_BR=1
	cs_switch_up "$SW" "$BR" || fail "switch namespace $SW, bridge $BR"
	: >"$RUN/peers"
	for ((i = 0; i < n; i++)); do
		ns=${P}n$i
		NODES+=("$ns")
		printf '%d 10.79.0.%d 02:79:00:00:00:%02x %d %s\n' "$i" \
			$((i + 1)) $((i + 1)) $UDP "$ns" >>"$RUN/peers"
		ip netns add "$ns" || fail "netns $ns"
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
		ip -n "$ns" link set lo up
		ip -n "$SW" link add "ipv$i" type veth peer name "ipd$i" \
			netns "$ns" || fail "veth ipv$i"
		ip -n "$SW" link set "ipv$i" master "$BR" up
		ip -n "$ns" link set "ipd$i" address \
			"$(printf '02:79:00:00:00:%02x' $((i + 1)))"
		ip -n "$ns" addr add "10.79.0.$((i + 1))/24" dev "ipd$i"
		ip -n "$ns" link set "ipd$i" up
		if [ "$PORT" = af_packet ]; then
			ip netns exec "$ns" nft -f - <<EOF
table netdev collstack {
	chain ingress {
		type filter hook ingress device ipd$i priority 0; policy accept;
		udp dport $UDP drop
	}
}
EOF
		fi
	done
	printf 'CS_NODES="%s"\nCS_RUN=%s\n' "${NODES[*]}" "$RUN" >"$ENV_FILE"
	[ $BOOT = 1 ] && (umask 077; od -An -tx1 -N32 /dev/urandom |
		tr -d ' \n' >"$RUN/job.token")
	if [ $ETCD = 1 ]; then	# etcd on the bridge, in the switch namespace
		ip -n "$SW" link set lo up	# etcd's peer URL
		ip -n "$SW" addr add 10.79.0.254/24 dev "$BR" ||
			fail "address for etcd"
		ip netns exec "$SW" etcd --name ipcd --data-dir "$RUN/etcd.data" \
			--listen-client-urls http://10.79.0.254:2379 \
			--advertise-client-urls http://10.79.0.254:2379 \
			--listen-peer-urls http://127.0.0.1:2380 \
			--initial-advertise-peer-urls http://127.0.0.1:2380 \
			--initial-cluster ipcd=http://127.0.0.1:2380 \
			</dev/null >"$RUN/etcd.log" 2>&1 &
		ETCD_PID=$!	# the sidecars wait for it (boot.timeout)
	fi
	for ((i = 0; i < n; i++)); do
		local args=(--set name=${P}n$i --set run_dir=$RUN/${P}n$i
			    --set node.rank=$i --set node.peers=$RUN/peers
			    --set port.ip=10.79.0.$((i + 1))
			    --set port.udp_port=$UDP
			    --set rel.max_timeouts=400)
		if [ $ETCD = 1 ]; then
			args+=(--set node.peers= --set boot.world=$n
			       --set node.rendezvous=etcd://10.79.0.254:2379/ipcd
			       --set boot.token_file=$RUN/job.token)
		elif [ $BOOT = 1 ]; then
			args+=(--set node.peers= --set boot.addr=10.79.0.1:$BOOT_PORT
			       --set boot.token_file=$RUN/job.token)
			[ $i = 0 ] && args+=(--set boot.coordinator=1
					     --set boot.world=$n)
		fi
		if [ "$PORT" = udp ]; then
			args+=(--set port.type=udp)
		else
			args+=(--set port.type=dpdk --set port.dev=af_packet
			       --set port.iface=ipd$i)
		fi
		# shellcheck disable=SC2206
		args+=("$@" ${NODE_ARGS[$i]:-})
		ip netns exec "${P}n$i" "$DAEMON" "${args[@]}" \
			</dev/null >"$RUN/${P}n$i.log" 2>&1 &
		PIDS+=($!)
	done
	for ((i = 0; i < n; i++)); do
		for _ in $(seq 600); do
			[ -f "$RUN/${P}n$i/ready" ] && break
			kill -0 "${PIDS[$i]}" 2>/dev/null ||
				fail "collstackd in ${P}n$i exited"
			sleep 0.1
		done
		[ -f "$RUN/${P}n$i/ready" ] || fail "${P}n$i not ready"
	done
	echo "up: $n nodes, port $PORT"
}

bench() {	# T args...: -m iter, every element of every iteration checked
	local t=$1; shift
	"$CLI" bench --cluster "$ENV_FILE" --trainers-per-node "$t" \
		--timeout 300 -m iter "$@"
}

ctl() { cs_ctl "$1" "$2"; }	# run_dir request -> reply line
ar_sum() {	# KEY: ar_stats KEY summed over the nodes
	local ns n=0
	for ns in "${NODES[@]}"; do
		n=$((n + $(kv "$(ctl "$RUN/$ns" ar_stats)" "$1")))
	done
	echo "$n"
}

sidecars_alive() {
	for p in "${PIDS[@]}"; do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ] ||
			fail "sidecar PID $p died"
	done
}

case_ar() {	# N T [collstackd --set args...]
	local st n=$1 t=$2 want="served by lcore 0"
	shift 2
	up "$n" "$@"
	bench "$t" -o allreduce -b 4K -e 1M -f 16 -n 3 -w 1 ||
		fail "allreduce ${n}x$t: wrong elements or an error"
	sidecars_alive
	# ipc.on_lcore (default 1): lcore 0 serves the trainers, on every
	# port, unless turned off (then a thread of its own does)
	[ $# -gt 0 ] || grep -q "$want" "$RUN/${P}n0.log" ||
		fail "ipc.on_lcore: no '$want' in ${P}n0's log"
	[ $# -eq 0 ] || ! grep -q "$want" "$RUN/${P}n0.log" ||
		fail "ipc.on_lcore=0: '$want' in ${P}n0's log"
	# trainer segments are registered with the (dpdk) port: the
	# cross-node step's frames point into local rank 0's recv buffer
	[ "$PORT" = af_packet ] || return 0
	st=$(ctl "$RUN/${P}n0" stats)
	[ "$(kv "$st" tx_zero_copy)" -gt 0 ] ||
		fail "no frame of a trainer op went out zero-copy: $st"
}

# Membership from the coordinator (view epoch > 0) and 5 % of the frames
# dropped by the fault shim: every ACK, including the previous op's
# answers to retransmissions, must carry the view's epoch, or the peer
# drops it as stale and retransmits until it gives up.
case_boot_fault() {
	local n
	BOOT=1
	up 4 --set fault.drop=0.05 --set fault.seed=7
	bench 1 -o allreduce -b 64K -e 1M -f 4 -n 8 -w 1 ||
		fail "allreduce with 5 % loss (boot): wrong elements or an error"
	sidecars_alive
	n=$(ar_sum rx_stale_epoch)
	echo "frames dropped as stale on the 4 sidecars: $n"
	[ "$n" = 0 ] || fail "$n frames carried a stale epoch"
}

# Small allreduces (direct exchanges) are done at result-ready with
# coll.direct_early (default; tp.early of the transport core): the trainer
# has its result while the core goes on resending the op's own frames
# from the engine's copy until they are acknowledged (a lost frame is then
# resent by an op its trainer already saw done). 5 % loss; every element
# of every iteration checked; with coll.direct_early=0 nothing is early.
case_early() {
	local early resent dropped
	up 4 --set fault.drop=0.05 --set fault.seed=5
	bench 1 -o allreduce -b 64 -e 16K -f 4 -n 60 -w 1 ||
		fail "small allreduces, 5 % loss: wrong elements or an error"
	bench 1 -o reduce_scatter -b 4K -e 16K -f 4 -n 20 -w 1 ||
		fail "barriers and reduce_scatter, 5 % loss: failed"
	sidecars_alive
	early=$(ar_sum ops_early)
	resent=$(ar_sum tx_retx_early)
	dropped=$(ar_sum early_dropped)
	echo "early ops $early, frames resent after their op was done" \
		"$resent, early ops ended by the next one $dropped"
	[ "$early" -gt 0 ] || fail "no op completed early"
	[ "$resent" -gt 0 ] || fail "no finished op resent a lost frame"
	down
	up 4 --set coll.direct_early=0
	bench 1 -o allreduce -b 64 -e 16K -f 4 -n 5 -w 1 ||
		fail "small allreduces, coll.direct_early=0: failed"
	early=$(ar_sum ops_early)
	[ "$early" = 0 ] ||
		fail "coll.direct_early=0, yet $early ops completed early"
}

case_gather() {
	local out
	up 2
	bench 2 -o all_gather -b 4K -e 256K -f 8 -n 2 -w 1 ||
		fail "all_gather failed"
	bench 2 -o broadcast -b 4K -e 256K -f 8 -n 2 -w 1 ||
		fail "broadcast failed"
	bench 2 -o reduce_scatter -b 4K -e 256K -f 8 -n 2 -w 1 ||
		fail "reduce_scatter failed"
	# 2 ranks per node, node i ranks 2i, 2i + 1: node blocks, so the
	# reduce-scatters and all-gathers above ran on the ring
	grep -q "2 ranks per node in node blocks" "$RUN/${P}n0.log" ||
		fail "2 x 2 in node blocks, yet not run on the ring"
	# back-to-back timing (the default): the warm-up and the last timed
	# iteration are checked, and the CPU column is a number
	out=$("$CLI" bench --cluster "$ENV_FILE" --trainers-per-node 2 \
		--timeout 300 -o allreduce -b 4K -e 64K -f 16 -n 5 -w 1) ||
		fail "allreduce -m b2b failed"
	echo "$out"
	awk '$1 ~ /^[0-9]+$/ && $13 ~ /^[0-9.]+$/ { n++ } END { exit n != 4 }' \
		<<<"$out" || fail "b2b: not 4 rows with a cpu(s/GB) figure"
	sidecars_alive
}

# One trainer per node: reduce-scatter and all-gather run as such on the
# ring (daemon_ipc.c launch()), broadcast as a sum; with 3 % loss in the
# fault shim, many small operations in a row (each iteration is a
# barrier and the operation: a node that got two operations ahead of
# another would leave it without the ACK it waits for), then large ones.
case_gather_ring() {
	up 4 --set fault.drop=0.03 --set fault.seed=11
	for o in reduce_scatter all_gather broadcast; do
		bench 1 -o $o -b 4K -e 64K -f 16 -n 40 -w 1 ||
			fail "$o, 4 x 1, 3 % loss, small: failed"
		bench 1 -o $o -b 1M -e 4M -f 4 -n 2 -w 1 ||
			fail "$o, 4 x 1, 3 % loss, large: failed"
	done
	sidecars_alive
}

# loop_trainers N T OP BYTES: T trainers on each of N nodes running OP of
# BYTES in a loop (output in $RUN/k<rank>.out); their PIDs in LOOP_PIDS
loop_trainers() {
	local n=$1 t=$2 i l
	LOOP_PIDS=()
	for ((i = 0; i < n; i++)); do
		for ((l = 0; l < t; l++)); do
			ip netns exec "${P}n$i" env RANK=$((i * t + l)) \
				WORLD_SIZE=$((n * t)) LOCAL_RANK=$l \
				LOCAL_WORLD_SIZE=$t \
				COLLSTACK_SOCKET=$RUN/${P}n$i/collstack.sock \
				"$TRAINER" -o "$3" -b "$4" -e "$4" -n 100000 \
				-w 0 >"$RUN/k$((i * t + l)).out" 2>&1 &
			LOOP_PIDS+=($!)
		done
	done
}

# ended_with_error K PID SECONDS WHY: trainer rank K must end within
# SECONDS (else every loop trainer is killed and the case fails), and
# with an error
ended_with_error() {
	local k=$1 pid=$2 rc
	for _ in $(seq $(($3 * 10))); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "${LOOP_PIDS[@]}" 2>/dev/null
		fail "trainer rank $k still running $3 s after $4"
	fi
	wait "$pid"
	rc=$?
	[ $rc -ne 0 ] || fail "trainer rank $k reported success"
	echo "rank $k ended with status $rc (expected: an error)"
	grep "cs-trainer-bench rank" "$RUN/k$k.out" | sed 's/^/  /'
}

case_kill() {
	local n=2 t=2 pids=() k
	# node 0's group dies with its rank: the op in flight is announced
	# cancelled; ops node 1 posts after that are held on node 0 until
	# tp.hold_ttl, then answered as timed out there (naming node 0)
	up $n --set tp.hold_ttl=5s
	loop_trainers $n $t allreduce 64K
	pids=("${LOOP_PIDS[@]}")
	# let operations flow, then kill local rank 1 of node 0 mid-run
	sleep 3
	for p in "${pids[@]}"; do
		kill -0 "$p" 2>/dev/null ||
			fail "trainer $p ended before the kill"
	done
	kill -KILL "${pids[1]}"
	# the others must end (with an error), not hang
	for k in 0 2 3; do
		ended_with_error $k "${pids[$k]}" 30 "rank 1 died"
	done
	wait "${pids[1]}" 2>/dev/null
	sidecars_alive
	# the sidecars still serve: a fresh run on the same group name
	sleep 1
	bench $t -o allreduce -b 4K -e 64K -f 16 -n 2 -w 1 ||
		fail "a new run after the kill failed"
}

case_python() {
	local n=2 pids=() i rc=0
	local lib
	lib=$(ls "$BUILD"/client/libcollstack.so 2>/dev/null) ||
		skip "libcollstack.so not built"
	command -v python3 >/dev/null || skip "no python3"
	up $n
	for ((i = 0; i < n; i++)); do
		ip netns exec "${P}n$i" env RANK=$i WORLD_SIZE=$n LOCAL_RANK=0 \
			LOCAL_WORLD_SIZE=1 COLLSTACK_LIB="$lib" \
			COLLSTACK_SOCKET=$RUN/${P}n$i/collstack.sock \
			PYTHONPATH="$PWD/python" \
			timeout 240 python3 python/examples/train_local.py &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || rc=1
	done
	[ $rc = 0 ] || fail "train_local.py across 2 nodes failed"
	sidecars_alive
}

# `collstack launch -T 2` on 4 nodes: the hybrid example (MLP, embedding,
# MoE layer expert-parallel: 4 all-to-alls per step, the embedding
# switched to PS at step 20) as 8 Python trainers through the sidecars;
# every rank's parameters must hash the same at the end (the experts
# after an all-gather), and rank 0 prints its summary (every rank's
# output with --all-output).
case_launch() {
	local lib out
	lib=$(ls "$BUILD"/client/libcollstack.so 2>/dev/null) ||
		skip "libcollstack.so not built"
	/usr/bin/python3 -c "import numpy" 2>/dev/null ||
		skip "no numpy for /usr/bin/python3"
	up 4
	out=$(COLLSTACK_LIB="$lib" PYTHONPATH="$PWD/python" timeout 600 \
		"$CLI" launch -T 2 --timeout 500 --cluster "$ENV_FILE" -- \
		/usr/bin/python3 python/examples/train_hybrid.py --steps 40 \
		--switch-at 20 --config examples/hybrid_expert_parallel.conf \
		2>&1) || { echo "$out"; fail "collstack launch exited $?"; }
	echo "$out" | sed 's/^/  /'
	echo "$out" | grep -q "^hybrid: 8 ranks, 40 steps,.*'embedding': 'ps'.*params identical on every rank: True" ||
		fail "no 'params identical' line with the embedding on ps from rank 0"
	echo "$out" | grep -q "^experts: 8, expert-parallel" ||
		fail "the experts were not expert-parallel"
	# a program that fails on one rank: launch says so and exits 1
	if "$CLI" launch -T 2 --cluster "$ENV_FILE" -- sh -c '[ "$RANK" != 5 ]' \
		>"$RUN/launch_fail.out" 2>&1; then
		fail "launch exited 0 although rank 5 exited 1"
	fi
	grep -q "trainer rank 5 (${P}n2) exited 1" "$RUN/launch_fail.out" ||
		{ cat "$RUN/launch_fail.out"; fail "launch did not name rank 5"; }
	sidecars_alive
}

# `collstack launch -T 2` on 4 nodes: python/examples/train_moe.py, an
# expert-parallel MoE layer (16 experts, top-2, 3 all-to-alls per step
# through the sidecars, two-level), then the same under 3 % fault-shim
# loss, once with capacity-padded all-to-alls and once with --alltoallv
# (the rows used only); rank 0 compares the loss curve and the expert
# weights with a single-process run and every rank exits 1 if they differ.
case_moe() {
	local lib out
	lib=$(ls "$BUILD"/client/libcollstack.so 2>/dev/null) ||
		skip "libcollstack.so not built"
	/usr/bin/python3 -c "import numpy" 2>/dev/null ||
		skip "no numpy for /usr/bin/python3"
	up 4 "$@"
	for v in "" --alltoallv; do
		# shellcheck disable=SC2086
		out=$(COLLSTACK_LIB="$lib" PYTHONPATH="$PWD/python" timeout 600 \
			"$CLI" launch -T 2 --timeout 500 --cluster "$ENV_FILE" -- \
			/usr/bin/python3 python/examples/train_moe.py --steps 30 $v 2>&1) ||
			{ echo "$out"; fail "collstack launch train_moe.py $v exited $?"; }
		echo "$out" | sed 's/^/  /'
		echo "$out" | grep -q "^moe: 8 ranks, 30 steps, 16 experts top-2, .* match: True" ||
			fail "no 'match: True' line from rank 0 ($v)"
	done
	sidecars_alive
}

# The ports' tx_bytes (collstack stats) summed over the cluster's sidecars.
tx_bytes() {
	"$CLI" stats --cluster "$ENV_FILE" --raw |
		sed -n 's/.* stats: ok .* tx_bytes=\([0-9]*\) .*/\1/p' |
		awk '{s += $1} END {printf "%.0f\n", s}'
}

# CS_MOE_LAYER_NODE_SUM across N nodes x 2 trainers (no loss: the bytes
# are compared): tests/netns/cs_trainer_moe.c node-sum (every bit against
# the node-order reference, the bad inputs, layers that differ between
# ranks refused on every rank naming rank 1, a proper round after); then
# `collstack bench -o moe` without and with --node-sum, the same sizes
# (every value checked against its reference, #wrong 0), and the sidecars'
# tx_bytes during each: the node-sum run must have sent fewer; then the
# check again with one trainer per node (no gather step).
case_moe_node_sum() {	# N
	local n=$1 out b0 b1 b2 plain ns; shift
	up "$n" "$@"
	out=$(timeout 300 "$CLI" launch -T 2 --timeout 240 \
		--cluster "$ENV_FILE" -- "$BUILD/tests/netns/cs-trainer-moe" 3 node-sum 2>&1) ||
		{ echo "$out"; fail "cs-trainer-moe node-sum ${n}x2 exited $?"; }
	echo "$out" | sed 's/^/  /'
	echo "$out" | grep -q "^moe api node-sum: $((2 * n)) ranks, 3 rounds + 4 bad inputs + layers that differ: ok" ||
		fail "no 'ok' line from rank 0"
	b0=$(tx_bytes)
	bench 2 -o moe -b 32K -e 128K -f 4 -n 4 -w 1 ||
		fail "bench -o moe ${n}x2: wrong values or an error"
	b1=$(tx_bytes)
	bench 2 -o moe -b 32K -e 128K -f 4 -n 4 -w 1 --node-sum ||
		fail "bench -o moe --node-sum ${n}x2: wrong values or an error"
	b2=$(tx_bytes)
	plain=$((b1 - b0)) ns=$((b2 - b1))
	echo "  tx_bytes of the sidecars: per-slot combine $plain, node-sum $ns"
	[ "$plain" -gt 0 ] && [ "$ns" -gt 0 ] || fail "no tx_bytes counted"
	[ "$ns" -lt "$plain" ] ||
		fail "node-sum sent $ns bytes, not fewer than the per-slot combine's $plain"
	# one trainer per node: no gather step, each rank sums its slots
	out=$(timeout 300 "$CLI" launch -T 1 --timeout 240 \
		--cluster "$ENV_FILE" -- "$BUILD/tests/netns/cs-trainer-moe" 2 node-sum 2>&1) ||
		{ echo "$out"; fail "cs-trainer-moe node-sum ${n}x1 exited $?"; }
	echo "$out" | sed 's/^/  /'
	echo "$out" | grep -q "^moe api node-sum: $n ranks, 2 rounds + 4 bad inputs + layers that differ: ok" ||
		fail "no 'ok' line from rank 0 (${n}x1)"
	sidecars_alive
}

# CS_MOE_LAYER_NODE_ROWS across N nodes x 2 trainers (no loss: the bytes
# are compared): cs_trainer_moe.c node-rows and node-rows-sum (every row,
# source, token, slot and bit against the reference, the bad inputs,
# layers that differ refused on every rank naming rank 1, a proper round
# after); then `collstack bench -o moe` plain, --node-rows, --node-sum,
# --node-sum --node-rows, the same sizes (every value checked, #wrong 0),
# and the sidecars' tx_bytes during each: node rows must send fewer than
# rank rows, with and without the node sum; then the checks with one
# trainer per node (nothing to forward).
case_moe_node_rows() {	# N
	local n=$1 out b0 b1 b2 b3 b4 plain nr ns nrns v; shift
	up "$n" "$@"
	for v in node-rows node-rows-sum; do
		out=$(timeout 300 "$CLI" launch -T 2 --timeout 240 \
			--cluster "$ENV_FILE" -- "$BUILD/tests/netns/cs-trainer-moe" 3 $v 2>&1) ||
			{ echo "$out"; fail "cs-trainer-moe $v ${n}x2 exited $?"; }
		echo "$out" | sed 's/^/  /'
		echo "$out" | grep -q "^moe api $v: $((2 * n)) ranks, 3 rounds + 4 bad inputs + layers that differ: ok" ||
			fail "no 'ok' line from rank 0 ($v)"
	done
	b0=$(tx_bytes)
	bench 2 -o moe -b 32K -e 128K -f 4 -n 4 -w 1 ||
		fail "bench -o moe ${n}x2: wrong values or an error"
	b1=$(tx_bytes)
	bench 2 -o moe -b 32K -e 128K -f 4 -n 4 -w 1 --node-rows ||
		fail "bench -o moe --node-rows ${n}x2: wrong values or an error"
	b2=$(tx_bytes)
	bench 2 -o moe -b 32K -e 128K -f 4 -n 4 -w 1 --node-sum ||
		fail "bench -o moe --node-sum ${n}x2: wrong values or an error"
	b3=$(tx_bytes)
	bench 2 -o moe -b 32K -e 128K -f 4 -n 4 -w 1 --node-sum --node-rows ||
		fail "bench -o moe --node-sum --node-rows ${n}x2: wrong values or an error"
	b4=$(tx_bytes)
	plain=$((b1 - b0)) nr=$((b2 - b1)) ns=$((b3 - b2)) nrns=$((b4 - b3))
	echo "  tx_bytes of the sidecars: plain $plain, node-rows $nr, node-sum $ns, node-sum+node-rows $nrns"
	[ "$plain" -gt 0 ] && [ "$nr" -gt 0 ] && [ "$ns" -gt 0 ] && [ "$nrns" -gt 0 ] ||
		fail "no tx_bytes counted"
	[ "$nr" -lt "$plain" ] ||
		fail "node-rows sent $nr bytes, not fewer than rank rows' $plain"
	[ "$nrns" -lt "$ns" ] ||
		fail "node-sum+node-rows sent $nrns bytes, not fewer than node-sum's $ns"
	# one trainer per node: nothing to forward
	for v in node-rows node-rows-sum; do
		out=$(timeout 300 "$CLI" launch -T 1 --timeout 240 \
			--cluster "$ENV_FILE" -- "$BUILD/tests/netns/cs-trainer-moe" 2 $v 2>&1) ||
			{ echo "$out"; fail "cs-trainer-moe $v ${n}x1 exited $?"; }
		echo "$out" | sed 's/^/  /'
		echo "$out" | grep -q "^moe api $v: $n ranks, 2 rounds + 4 bad inputs + layers that differ: ok" ||
			fail "no 'ok' line from rank 0 ($v, ${n}x1)"
	done
	sidecars_alive
}

# The MoE API in C (collstack/moe.h): N nodes x 2 trainers through
# `collstack launch`, tests/netns/cs_trainer_moe.c: dispatch + combine
# (receive counts sent along with the rows) checked against a
# single-process reference, every row, source and bit of the sums; then
# bad input on one rank (expert index E, -2, too many tokens, a NULL
# buffer) refused on every rank with CS_ERR_BAD_DESC naming it, nothing
# sent; then a proper round again; then `collstack bench -o moe` (2 to 32
# KiB of tokens per rank, every combined value checked).
case_moe_api() {	# N [collstackd --set args...]
	local n=$1 out; shift
	up "$n" "$@"
	out=$(timeout 300 "$CLI" launch -T 2 --timeout 240 \
		--cluster "$ENV_FILE" -- "$BUILD/tests/netns/cs-trainer-moe" 3 2>&1) ||
		{ echo "$out"; fail "cs-trainer-moe ${n}x2 exited $?"; }
	echo "$out" | sed 's/^/  /'
	echo "$out" | grep -q "^moe api: $((2 * n)) ranks, 3 rounds + 4 bad inputs: ok" ||
		fail "no 'ok' line from rank 0"
	# `collstack bench -o moe`: every combined value checked (#wrong 0)
	bench 2 -o moe -b 2K -e 32K -f 4 -n 3 -w 1 ||
		fail "bench -o moe ${n}x2: wrong values or an error"
	sidecars_alive
}

# case_peer_lost N T COUNT [VICTIM]: N nodes x T trainers (node i: ranks
# i*T..), allreduces of COUNT f32; node VICTIM (2) is lost. Trainer r
# writes $RUN/t<r>.out.
case_peer_lost() {
	local n=$1 t=$2 count=$3 victim=${4:-2} fail_s=${IPCD_FAIL_TIMEOUT_S:-2}
	local pids=() i l r nr t_kill t_lost dt bound worst=0 rc
	local k=${PEERLOST_BUCKETS:-1}
	[ -x "$PEERLOST" ] || fail "not built: $PEERLOST"
	BOOT=1
	up "$n" --set member.hb_interval=200ms \
		--set member.fail_timeout=${fail_s}s --set rel.max_timeouts=3000
	for ((i = 0; i < n; i++)); do
		for ((l = 0; l < t; l++)); do
			r=$((i * t + l))
			ip netns exec "${P}n$i" env RANK=$r WORLD_SIZE=$((n * t)) \
				LOCAL_RANK=$l LOCAL_WORLD_SIZE=$t \
				COLLSTACK_SOCKET=$RUN/${P}n$i/collstack.sock \
				timeout 600 "$PEERLOST" -c "$count" -g train -p 1 \
				-k "$k" -r -m 3 >"$RUN/t$r.out" 2>&1 &
			pids+=($!)
			TPIDS+=($!)
		done
	done
	# every trainer in its loop (2 allreduces done), then the loss
	for ((r = 0; r < n * t; r++)); do
		for _ in $(seq 1200); do
			grep -q '^ok iter=1$' "$RUN/t$r.out" && break
			kill -0 "${pids[$r]}" 2>/dev/null ||
				{ cat "$RUN/t$r.out"; fail "trainer $r ended early"; }
			sleep 0.1
		done
		grep -q '^ok iter=1$' "$RUN/t$r.out" ||
			fail "trainer $r: no allreduce done in 120 s"
	done
	# the whole node goes: its sidecar and its trainers (IPCD_LOSS=link:
	# its link goes down instead, so only the heartbeats can tell)
	t_kill=$(date +%s.%N)
	if [ "${IPCD_LOSS:-kill}" = link ]; then
		ip link set "ipv$victim" down
		for ((l = 0; l < t; l++)); do
			kill -KILL "${pids[$((victim * t + l))]}"
		done
		echo "link of ${P}n$victim down at $t_kill (member.fail_timeout ${fail_s} s)"
	else
		kill -KILL "${PIDS[$victim]}"
		for ((l = 0; l < t; l++)); do
			kill -KILL "${pids[$((victim * t + l))]}"
		done
		echo "kill -9 the sidecar of ${P}n$victim at $t_kill (member.fail_timeout ${fail_s} s)"
	fi
	bound=$((2 * fail_s))
	for ((r = 0; r < n * t; r++)); do
		[ $((r / t)) = $victim ] && continue
		wait "${pids[$r]}"
		rc=$?
		grep -v '^ok iter=' "$RUN/t$r.out" | sed "s/^/  rank $r: /"
		[ $rc = 0 ] || fail "trainer rank $r exited $rc"
		grep -q "^lost .* status=-1001 .* node=$victim msg=.*node $victim was lost" \
			"$RUN/t$r.out" ||
			fail "rank $r: no CS_ERR_PEER_LOST naming node $victim"
		# every bucket in flight: done before the loss, or lost
		grep -qE "^buckets=$k done=[0-9]+ lost=[1-9][0-9]* other=0$" \
			"$RUN/t$r.out" ||
			fail "rank $r: a bucket ended otherwise than done or lost"
		nr=$((r / t > victim ? r - t : r))
		grep -q "^reformed group=train.lost$victim rank=$nr size=$(((n - 1) * t)) iters=3 wrong=0 " \
			"$RUN/t$r.out" || fail "rank $r: the group of the survivors failed"
		t_lost=$(sed -n 's/^lost t=\([0-9.]*\) .*/\1/p' "$RUN/t$r.out")
		dt=$(awk -v a="$t_kill" -v b="$t_lost" 'BEGIN { printf "%.3f", b - a }')
		echo "rank $r: CS_ERR_PEER_LOST $dt s after the loss (bound ${bound} s)"
		awk -v d="$dt" -v w="$worst" 'BEGIN { exit !(d > w) }' && worst=$dt
		awk -v d="$dt" -v b="$bound" 'BEGIN { exit !(d >= 0 && d < b) }' ||
			fail "rank $r: $dt s, bound 2 x fail_timeout = $bound s"
	done
	for ((l = 0; l < t; l++)); do
		wait "${pids[$((victim * t + l))]}" 2>/dev/null
	done
	echo "slowest survivor: ${worst} s (bound ${bound} s)"
	for ((i = 0; i < n; i++)); do
		[ $i = $victim ] && continue
		[ "$(cat /proc/${PIDS[$i]}/comm 2>/dev/null)" = collstackd ] ||
			fail "sidecar of ${P}n$i died"
		grep -E "view epoch|peer lost" "$RUN/${P}n$i.log" | head -n 3 |
			sed "s/^/  ${P}n$i: /"
	done
}

# 4 nodes x 2 trainers, one group, 8 allreduce buckets posted before any
# is waited for (collstack bench -k 8, -m iter: every element of every
# bucket of every iteration checked). The transport core of node 0 must
# have carried several of them at once (peak_ops: a serial group peaks
# at 2 to 3, an early barrier beside a bucket; 32 iterations of 8 here).
case_pipe() {
	local peak
	up 4
	bench 2 -o allreduce -k 8 -b 64K -e 4M -f 4 -n 3 -w 1 ||
		fail "8 buckets in flight: wrong elements or an error"
	bench 2 -o all_gather -k 8 -b 64K -e 1M -f 16 -n 2 -w 1 ||
		fail "8 all-gather buckets in flight (staging buffers)"
	sidecars_alive
	peak=$(kv "$(ctl "$RUN/${P}n0" ar_stats)" peak_ops)
	echo "node 0: at most $peak operations on the transport core at once"
	[ "$peak" -ge 4 ] || fail "the buckets did not overlap (peak_ops $peak)"
}

# Trainers joining as told: join_run NAME OP NOPS SPEC...; SPEC is
# "NODE RANK SIZE [LOCAL_RANK LOCAL_SIZE [COUNT]]" (default 0 1 1024);
# the k-th SPEC's output goes to $RUN/j<k>.out.
join_run() {
	local name=$1 op=$2 nops=$3 k=0 pids=() spec
	shift 3
	[ -x "$JOIN" ] || fail "not built: $JOIN"
	for spec in "$@"; do
		# shellcheck disable=SC2086
		set -- $spec
		ip netns exec "${P}n$1" env \
			COLLSTACK_SOCKET=$RUN/${P}n$1/collstack.sock \
			timeout 300 "$JOIN" "$name" "$2" "$3" "${4:-0}" "${5:-1}" \
			"$op" "$nops" "${6:-1024}" >"$RUN/j$k.out" 2>&1 &
		pids+=($!)
		k=$((k + 1))
	done
	for ((k = 0; k < ${#pids[@]}; k++)); do
		wait "${pids[$k]}" ||
			{ cat "$RUN/j$k.out"; fail "trainer $k of '$name' exited $?"; }
		sed "s/^/  $name trainer $k: /" "$RUN/j$k.out"
	done
}

# expect K PATTERN: trainer K's output has a line matching it
expect() {
	grep -qE "$2" "$RUN/j$1.out" || fail "trainer $1: no line matching '$2'"
}

# Nobody may report the disagreement as a lost or silent peer.
no_peer_lost() {
	local i
	for i in "$@"; do
		! grep -qE "was lost|stopped answering|status=-1001" \
			"$RUN/j$i.out" || fail "trainer $i: reported as a lost peer"
	done
}

case_members_size() {
	up 2
	# size 2 on ${P}n0 (rank 0), size 3 on ${P}n1 (rank 1): today the
	# allreduce "succeeded" with the sum of the two ranks that exist
	join_run gs allreduce 2 "0 0 2" "1 1 3"
	expect 0 '^error op=0 status=-1004 msg=.*refused: node 1 joined the group with size 3'
	expect 1 '^error op=0 status=-1004 msg=.*refused: node 0 joined the group with size 2'
	expect 0 '^error op=1 status=-1004 msg=.*node 1 joined the group with size 3'
	expect 1 '^error op=1 status=-1004 msg=.*node 0 joined the group with size 2'
	no_peer_lost 0 1
	# size 3 everywhere, but rank 2 nowhere
	join_run gm allreduce 1 "0 0 3" "1 1 3"
	expect 0 '^error op=0 status=-1004 msg=.*refused: rank 2 of the group is on no node'
	expect 1 '^error op=0 status=-1004 msg=.*refused: rank 2 of the group is on no node'
	no_peer_lost 0 1
	# a proper group on the same sidecars: (1 + 2) x 1024
	join_run ok allreduce 2 "0 0 2" "1 1 2"
	expect 0 '^ok op=1 sum=3072$'
	expect 1 '^ok op=1 sum=3072$'
	grep -h "refused" "$RUN/${P}n0.log" "$RUN/${P}n1.log" | head -n 4 |
		sed 's/^/  log: /'
	sidecars_alive
}

case_members_rank() {
	up 2
	# rank 0 of a group of 2 claimed on both nodes: today the allreduce
	# "succeeded" and the all-gather failed as a lost peer
	join_run ga allreduce 1 "0 0 2" "1 0 2"
	expect 0 '^error op=0 status=-1004 msg=.*refused: node 1 claims rank 0 of the group'
	expect 1 '^error op=0 status=-1004 msg=.*refused: node 0 claims rank 0 of the group'
	no_peer_lost 0 1
	join_run gb all_gather 1 "0 0 2" "1 0 2"
	expect 0 '^error op=0 status=-1004 msg=.*refused: node 1 claims rank 0 of the group'
	expect 1 '^error op=0 status=-1004 msg=.*refused: node 0 claims rank 0 of the group'
	no_peer_lost 0 1
	# and a proper all-gather then works: blocks of 1s and 2s
	join_run ok all_gather 1 "0 0 2" "1 1 2"
	expect 0 '^ok op=0 sum=3072$'
	expect 1 '^ok op=0 sum=3072$'
	sidecars_alive
}

# ipc.dev_pipe (docs/gpu.md) set differently on the two sidecars (node 0:
# the words $1, node 1: $2): a large allreduce would be cut into slices on
# one node and not on the other (or into other slices), and the nodes' steps
# would not match. The group's membership check carries each node's cut
# size: an operation that the nodes would cut differently is refused on
# every rank with an error that names ipc.dev_pipe and the other node, the
# ones no node cuts run, and the sidecars go on. Counts: 1M floats (4
# MiB, over any cut size here) and 1024 (never cut); every element checked.
case_pipe_mismatch() {
	NODE_ARGS=("$1" "$2")
	up 2
	# the group's first operation (its membership check) is cut
	join_run pm allreduce 3 "0 0 2 0 1 1048576,1024,1048576" \
		"1 1 2 0 1 1048576,1024,1048576"
	for k in 0 1; do
		expect $k '^error op=0 status=-1004 msg=.*refused on every node, nothing sent: node [01] cuts it into slices at ipc.dev_pipe=[0-9]+ bytes'
		expect $k '^ok op=1 sum=3072$'
		expect $k '^error op=2 status=-1004 msg=.*ipc.dev_pipe'
	done
	no_peer_lost 0 1
	# ... or not: a later one is
	join_run pn allreduce 3 "0 0 2 0 1 1024,1048576,1024" \
		"1 1 2 0 1 1024,1048576,1024"
	for k in 0 1; do
		expect $k '^ok op=0 sum=3072$'
		expect $k '^error op=1 status=-1004 msg=.*refused on every node, nothing sent: node [01] cuts it into slices at ipc.dev_pipe=[0-9]+ bytes'
		expect $k '^ok op=2 sum=3072$'
	done
	no_peer_lost 0 1
	grep -h "ipc.dev_pipe" "$RUN/${P}n0.log" "$RUN/${P}n1.log" |
		head -n 4 | sed 's/^/  log: /'
	sidecars_alive
}

# layout_ok NAME: each of the 4 trainers of join_run: 3 operations, every
# element right
layout_ok() {
	local k
	for ((k = 0; k < 4; k++)); do
		[ "$(grep -c '^ok op=' "$RUN/j$k.out")" = 3 ] ||
			fail "$1: trainer $k: not 3 good operations"
	done
}

# Reduce-scatter and all-gather across nodes run on the ring only when
# the membership check found node blocks (every node L ranks, node i
# ranks iL .. iL + L - 1); any other layout rides an allreduce. Both must
# give every rank its own block (cs-trainer-join checks each element).
case_layout() {
	local op g k
	up 2
	for op in reduce_scatter all_gather; do
		# node blocks: node 0 ranks 0, 1; node 1 ranks 2, 3
		join_run "bk$op" $op 3 "0 0 4 0 2 4096" "0 1 4 1 2 4096" \
			"1 2 4 0 2 4096" "1 3 4 1 2 4096"
		layout_ok "bk$op"
		# interleaved: node 0 ranks 0, 2; node 1 ranks 1, 3
		join_run "il$op" $op 3 "0 0 4 0 2 4096" "0 2 4 1 2 4096" \
			"1 1 4 0 2 4096" "1 3 4 1 2 4096"
		layout_ok "il$op"
		# uneven: node 0 ranks 0, 1, 2; node 1 rank 3
		join_run "uv$op" $op 3 "0 0 4 0 3 4096" "0 1 4 1 3 4096" \
			"0 2 4 2 3 4096" "1 3 4 0 1 4096"
		layout_ok "uv$op"
	done
	grep -q "group 'bkreduce_scatter': 2 ranks per node in node blocks" \
		"$RUN/${P}n0.log" || fail "node blocks, yet not on the ring"
	! grep -qE "group '(il|uv)[a-z_]*': .* in node blocks" \
		"$RUN/${P}n0.log" "$RUN/${P}n1.log" ||
		fail "a group not in node blocks was taken for one"
	sidecars_alive
}

# A descriptor one node refuses: ranks 0 and 1 on ${P}n0 post different
# counts (refused there as a mismatch naming rank 1), rank 2 on ${P}n1 waits
# for ${P}n0 in the cross-node step. Rank 2 must end with ${P}n0's error (the
# verdict exchange after its step gave up on the silent node), not as a
# lost peer; the group then goes on (op 1 is refused the same way) and a
# proper group works.
case_members_desc() {
	up 2 --set rel.max_timeouts=64
	join_run gd allreduce 2 "0 0 3 0 2 1024" "0 1 3 1 2 512" "1 2 3 0 1"
	expect 0 '^error op=0 status=-1004 msg=.*differs from another rank.s call: rank 1$'
	expect 1 '^error op=0 status=-1004 msg=.*differs from another rank.s call: rank 1$'
	expect 2 '^error op=0 status=-1004 msg=.*differs from another rank.s call: rank 1$'
	expect 2 '^error op=1 status=-1004 msg=.*differs from another rank.s call: rank 1$'
	no_peer_lost 0 1 2
	join_run ok allreduce 1 "0 0 3 0 2" "0 1 3 1 2" "1 2 3 0 1"
	expect 2 '^ok op=0 sum=6144$'
	grep -h "refused on node" "$RUN/${P}n1.log" | head -n 2 | sed 's/^/  log: /'
	sidecars_alive
}

# ipc.trace_dir and COLLSTACK_BENCH_TRACE_DIR: every operation of a run is
# timed on both sides, and scripts/op-breakdown.py matches each trainer
# operation with its sidecar's record on every node.
case_trace() {
	local t out
	[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
	t=$(mktemp -d)
	up 4 --set ipc.trace_dir="$t"
	COLLSTACK_BENCH_TRACE_DIR=$t bench 1 -o allreduce -b 4K -e 64K -f 16 \
		-n 20 -w 2 || fail "traced allreduce: wrong elements or an error"
	down	# the sidecars write their records as they stop
	out=$(/usr/bin/python3 scripts/op-breakdown.py "$t" 2>&1) ||
		fail "op-breakdown: $out"
	rm -rf "$t"
	echo "$out"
	grep -q "4 nodes, one trainer each; 0 trainer operations not matched" \
		<<<"$out" || fail "not every operation was matched"
	[ "$(grep -c "bytes, .* of place, 20 operations" <<<"$out")" = 4 ] ||
		fail "expected 2 sizes x 2 places x 20 operations"
	# no step may come out negative: each record is in the order taken
	grep -E "^  [a-z].* -[0-9]" <<<"$out" && fail "a negative step"
	return 0
}

# Every cross-node step on the transport core: allreduce and
# the ring collectives from two trainers per node, 5 % of frames dropped.
case_core() {
	local op
	BOOT=1
	up 4 --set fault.drop=0.05 --set fault.seed=3
	for op in allreduce reduce_scatter all_gather broadcast; do
		bench 2 -o "$op" -b 4K -e 1M -f 16 -n 3 -w 1 ||
			fail "$op 4x2 on the transport core: wrong or failed"
	done
	sidecars_alive
	grep -q "core=1" <<<"$(ctl "$RUN/${P}n0" ar_stats)" ||
		fail "${P}n0 does not run the transport core"
}

# port.queues=2 on the udp port: queue q listens on port.udp_port + q.
# When the queues shared one port (SO_REUSEPORT) the kernel hashed a
# peer's frames onto queue 1, which no session reads, and the first
# operation failed with "peer lost".
case_udp_queues() {
	PORT=udp
	up 2 --set port.queues=2
	bench 1 -o allreduce -b 4K -e 1M -f 16 -n 3 -w 1 ||
		fail "allreduce with port.queues=2 on the udp port failed"
	sidecars_alive
}

# Several groups per trainer, posted in opposite orders on the two nodes
# (ga, gb, gc on node 0; gc, gb, ga on node 1), every round's three
# allreduces in flight together: groups are matched across the nodes by
# their ids, never by posting order, so none waits for another (one
# cross-node op at a time would deadlock here until the deadline). Every
# element of every round checked on every rank; 1 MiB each (ring, not a
# direct exchange), then 64 KiB ones with 3 % loss.
case_groups() {	# T [collstackd --set args...]
	local t=$1 i l k pids=() order out pass ns
	shift
	local extra=("$@")
	[ -x "$GRPBIN" ] || fail "not built: $GRPBIN"
	up 2 "${extra[@]}"
	for pass in "262144 0" "16384 1"; do
		set -- $pass
		if [ "$2" = 1 ]; then
			down
			up 2 --set fault.drop=0.03 --set fault.seed=11 \
				"${extra[@]}"
		fi
		pids=()
		k=0
		for ((i = 0; i < 2; i++)); do
			order=ga,gb,gc
			[ $i = 1 ] && order=gc,gb,ga
			for ((l = 0; l < t; l++)); do
				ip netns exec "${P}n$i" env \
					COLLSTACK_SOCKET=$RUN/${P}n$i/collstack.sock \
					timeout 300 "$GRPBIN" $((i * t + l)) $((2 * t)) \
					"$l" "$t" "$order" 8 "$1" >"$RUN/g$k.out" 2>&1 &
				pids+=($!)
				k=$((k + 1))
			done
		done
		for ((k = 0; k < ${#pids[@]}; k++)); do
			wait "${pids[$k]}" ||
				{ cat "$RUN/g$k.out"; fail "trainer $k (count $1) exited $?"; }
			grep -q "^ok groups=3 rounds=8 wrong=0" "$RUN/g$k.out" ||
				{ cat "$RUN/g$k.out"; fail "trainer $k: no ok line"; }
			sed "s/^/  count $1 trainer $k: /" "$RUN/g$k.out"
		done
		sidecars_alive
		for ns in "${NODES[@]}"; do
			out=$(ctl "$RUN/$ns" ar_stats)
			echo "  $ns: peak_ops=$(kv "$out" peak_ops)" \
				"ops_failed=$(kv "$out" ops_failed)"
		done
	done
}

# cs_alltoall (docs/alltoall.md): first 3 trainers of one node in a group
# of their own (no cross-node step), every block checked to hold its
# sender's rank; then T trainers on each of the N nodes (two-level: each
# node pair's blocks in one aggregated flow on the transport core's
# all-to-all engine), then one per node (no staging copy), every element
# of every iteration checked on every rank.
case_a2a() {	# N T [collstackd --set args...]
	local n=$1 t=$2 k
	shift 2
	up "$n" "$@"
	join_run la alltoall 2 "0 0 3 0 3 1000" "0 1 3 1 3 1000" \
		"0 2 3 2 3 1000"
	for k in 0 1 2; do
		expect $k '^ok op=1 sum=6000$'
	done
	bench "$t" -o alltoall -b 4K -e 1M -f 16 -n 3 -w 1 ||
		fail "alltoall ${n}x$t: wrong elements or an error"
	bench 1 -o alltoall -b 4K -e 256K -f 8 -n 3 -w 1 ||
		fail "alltoall ${n}x1: wrong elements or an error"
	sidecars_alive
}

# Point to point as `collstack bench -o sendrecv` times it (pairs i and
# i + n/2, each sending size bytes to the other): 4 nodes x 2 trainers
# (ranks 0-3 on nodes 0-1, 4-7 on nodes 2-3: every pair crosses nodes),
# 3 buckets per iteration (tags 0..2), 4100 B to 1 MiB (+ 4 B: counts no
# rank count divides); then b2b timing, then one trainer per node.
case_sendrecv() {	# N T [collstackd --set args...]
	local n=$1 t=$2
	shift 2
	up "$n" "$@"
	bench "$t" -o sendrecv -b 4100 -e 1049600 -f 16 -n 3 -w 1 -k 3 ||
		fail "sendrecv ${n}x$t -k 3: wrong elements or an error"
	bench "$t" -o sendrecv -b 4K -e 256K -f 8 -n 5 -w 1 -m b2b ||
		fail "sendrecv ${n}x$t b2b: wrong elements or an error"
	bench 1 -o sendrecv -b 4K -e 1M -f 16 -n 3 -w 1 ||
		fail "sendrecv ${n}x1: wrong elements or an error"
	sidecars_alive
}

# All-to-all inputs that do not add up, on 2 nodes of 2 trainers: each
# is refused with a clear error on every rank (not a lost peer, not a
# hang), the sidecars go on, and a proper all-to-all then works.
case_a2a_bad() {
	local k
	up 2 --set rel.max_timeouts=64 --set coll.deadline=8s
	# ranks not contiguous on a node (0 and 2 here, 1 and 3 there):
	# refused by each node's server before anything is sent
	join_run ba alltoall 1 "0 0 4 0 2" "0 2 4 1 2" "1 1 4 0 2" "1 3 4 1 2"
	for k in 0 1 2 3; do
		expect $k '^error op=0 status=-1004 msg=.*all-to-all across nodes needs the same number L of ranks'
	done
	# contiguous, but against the ring order (node 0 holds ranks 2, 3):
	# refused by the sidecars (a2a_layout), every node told why
	join_run bb alltoall 1 "0 2 4 0 2" "0 3 4 1 2" "1 0 4 0 2" "1 1 4 1 2"
	for k in 0 1 2 3; do
		expect $k '^error op=0 status=-1004 msg=.*all-to-all across nodes needs the same number L of ranks'
	done
	# 2 ranks on node 0, 1 on node 1 (a group of 3): not L on each
	join_run bc alltoall 1 "0 0 3 0 2" "0 1 3 1 2" "1 2 3 0 1"
	for k in 0 1 2; do
		expect $k '^error op=0 status=-1004 msg=.*all-to-all across nodes needs the same number L of ranks'
	done
	# the ranks of node 0 disagree on the count: refused there naming
	# rank 1; node 1's ranks get that error too
	join_run bd alltoall 1 "0 0 4 0 2 1024" "0 1 4 1 2 512" \
		"1 2 4 0 2 1024" "1 3 4 1 2 1024"
	for k in 0 1 2 3; do
		expect $k '^error op=0 status=-1004 msg=.*differs from another rank.s call: rank 1$'
	done
	# the nodes disagree on the count (1024 on node 0, 512 on node 1):
	# not detected before sending (a known limit, docs/alltoall.md);
	# each node's part ends at coll.deadline, nothing is misplaced
	join_run be alltoall 1 "0 0 4 0 2 1024" "0 1 4 1 2 1024" \
		"1 2 4 0 2 512" "1 3 4 1 2 512"
	for k in 0 1 2 3; do
		expect $k '^error op=0 status=-1002 msg=.*deadline passed'
	done
	no_peer_lost 0 1 2 3
	sidecars_alive
	# a proper all-to-all on the same sidecars: (1+2+3+4) x 1024
	join_run ok alltoall 2 "0 0 4 0 2" "0 1 4 1 2" "1 2 4 0 2" "1 3 4 1 2"
	for k in 0 1 2 3; do
		expect $k '^ok op=1 sum=10240$'
	done
	grep -h "all-to-all refused" "$RUN/${P}n0.log" "$RUN/${P}n1.log" |
		head -n 2 | sed 's/^/  log: /'
	sidecars_alive
}

# cs_alltoallv (docs/alltoall.md) on N nodes of T trainers: the counts of
# every pair from tools/cs_trainer_bench.c's matrix, every element of the
# receive buffer checked on every rank (the gaps between blocks too).
case_a2av() {	# N T [collstackd --set args...]
	local n=$1 t=$2
	shift 2
	up "$n" "$@"
	bench "$t" -o alltoallv -b 4K -e 1M -f 16 -n 3 -w 1 --skew 1.1 \
		--seed 7 --zero 25 --silent 3 ||
		fail "alltoallv ${n}x$t (Zipf, empty blocks, rank 3 silent)"
	bench "$t" -o alltoallv -b 4K -e 256K -f 8 -n 3 -w 1 --sink 5 ||
		fail "alltoallv ${n}x$t (everything to rank 5)"
	bench 1 -o alltoallv -b 4K -e 256K -f 8 -n 3 -w 1 --skew 1.1 \
		--seed 3 ||
		fail "alltoallv ${n}x1: wrong elements or an error"
	sidecars_alive
}

# All-to-all-v inputs that must be refused, 2 nodes x 2 trainers: counts
# that do not add up (rank 1 expects one element more from rank 0 than
# rank 0 sends: found by every node in the count exchange, the same pair
# named on every rank, nothing sent), then a block of rank 1 past its
# send buffer (refused by node 0's server, the others told why); each
# bench then runs proper ones on the same sidecars.
case_a2av_bad() {
	local out=$RUN/a2av_bad.out k
	up 2 --set rel.max_timeouts=64 --set coll.deadline=8s
	bench 2 -o alltoallv -b 4K -e 64K -f 16 -n 2 -w 1 --skew 1.1 \
		--bad counts >"$out" 2>&1 ||
		{ cat "$out"; fail "alltoallv --bad counts: not refused, or then failed"; }
	for k in 0 1 2 3; do
		grep -q "rank $k: alltoallv --bad counts: malformed .*refused on every rank, nothing sent: the counts do not add up: rank 0's sendcounts\[1\] differs from rank 1's recvcounts\[0\]" "$out" ||
			{ cat "$out"; fail "rank $k: no clear error for counts that do not add up"; }
	done
	grep "alltoallv --bad" "$out" | head -n 1 | sed 's/^/  /'
	sidecars_alive
	bench 2 -o alltoallv -b 4K -e 64K -f 16 -n 2 -w 1 --bad displ \
		>"$out" 2>&1 ||
		{ cat "$out"; fail "alltoallv --bad displ: not refused, or then failed"; }
	grep -q "rank 1: alltoallv --bad displ: malformed .*send buffer runs past its segment" "$out" ||
		{ cat "$out"; fail "rank 1: no clear error for its block past the buffer"; }
	for k in 0 2 3; do
		grep -q "rank $k: alltoallv --bad displ: malformed .*another rank posted a bad call: rank 1" "$out" ||
			{ cat "$out"; fail "rank $k: not told that rank 1's call was bad"; }
	done
	! grep -qE "was lost|stopped answering|deadline" "$out" ||
		{ cat "$out"; fail "reported as a lost peer or a timeout"; }
	grep "alltoallv --bad" "$out" | head -n 2 | sed 's/^/  /'
	sidecars_alive
}

# A sidecar killed (-9) under a loop of all-to-alls, 3 nodes x 2 trainers
# (static peers): the trainers of the two other nodes end within 60 s with
# CS_ERR_PEER_LOST naming node 2 (its sessions gave up after
# rel.max_timeouts), none hangs, and their sidecars live on.
case_a2a_lost() {
	local n=3 t=2 pids=() k p
	up $n --set rel.max_timeouts=24
	loop_trainers $n $t alltoall 192K
	pids=("${LOOP_PIDS[@]}")
	sleep 3
	for p in "${pids[@]}"; do
		kill -0 "$p" 2>/dev/null ||
			{ cat "$RUN"/k*.out; fail "trainer $p ended before the kill"; }
	done
	kill -KILL "${PIDS[2]}"
	for ((k = 0; k < 4; k++)); do
		ended_with_error $k "${pids[$k]}" 60 "node 2 died"
		grep -q "cs-trainer-bench rank $k: alltoall: .*node 2" \
			"$RUN/k$k.out" || fail "trainer rank $k: node 2 not named"
	done
	kill -KILL "${pids[4]}" "${pids[5]}" 2>/dev/null
	wait "${pids[4]}" "${pids[5]}" 2>/dev/null
	for p in "${PIDS[0]}" "${PIDS[1]}"; do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = collstackd ] ||
			fail "sidecar PID $p died"
	done
}

# `collstack run mixed --trainers 2` on 4 nodes: groups over every rank,
# over one trainer of every node and over one node's trainers, 16 ops of
# random kinds, types and sizes per group, every trainer posting all of
# its ops in an order of its own, every element checked by every
# trainer; 3 seeds clean, then 2 with 1 % of frames dropped by the fault
# shim. The port: $PORT (mixed_4x2) or udp (mixed_4x2_udp).
case_mixed() {
	local s pass out
	for pass in clean loss; do
		if [ $pass = clean ]; then
			up 4
		else
			down
			up 4 --set fault.drop=0.01 --set fault.seed=5
		fi
		for s in $([ $pass = clean ] && echo 1 2 3 || echo 4 5); do
			out=$(timeout 600 "$CLI" run mixed --trainers 2 --groups 4 \
				--ops 16 --seed "$s" --max-bytes 256K \
				--timeout 120000 --cluster "$ENV_FILE" 2>&1)
			echo "$out" | sed "s/^/  $pass seed $s: /"
			echo "$out" | grep -q "^mixed ok trainers_per_node=2 .*wrong=0" ||
				fail "run mixed seed $s ($pass)"
		done
		"$CLI" stats --cluster "$ENV_FILE" 2>&1 | sed "s/^/  $pass: /"
		# groups made by cs_group_split() over some of the 4 nodes
		# ran on their own ring (at least one per seed plan above)
		# (grep on the files: with pipefail, grep -q ending a pipe
		# early fails it on the writer's SIGPIPE)
		grep -h "over [23] of the nodes" "$RUN"/${P}n*.log >"$RUN/over.txt"
		sed -n "1,4s/^/  $pass: /p" "$RUN/over.txt"
		[ -s "$RUN/over.txt" ] ||
			fail "no group over some of the nodes ($pass)"
		sidecars_alive
	done
}

case ${1:-} in
core_4x2) case_core ;;
mixed_4x2) case_mixed ;;
mixed_4x2_udp) PORT=udp; case_mixed ;;
launch_4x2) case_launch ;;
moe_4x2) case_moe --set fault.drop=0.03 --set fault.seed=5 ;;
udp_queues_2x1) case_udp_queues ;;
ar_2x1) case_ar 2 1 ;;
ar_2x2) case_ar 2 2 ;;
ar_4x1) case_ar 4 1 ;;
ar_4x2) case_ar 4 2 ;;
ar_4x2_thread) case_ar 4 2 --set ipc.on_lcore=0 ;;
gather_2x2) case_gather ;;
gather_4x1) case_gather_ring ;;
boot_fault5) case_boot_fault ;;
kill_2x2) case_kill ;;
python_2x1) case_python ;;
peer_lost_4x1) case_peer_lost 4 1 4M ;;
peer_lost_etcd_4x1)	# no coordinator: node 0 is lost like any other
	command -v etcd >/dev/null || skip "no etcd binary (etcd-server)"
	ETCD=1
	case_peer_lost 4 1 4M 0 ;;
peer_lost_4x2) case_peer_lost 4 2 1M ;;
peer_lost_pipe_4x2) PEERLOST_BUCKETS=8 case_peer_lost 4 2 1M ;;
pipe_4x2) case_pipe ;;
trace_4x1) case_trace ;;
early_4x1) case_early ;;
members_size_2x1) case_members_size ;;
pipe_mismatch_2x1)	# node 0 cuts at 1M, node 1 not at all
	case_pipe_mismatch "--set ipc.dev_pipe=1M --set ipc.dev_pipe_any=1" "" ;;
pipe_mismatch_sizes_2x1)	# both cut, at 1M and at 4M
	case_pipe_mismatch "--set ipc.dev_pipe=1M --set ipc.dev_pipe_any=1" \
		"--set ipc.dev_pipe=4M --set ipc.dev_pipe_any=1" ;;
members_rank_2x1) case_members_rank ;;
members_desc_2x2) case_members_desc ;;
layout_2x2) case_layout ;;
groups_2x1) case_groups 1 "${@:2}" ;;	# [--set k=v ...]
groups_2x2) case_groups 2 "${@:2}" ;;
alltoall_2x2) case_a2a 2 2 ;;
alltoall_4x2) case_a2a 4 2 --set fault.drop=0.03 --set fault.seed=13 ;;
alltoall_bad_2x2) case_a2a_bad ;;
alltoall_lost_3x2) case_a2a_lost ;;
alltoallv_4x2) case_a2av 4 2 --set fault.drop=0.03 --set fault.seed=13 ;;
alltoallv_bad_2x2) case_a2av_bad ;;
moe_api_2x2) case_moe_api 2 ;;
moe_node_sum_4x2) case_moe_node_sum 4 ;;
moe_node_rows_4x2) case_moe_node_rows 4 ;;
moe_api_4x2) case_moe_api 4 --set fault.drop=0.03 --set fault.seed=17 ;;
sendrecv_4x2) case_sendrecv 4 2 --set fault.drop=0.03 --set fault.seed=13 ;;
bench)
	shift
	n=${1:?bench N T [args]}; t=${2:?bench N T [args]}; shift 2
	up "$n"
	bench "$t" "$@"
	rc=$?
	# the same sizes through `collstack run allreduce` (no trainers)
	if [ -n "${IPCD_RUN_ARGS:-}" ]; then
		sleep 1
		# shellcheck disable=SC2086
		"$CLI" run allreduce --cluster "$ENV_FILE" $IPCD_RUN_ARGS
	fi
	for ns in "${NODES[@]}"; do
		echo "# $ns ar_stats: $(ctl "$RUN/$ns" ar_stats 2>&1)"
		grep -E " (WARN|ERR) " "$RUN/$ns.log" | tail -n 5 | sed "s/^/# $ns: /"
	done
	exit $rc
	;;
*) echo "usage: $0 mixed_4x2|mixed_4x2_udp|launch_4x2|moe_4x2|moe_api_2x2|moe_api_4x2|moe_node_sum_4x2|moe_node_rows_4x2|ar_2x1|ar_2x2|ar_4x1|ar_4x2|ar_4x2_thread|gather_2x2|gather_4x1|boot_fault5|kill_2x2|python_2x1|peer_lost_4x1|peer_lost_4x2|peer_lost_etcd_4x1|trace_4x1|early_4x1|members_size_2x1|pipe_mismatch_2x1|pipe_mismatch_sizes_2x1|members_rank_2x1|members_desc_2x2|layout_2x2|groups_2x1|groups_2x2|alltoall_2x2|alltoall_4x2|alltoall_bad_2x2|alltoall_lost_3x2|alltoallv_4x2|alltoallv_bad_2x2|sendrecv_4x2|pipe_4x2|peer_lost_pipe_4x2|bench N T [args]" >&2
   exit 2 ;;
esac
echo "PASS: $1"
