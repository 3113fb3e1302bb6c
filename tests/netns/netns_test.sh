#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Multi-process cluster tests: real sidecars exchanging real frames.
#
#   netns_test.sh CASE     (run from meson: suite netns; CS_BUILD_DIR set)
#
# Namespace cases need root, ip and nft, and skip (exit 77) otherwise;
# DPDK cases also skip when collstackd was built without DPDK. udp_local
# needs neither root nor namespaces: four sidecars on 127.0.0.1. Every case
# tears down what it made (trap), whatever happens.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/netns/lib.sh

CASE=${1:?usage: netns_test.sh CASE}
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
DAEMON=$BUILD/sidecar/collstackd
SIZES=(${CS_NETNS_SIZES:--b 1K -e 64M})

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ -x "$CLI" ] && [ -x "$DAEMON" ] || fail "not built: $CLI, $DAEMON"
has_dpdk() { "$DAEMON" --help-config | grep 'port types:.* dpdk' >/dev/null; }
has_udp() { "$DAEMON" --help-config | grep 'port types:.* udp' >/dev/null; }

need_netns() {
	[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
	for t in ip nft python3; do
		command -v $t >/dev/null || skip "missing tool: $t"
	done
}

# A cluster of our own names, so test runs of several checkouts (or a
# cluster someone left up) never meet: CS_CLUSTER=t<2 digits><case number>.
export CS_CLUSTER=t$(printf '%02d' $(($$ % 100)))$(printf '%s' "$CASE" | cksum | cut -c1-2)
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
N0=/run/collstack/${CS_CLUSTER}n0
NS1=${CS_CLUSTER}n1

cluster_up() {	# args of cluster.sh up
	trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
	CS_BUILD_DIR=$BUILD scripts/cluster.sh up "$@" ||
		fail "cluster.sh up $*"
}

run_ar() {	# extra args of collstack run allreduce
	"$CLI" run allreduce "${SIZES[@]}" --iters 1 --warmup 0 \
		--timeout 300000 "$@" ||
		fail "allreduce reported wrong elements or failed"
}

ctl() { cs_ctl "$1" "$2"; }	# node request -> reply line

run_mixed() {	# collstack run mixed: 4 groups x 32 ops, two seeds
	local out s
	for s in 1 2; do
		out=$("$CLI" run mixed --groups 4 --ops 32 --seed $s) ||
			fail "run mixed (seed $s): $out"
		grep -q '^mixed ok .* wrong=0 ' <<<"$out" ||
			fail "run mixed (seed $s): $out"
		echo "$out" | tail -1
	done
}

# --per-op: one account per sidecar and operation, each with its result
# no later than its last acknowledgement (ready_ns is 0, not a wrapped
# negative, when every peer's data came in before the sidecar's own start:
# frequent at 4 KiB, a direct exchange). The elements are checked after
# the wait ("ar_check"); a wrong one fails the command.
check_per_op() {
	local out n
	out=$("$CLI" run allreduce --bytes 4K --iters 20 --warmup 0 \
		--timeout 300000 --per-op) ||
		fail "collstack run --per-op failed: $out"
	n=$(awk -v nodes="$1" '/ iter [0-9]+: ok / {
		for (i = 1; i <= NF; i++) {
			split($i, kv, "=")
			v[kv[1]] = kv[2]
		}
		if (v["ready_ns"] + 0 > v["ns"] + 0) {
			print "bad: " $0 > "/dev/stderr"
			bad = 1
		}
		lines++
	} END { print (bad ? -1 : lines) }' <<<"$out")
	[ "$n" = $((20 * $1)) ] ||
		fail "collstack run --per-op: $n good accounts, not $((20 * $1))"
}


# Frames that are not ours, sent from node 1's kernel to node 0's port: a UDP
# datagram that is not collstack, one to another UDP port, and a
# well-formed collstack DATA frame of an operation nobody posted.
inject_foreign() {
	# what node 0 counted before: a frame that reached an af_packet ring
	# between the socket's creation and its filter is counted too
	FOREIGN0=$(kv "$(ctl "$N0" stats)" rx_foreign)
	ip netns exec "$NS1" python3 - <<'PY'
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# SO_NO_CHECK: UDP checksum 0. With it on, veth leaves the checksum to
# "offload", and af_packet would see (and the codec reject) a partial one.
s.setsockopt(socket.SOL_SOCKET, 11, 1)
s.bind(("10.77.0.2", 7799))
for _ in range(3):
    s.sendto(b"\x42not a collstack header" * 4, ("10.77.0.1", 7700))
    s.sendto(b"\x01\x01" + bytes(100), ("10.77.0.1", 7755))
# version 1, DATA, no flags, src 1, channel 0, group 0, epoch 0,
# op 0xdeadbeef, step 0, seq 0, ack 0, sack 0, offset 0, len 8, credit 0,
# ts 0, ts_echo 0, reserved 0; then 8 bytes of payload
hdr = struct.pack("!BBHHHIIIIIIQQIIQQI", 1, 1, 0, 1, 0, 0, 0, 0xdeadbeef,
                  0, 0, 0, 0, 0, 8, 0, 0, 0, 0)
assert len(hdr) == 76
for _ in range(3):
    s.sendto(hdr + b"\xff" * 8, ("10.77.0.1", 7700))
PY
	sleep 0.5
}

# Foreign frames: the malformed ones counted by the port; the well-formed
# DATA frame of an operation nobody posted
# lies outside its session's window (dropped there) or is held, never
# handed to an engine; nothing reaches an operation or fails one.
check_foreign_counted() {
	local st ar
	st=$(ctl "$N0" stats)
	ar=$(ctl "$N0" ar_stats)
	echo "node 0: $ar"
	[ "$(kv "$st" rx_malformed)" -ge 3 ] ||
		fail "malformed frames were not counted"
	[ $(($(kv "$ar" rel_stale_rcvd) + $(kv "$ar" rx_held) + \
	     $(kv "$ar" rel_dup_rcvd))) -ge 3 ] ||
		fail "the frames of an unknown operation were not counted"
	[ "$(kv "$ar" rx_proto)" = 0 ] || fail "an engine saw a foreign frame"
	[ "$(kv "$ar" ops_failed)" = 0 ] || fail "an operation failed"
}

# The 3 datagrams to another UDP port: with the af_packet socket filter
# (port.rx_filter, the default) the kernel keeps them from the port, so
# the lcore never sees a foreign frame; without it the lcore drops and
# counts them.
check_foreign_filtered() {	# want: "none" | "counted"
	local st f
	st=$(ctl "$N0" stats)
	f=$(($(kv "$st" rx_foreign) - FOREIGN0))	# since inject_foreign
	case $1 in
	none) [ "$f" -eq 0 ] ||
		fail "the socket filter let $f foreign frames through"
		# ... and they are counted as filtered
		[ "$(kv "$st" rx_filtered)" -ge 3 ] ||
			fail "rx_filtered $(kv "$st" rx_filtered): the 3 datagrams to another port not counted" ;;
	counted) [ "$f" -ge 3 ] ||
		fail "without the filter, only $f foreign frames counted" ;;
	esac
}

# The udp port's 64 KiB..64 MiB operations sent runs of frames as UDP GSO
# sends (port.udp_gso).
check_gso() {
	local st
	st=$(ctl "$N0" stats)
	echo "node 0: tx_gso=$(kv "$st" tx_gso) of tx_pkts=$(kv "$st" tx_pkts)"
	[ "$(kv "$st" tx_gso)" -gt 0 ] || fail "no frame left in a GSO send"
}

# Did node 0's udp port receive with UDP GRO (its start-up line)?
check_gro() {	# want: on | off
	local log=/run/collstack/${CS_CLUSTER}n0.log
	grep -q "udp port on .*GRO $1\b" "$log" ||
		fail "node 0's udp port did not start with GRO $1: $(grep 'udp port on' "$log")"
}

# Bad allreduce requests on the control socket get an error line, and
# the sidecar goes on answering.
check_ctl_errors() {
	local r
	r=$(ctl "$N0" "ar_check 12345")
	[[ $r == "err no finished operation 12345" ]] || fail "ar_check of no op: '$r'"
	r=$(ctl "$N0" "ar_check")
	[[ $r == "err usage: ar_check OP" ]] || fail "ar_check without OP: '$r'"
	r=$(ctl "$N0" "ar_wait 1 10 sometimes")
	[[ $r == "err usage: ar_wait OP MS [nocheck]" ]] || fail "ar_wait flag: '$r'"
	r=$(ctl "$N0" ping)
	[[ $r == ok* ]] || fail "no answer after bad requests: '$r'"
}

# The 1 MiB..64 MiB operations of run_ar went out by reference: the
# buffers are registered with the port and frames point into them.
check_zero_copy() {
	local st
	st=$(ctl "$N0" stats)
	echo "node 0: $st"
	[ "$(kv "$st" tx_zero_copy)" -gt 0 ] ||
		fail "no frame went out zero-copy (port.zero_copy is on)"
}

# Frames the kernel dropped for a full ring count as rx_dropped (read
# from PACKET_STATISTICS: DPDK 22.11's af_packet PMD does not report
# them), not as rx_filtered. A 1 s raw blast both ways overflows the
# rings on this kind of machine; whatever it dropped must show up there.
check_ring_drops() {
	local st0 st1 f0 f1 d0 d1 raw
	st0=$(ctl "$N0" stats)
	raw=$("$CLI" bench raw --seconds 1) || fail "bench raw failed: $raw"
	echo "$raw" | tail -3
	st1=$(ctl "$N0" stats)
	f0=$(kv "$st0" rx_filtered) f1=$(kv "$st1" rx_filtered)
	d0=$(kv "$st0" rx_dropped) d1=$(kv "$st1" rx_dropped)
	echo "node 0 during the blast: rx_filtered +$((f1 - f0)), rx_dropped +$((d1 - d0))"
	[ $((f1 - f0)) -lt 20 ] ||
		fail "rx_filtered grew by $((f1 - f0)) during a raw blast (ring drops counted as filtered?)"
}

# Every frame a 1 s raw blast sent is received or counted as dropped at
# the other end: af_packet's full rings (PACKET_STATISTICS), af_xdp's
# (the interface's rx_dropped; the PMD's imissed misses them), the udp
# port's full receive buffer (SO_MEMINFO).
check_drops_accounted() {
	local a0 a1 b0 b1 sent got lost raw
	a0=$(ctl "$N0" stats) b0=$(ctl "/run/collstack/$NS1" stats)
	raw=$("$CLI" bench raw --seconds 1) || fail "bench raw failed: $raw"
	echo "$raw" | tail -3
	a1=$(ctl "$N0" stats) b1=$(ctl "/run/collstack/$NS1" stats)
	sent=$(($(kv "$a1" tx_pkts) - $(kv "$a0" tx_pkts)))
	got=$(($(kv "$b1" rx_pkts) - $(kv "$b0" rx_pkts)))
	lost=$(($(kv "$b1" rx_dropped) - $(kv "$b0" rx_dropped)))
	echo "node 0 -> 1: sent $sent, received $got, dropped $lost"
	# (the lcores drain their rings within microseconds of the blast's
	# end, long before these requests; a few frames of slack)
	[ $((sent - got - lost)) -le 64 ] && [ $((sent - got - lost)) -ge 0 ] ||
		fail "$((sent - got - lost)) frames neither received nor counted as dropped"
}

# The transport's totals over the finished operations (ar_stats) and the
# lcores' counters (stats): with frames dropped by the fault shim, node 0
# must have resent some.
check_transport_totals() {
	local st ar
	st=$(ctl "$N0" stats)
	ar=$(ctl "$N0" ar_stats)
	echo "node 0: f_dropped=$(kv "$st" f_dropped) lcore_loops=$(kv "$st" lcore_loops) ops_freed=$(kv "$ar" ops_freed) data_sent=$(kv "$ar" data_sent) retx=$(kv "$ar" retx) timeouts=$(kv "$ar" timeouts)"
	[ "$(kv "$st" lcore_loops)" -gt 0 ] || fail "stats: lcore_loops is 0"
	[ "$(kv "$ar" ops_freed)" -gt 0 ] || fail "ar_stats: no op counted"
	[ "$(kv "$ar" data_sent)" -gt 0 ] || fail "ar_stats: no data frame counted"
	[ "$(kv "$st" f_dropped)" -gt 0 ] || fail "the fault shim dropped nothing"
	[ "$(kv "$ar" retx)" -gt 0 ] || fail "ar_stats: frames were dropped, none resent"
	# collstack stats: one row per node, node 0's as its sidecar says
	# The shim goes on dropping heartbeats, so the column must lie
	# between node 0's own counts read just before and just after.
	local out r0 f0 f1 col
	local s0 s1 st_ms
	f0=$(kv "$(ctl "$N0" stats)" f_dropped)
	s0=$(kv "$(ctl "$N0" ar_stats)" away_max)
	out=$("$CLI" stats) || fail "collstack stats failed: $out"
	f1=$(kv "$(ctl "$N0" stats)" f_dropped)
	s1=$(kv "$(ctl "$N0" ar_stats)" away_max)
	echo "$out"
	[ "$(grep -c "^${CS_CLUSTER}n[0-9] " <<<"$out")" = 4 ] ||
		fail "collstack stats: not one row per node"
	r0=$(grep "^${CS_CLUSTER}n0 " <<<"$out")
	col=$(awk '{ print $6 }' <<<"$r0")
	[ "$col" -ge "$f0" ] && [ "$col" -le "$f1" ] ||
		fail "collstack stats: node 0's fault column $col is not its f_dropped ($f0..$f1)"
	[ "$(awk '{ print $9 }' <<<"$r0")" = "$(kv "$ar" retx)($(kv "$ar" fast_retx),$(kv "$ar" tlp))" ] ||
		fail "collstack stats: node 0's retx column is not its ar_stats"
	# the stall column: ms, the lcore's longest time away (away_max),
	# which only grows, so it lies between the two ar_stats around it
	st_ms=$(awk '{ print $13 }' <<<"$r0")
	[[ $st_ms =~ ^[0-9]+\.[0-9]$ ]] &&
		awk -v m="$st_ms" -v a="$s0" -v b="$s1" \
			'BEGIN { exit !(m * 1e6 >= a - 5e4 && m * 1e6 <= b + 5e4) }' ||
		fail "collstack stats: node 0's stall column '$st_ms' is not its away_max ($s0..$s1 ns)"
	# a sidecar that is gone: its row says so, and the exit status
	kill "$(cat "/run/collstack/${CS_CLUSTER}n3/pid")"
	for _ in $(seq 50); do [ -S "/run/collstack/${CS_CLUSTER}n3/ctl.sock" ] || break; sleep 0.1; done
	out=$("$CLI" stats) && fail "collstack stats: exit 0 with a sidecar gone"
	grep -q "^${CS_CLUSTER}n3 *unreachable" <<<"$out" ||
		fail "collstack stats: no 'unreachable' row for the stopped sidecar: $out"
}

udp_local() {
	local dir pids=() n=4 extra=("$@")
	has_udp || skip "collstackd built without io_uring (no udp port)"
	dir=$(mktemp -d /tmp/cs-udp-local.XXXXXX)
	# shellcheck disable=SC2064
	trap "kill -TERM \${pids[*]} 2>/dev/null; wait; rm -rf $dir" EXIT
	local base=$((20000 + RANDOM % 20000)) names=""
	for ((i = 0; i < n; i++)); do
		# 16 ports apart: queue q of a node listens on its port + q
		echo "$i 127.0.0.1 02:00:00:00:00:0$i $((base + 16 * i)) l$i" >>"$dir/peers"
		names+="l$i "
	done
	printf 'CS_NODES="%s"\nCS_RUN=%s\n' "${names% }" "$dir" >"$dir/cluster.env"
	for ((i = 0; i < n; i++)); do
		"$DAEMON" --set name=l$i --set run_dir=$dir/l$i \
			--set node.rank=$i --set node.peers=$dir/peers \
			--set port.type=udp --set port.ip=127.0.0.1 \
			--set port.udp_port=$((base + 16 * i)) "${extra[@]}" \
			</dev/null >"$dir/l$i.log" 2>&1 &
		pids+=($!)
	done
	for ((i = 0; i < n; i++)); do
		for _ in $(seq 300); do
			[ -f "$dir/l$i/ready" ] && break
			kill -0 "${pids[$i]}" 2>/dev/null ||
				{ cat "$dir/l$i.log"; fail "sidecar l$i died"; }
			sleep 0.1
		done
		[ -f "$dir/l$i/ready" ] || fail "sidecar l$i not ready"
	done
	"$CLI" run allreduce "${SIZES[@]}" --iters 1 --warmup 0 --timeout 300000 \
		--cluster "$dir/cluster.env" || fail "allreduce over udp"
	[ -z "${LOCAL_CHECK:-}" ] || $LOCAL_CHECK "$dir"
	kill -TERM "${pids[@]}"
	wait
	for ((i = 0; i < n; i++)); do
		[ -e "$dir/l$i" ] && fail "l$i left its run folder behind"
	done
	return 0
}

# port.queues=2: two lanes of the transport core per sidecar, each on its
# own lcore and queue (lane q listens on port.udp_port + q); an op runs on
# the lane of its (group, id), the same on every node: allreduces and many
# groups in flight, and both lanes carried operations.
check_lanes() {
	local dir=$1 out ar i
	out=$(CS_CLUSTER_ENV="$dir/cluster.env" "$CLI" run mixed --groups 3 \
		--ops 8 --max-bytes 256K) || fail "run mixed on 2 lanes: $out"
	echo "$out" | tail -1
	grep -q "mixed ok .* wrong=0" <<<"$out" || fail "run mixed: $out"
	for ((i = 0; i < 4; i++)); do
		ar=$(cs_ctl "$dir/l$i" ar_stats)
		[ "$(kv "$ar" lanes)" = 2 ] || fail "l$i: not 2 lanes: $ar"
		echo "l$i lane_ops=$(kv "$ar" lane_ops)"
		grep -Eq ' lane_ops=[1-9][0-9]*,[1-9]' <<<"$ar" ||
			fail "l$i: a lane carried no operation: $ar"
	done
}

case $CASE in
udp_local) udp_local ;;
udp_local_q2) LOCAL_CHECK=check_lanes udp_local --set port.queues=2 ;;
udp_local_fault5) udp_local --set fault.drop=0.05 ;;
af_packet_4|af_packet_4_fault5|af_packet_4_bridge1|af_packet_foreign|\
af_packet_nofilter|memif_2|af_xdp_2|\
af_packet_4_mixed|af_packet_4_mixed_bridge1)
	need_netns
	has_dpdk || skip "collstackd built without DPDK"
	case $CASE in
	af_packet_4) cluster_up 4 --port af_packet; run_ar; check_zero_copy
		check_per_op 4 ;;
	af_packet_4_fault5)
		cluster_up 4 --port af_packet --set fault.drop=0.05; run_ar
		check_transport_totals ;;
	af_packet_4_bridge1)
		cluster_up 4 --port af_packet --bridge-loss 1; run_ar
		grep -q 'packets [1-9]' < <(ip netns exec "${CS_CLUSTER}sw" \
			nft list table bridge "${CS_CLUSTER}loss") ||
			fail "the bridge dropped nothing" ;;
	af_packet_foreign)
		cluster_up 2 --port af_packet
		inject_foreign
		check_foreign_counted
		check_foreign_filtered none
		SIZES=(-b 1K -e 1M); run_ar
		check_foreign_counted
		check_ctl_errors
		check_ring_drops
		check_drops_accounted ;;
	af_packet_nofilter)
		cluster_up 2 --port af_packet --set port.rx_filter=0
		inject_foreign
		check_foreign_counted
		check_foreign_filtered counted
		SIZES=(-b 1K -e 64K); run_ar ;;
	memif_2) cluster_up 2 --port memif; run_ar ;;
	af_packet_4_mixed|af_packet_4_mixed_bridge1)
		# many groups over subsets, posted in other orders on every
		# node, all in flight on the transport core
		if [ "$CASE" = af_packet_4_mixed ]; then
			cluster_up 4 --port af_packet
		else
			cluster_up 4 --port af_packet \
				--bridge-loss 1
		fi
		run_mixed ;;
	af_xdp_2)
		cluster_up 2 --port af_xdp --mtu 3500; run_ar
		check_drops_accounted ;;
	esac ;;
udp_4|udp_4_gro|udp_4_nogro|udp_4_fault5|udp_foreign|udp_4_mixed|udp_4_mixed_bridge1)
	need_netns
	has_udp || skip "collstackd built without io_uring (no udp port)"
	case $CASE in
	udp_4) cluster_up 4 --port udp; run_ar; check_gso ;;
	# port.udp_gro forced on and off, whatever the default; the 1 MiB..
	# 64 MiB runs go out in GSO runs and come in whole with GRO on
	udp_4_gro)
		cluster_up 4 --port udp --set port.udp_gro=1; run_ar; check_gso
		check_gro on ;;
	udp_4_nogro)
		cluster_up 4 --port udp --set port.udp_gro=0; run_ar; check_gso
		check_gro off ;;
	udp_4_fault5) cluster_up 4 --port udp --set fault.drop=0.05; run_ar ;;
	udp_4_mixed) cluster_up 4 --port udp; run_mixed ;;
	udp_4_mixed_bridge1)
		cluster_up 4 --port udp --bridge-loss 1
		run_mixed ;;
	udp_foreign)
		cluster_up 2 --port udp
		inject_foreign
		check_foreign_counted
		SIZES=(-b 1K -e 1M); run_ar
		check_drops_accounted ;;
	esac ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: $CASE"
