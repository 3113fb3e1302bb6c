#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Line-rate references for one port kind, then the allreduce against them:
#
#  (a) dpdk-testpmd txonly -> rxonly, one way, node 0 -> node 1 (af_packet or
#      af_xdp vdevs on the namespace veths; memif: a testpmd pair);
#  (b) `collstack bench raw`: both sidecars blast CS_PKT_RAW frames at each
#      other at once through collstack's own port layer;
#  (c) `collstack run allreduce` at 64 MiB on the same 2 nodes, and the
#      ratio busbw / (b) (the goal is >= 0.9); (b) and (c) alternate for
#      --rounds rounds (3) on the same sidecars and the ratio is the one of
#      their medians (one (b) is --seconds long, one (c) --iters
#      allreduces);
#  (d) optionally (--nodes4) a 4-node allreduce over this port and over the
#      udp port.
#
#   scripts/bench-linerate.sh [--port af_packet|af_xdp|memif|udp] [--mtu M]
#                             [--seconds S] [--rounds R] [--iters I]
#                             [--nodes4] [--no-testpmd]
#   scripts/bench-linerate.sh --all [--seconds S] [--rounds R] [--iters I]
#                             [--nodes4] [--no-testpmd]
#
# --all runs every port kind in turn (af_packet at MTU 1500 and 9000,
# af_xdp at 3500, memif at 1500, udp at 9000; --nodes4 with af_packet 9000)
# and ends with one table of (a), (b), (c) and (c)/(b) per port.
#
# Needs root (namespaces). Prints everything it measures; nothing is
# estimated. Uses scripts/cluster.sh, so no cluster may be up already.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=af_packet MTU=9000 SECS=5 NODES4=0 TESTPMD=1 ALL=0 ROUNDS=3 ITERS=5
while [ $# -gt 0 ]; do
	case $1 in
	--all) ALL=1; shift ;;
	--port) PORT=$2; shift 2 ;;
	--mtu) MTU=$2; shift 2 ;;
	--seconds) SECS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--nodes4) NODES4=1; shift ;;
	--no-testpmd) TESTPMD=0; shift ;;
	*) echo "usage: $0 [--port P] [--mtu M] | --all [--seconds S] [--rounds R] [--iters I] [--nodes4] [--no-testpmd]" >&2
	   exit 2 ;;
	esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench-linerate: needs root" >&2; exit 1; }
for v in "$SECS" "$ROUNDS" "$ITERS"; do
	[[ $v =~ ^[1-9][0-9]*$ ]] ||
		{ echo "bench-linerate: --seconds, --rounds and --iters take a whole number >= 1, not '$v'" >&2; exit 2; }
done

if [ $ALL = 1 ]; then
	# One run of this script per port kind, then their figures side by
	# side (copied from the runs' own lines, nothing recomputed).
	sum=$(mktemp /tmp/cs-linerate-all.XXXXXX)
	trap 'rm -f "$sum"' EXIT
	rc=0
	for pm in af_packet:1500 af_packet:9000 af_xdp:3500 memif:1500 udp:9000; do
		args=(--port "${pm%%:*}" --mtu "${pm##*:}" --seconds "$SECS" --rounds "$ROUNDS" --iters "$ITERS")
		[ $TESTPMD = 0 ] && args+=(--no-testpmd)
		[ $NODES4 = 1 ] && [ "$pm" = af_packet:9000 ] && args+=(--nodes4)
		"$0" "${args[@]}" | tee -a "$sum" || rc=1
		echo
	done
	echo "# summary (Gbit/s per direction; (c) = 2-node 64 MiB allreduce busbw)"
	awk '/^# bench-linerate: port/ { port = $4; sub(",", "", port); mtu = $6 }
	     /^\(a\) testpmd .* one way:/ { a[port mtu] = $(NF - 5) }
	     /^# \(a\) skipped/ { a[port mtu] = "-" }
	     /^\(a\) testpmd: no traffic/ { a[port mtu] = "none" }
	     /^\(b\) raw per direction/ { b[port mtu] = $NF }
	     /^\(c\) busbw/ { c[port mtu] = $3; r[port mtu] = $6 }
	     /^# bench-linerate: port/ { order[++n] = port " " mtu }
	     END { printf "%-10s %5s %10s %10s %10s %8s\n", "port", "MTU", "(a)", "(b)", "(c)", "(c)/(b)"
	           for (i = 1; i <= n; i++) { split(order[i], k, " "); key = k[1] k[2]
	               printf "%-10s %5s %10s %10s %10s %8s\n", k[1], k[2], a[key] ? a[key] : "NA",
	                      b[key] ? b[key] : "NA", c[key] ? c[key] : "NA", r[key] ? r[key] : "NA" } }' "$sum"
	exit $rc
fi
# Our own cluster names (see scripts/cluster.sh, CS_CLUSTER).
P=${CS_CLUSTER:-csb}
export CS_CLUSTER=$P
export CS_CLUSTER_ENV=/run/collstack/cluster-$P.env
[ "$P" = cs ] && CS_CLUSTER_ENV=/run/collstack/cluster.env
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
FRAME=$((MTU + 14))
TP_LOGS=$(mktemp -d /tmp/cs-linerate.XXXXXX)
TP_PIDS=()

cleanup() {
	for p in "${TP_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/cluster.sh down >/dev/null 2>&1 || true
	rm -rf /var/run/dpdk/cstp0 /var/run/dpdk/cstp1 "$TP_LOGS"
}
trap cleanup EXIT

echo "# bench-linerate: port $PORT, MTU $MTU (frames of $FRAME bytes), ${SECS}s, $(date -u +%FT%TZ)"
echo "# machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The testpmd vdev for namespace i (same geometry collstackd uses).
tp_vdev() {
	local i=$1 fsz
	case $PORT in
	af_packet)
		fsz=$(( (FRAME + 80 + 2047) / 2048 * 2048 ))
		local bsz=$fsz
		[ $((fsz % 4096)) -ne 0 ] && bsz=$((2 * fsz))
		echo "net_af_packet_tp$i,iface=${P}d$i,framesz=$fsz,blocksz=$bsz,framecnt=512,qdisc_bypass=1" ;;
	af_xdp) echo "net_af_xdp_tp$i,iface=${P}d$i" ;;
	memif)
		local role=client
		[ "$i" = 1 ] && role=server
		echo "net_memif_tp$i,role=$role,id=0,socket=$TP_LOGS/memif.sock,socket-abstract=no,bsize=$(( FRAME <= 2048 ? 2048 : (FRAME + 1023) / 1024 * 1024 ))" ;;
	esac
}

testpmd_oneway() {
	command -v dpdk-testpmd >/dev/null ||
		{ echo "# (a) skipped: dpdk-testpmd not installed (apt-get install dpdk-dev)"; return 0; }
	[ "$PORT" = udp ] && { echo "# (a) skipped: testpmd needs a DPDK port"; return 0; }
	scripts/cluster.sh up 2 --port "$PORT" --mtu "$MTU" --no-daemons >/dev/null
	# mbuf data room (with the 128-byte headroom): af_packet wants its
	# ring frame minus 32 after the headroom; af_xdp a page per object.
	local msize=$(( FRAME + 128 < 2176 ? 2176 : (FRAME + 128 + 1023) / 1024 * 1024 + 128 ))
	[ "$PORT" = af_packet ] && msize=$(( (FRAME + 80 + 2047) / 2048 * 2048 + 128 ))
	# testpmd's pools pad objects for memory-channel spreading, so an
	# af_xdp umem chunk there is 4032 bytes: 4032 - 320 - 256 (XDP
	# headroom) = 3456-byte frames at most (collstackd builds exact
	# 4096-byte chunks and carries 3520).
	local tpframe=$FRAME
	if [ "$PORT" = af_xdp ]; then
		msize=3840
		[ $tpframe -gt 3456 ] && tpframe=3456
	fi
	local common=(--in-memory --no-pci --no-telemetry)
	# receiver first (memif: it is the server)
	ip netns exec ${P}n1 dpdk-testpmd "${common[@]}" --file-prefix=cstp1 \
		--lcores=0@1,1@0 --vdev="$(tp_vdev 1)" -- --mbuf-size=$msize \
		--forward-mode=rxonly --stats-period=1 --total-num-mbufs=8192 \
		--nb-cores=1 >"$TP_LOGS/rx.log" 2>&1 &
	TP_PIDS+=($!)
	sleep 2
	ip netns exec ${P}n0 dpdk-testpmd "${common[@]}" --file-prefix=cstp0 \
		--lcores=0@0,1@1 --vdev="$(tp_vdev 0)" -- --mbuf-size=$msize \
		--forward-mode=txonly --eth-peer=0,02:77:00:00:00:02 \
		--txpkts=$tpframe --stats-period=1 --total-num-mbufs=8192 \
		--nb-cores=1 >"$TP_LOGS/tx.log" 2>&1 &
	TP_PIDS+=($!)
	sleep $((SECS + 2))
	for p in "${TP_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	TP_PIDS=()
	scripts/cluster.sh down >/dev/null
	rm -rf /var/run/dpdk/cstp0 /var/run/dpdk/cstp1
	# Mean of the receiver's per-second samples after the first second of
	# traffic (Rx-bps counts frame bytes without the CRC, like (b)).
	awk -v secs="$SECS" '/Rx-bps/ && $4 > 0 { n++; if (n > 1 && n <= secs + 1) { s += $4; p += $2; k++ } }
		END { if (k) printf "(a) testpmd %s txonly -> rxonly, one way: %.2f Gbit/s, %.3f Mpps (%d samples)\n", ENVIRON["PORT"], s / k / 1e9, p / k / 1e6, k;
		      else print "(a) testpmd: no traffic received; its logs:" }' \
		"$TP_LOGS/rx.log"
	grep -q "Rx-bps: *[1-9]" "$TP_LOGS/rx.log" ||
		tail -n 5 "$TP_LOGS/rx.log" "$TP_LOGS/tx.log" | sed 's/^/#     /'
	grep -m1 -E "packet len=" "$TP_LOGS/tx.log" | sed 's/^ */#     testpmd txonly: /' || true
}

export PORT
[ $TESTPMD = 1 ] && testpmd_oneway

scripts/cluster.sh up 2 --port "$PORT" --mtu "$MTU" >/dev/null
# (b) and (c) alternate for --rounds rounds on the same sidecars, so a
# slow moment of this shared machine lands on both; the ratio is the one
# of their medians.
RAWS=() BUSBWS=()
for r in $(seq 1 "$ROUNDS"); do
	echo "(b) round $r/$ROUNDS: collstack bench raw, both ways at once:"
	RAW=$("$CLI" bench raw --seconds "$SECS")
	echo "$RAW" | sed 's/^/    /'
	RAWS+=("$(echo "$RAW" | sed -n 's/^# bidirectional: \([0-9.]*\) Gbit.*/\1/p')")
	echo "(c) round $r/$ROUNDS: collstack run allreduce, 2 nodes, 64 MiB:"
	AR=$("$CLI" run allreduce --bytes 64M --iters "$ITERS" --warmup 1)
	echo "$AR" | sed 's/^/    /'
	BUSBWS+=("$(echo "$AR" | awk '$1 == 67108864 { print $7 * 8 }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
RAW_GBPS=$(median "${RAWS[@]}")
BUSBW=$(median "${BUSBWS[@]}")
echo "(b) raw per direction, Gbit/s, round by round: ${RAWS[*]}; median $RAW_GBPS"
echo "(c) busbw, Gbit/s, round by round: ${BUSBWS[*]}; median $BUSBW"
awk -v b="$BUSBW" -v r="$RAW_GBPS" -v n="$ROUNDS" 'BEGIN {
	if (r > 0) printf "(c) busbw %.2f Gbit/s = %.2f x the raw rate per direction (%.2f Gbit/s), medians of %d rounds; goal >= 0.90\n", b, b / r, r, n }'
scripts/cluster.sh down >/dev/null

if [ $NODES4 = 1 ]; then
	for p in "$PORT" udp; do
		m=$MTU
		[ "$p" = udp ] && m=$MTU
		scripts/cluster.sh up 4 --port "$p" --mtu "$m" >/dev/null
		echo "(d) 4 nodes, port $p, MTU $m:"
		"$CLI" run allreduce -b 1M -e 64M --iters 3 --warmup 1 | sed 's/^/    /'
		scripts/cluster.sh down >/dev/null
	done
fi
