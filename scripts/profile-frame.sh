#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Where a frame's CPU time goes in the sidecars: a cluster of N nodes on
# one port, one size of one operation (allreduce unless --op names another
# that `collstack bench -o` runs) back to back by `collstack bench`, the
# sidecars sampled by `perf record -e cpu-clock` (a software clock: this VM
# has no cycle counter), each sample put in a stage by its symbol, and the
# sidecars' CPU time (schedstat) spread over the stages by their shares.
# Divided by the frames the sidecars moved (tx + rx, `collstack stats`)
# and by the KiB of payload they received, that gives ns per frame and ns
# per KiB for each stage.
#
#   scripts/profile-frame.sh [--port memif|af_packet|udp] [--nodes N]
#                            [--bytes 64M] [--iters I] [--out DIR]
#                            [--mtu M] [--op OP] [--set KEY=VALUE]...
#
# Stages (by symbol, and by DSO for DPDK's libraries, whose symbols may
# not resolve): port (PMD, io_uring, the port layer, the driver's
# classify), kernel (every kernel sample: system calls, the packet path,
# scheduling; in this VM samples taken while interrupts were off land on
# pvm_irq_enable), wire (the codec), core (reliability, pacing, congestion
# control, the transport core), service (daemon_ar.c / svc_core.c: the
# per-frame glue), engine (the ring collective), reduce (reduction
# kernels), copy (memcpy/memmove), ipc (the trainer server), auth (the
# frame tags: libcrypto, libsodium and their glue),
# clock (the vDSO's clock_gettime: the lcore's time per loop), idle (the lcore's wait and yield), other. The trainers' own CPU is in
# collstack bench's cpu(s/GB) column, printed too.
# Needs root (namespaces) and perf. CS_CLUSTER (default prof) names the
# cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
PORT=memif N=2 BYTES=64M ITERS=5 OUT=bench-out/profile SETS=() MTU=() OP=allreduce

die() { echo "profile-frame: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--port) PORT=$2; shift 2 ;;
	--nodes) N=$2; shift 2 ;;
	--bytes) BYTES=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--mtu) MTU=(--mtu "$2"); shift 2 ;;
	--op) OP=$2; shift 2 ;;
	--set) SETS+=(--set "$2"); shift 2 ;;
	-h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown option $1" ;;
	esac
done
command -v perf >/dev/null || die "perf missing (apt-get install linux-perf)"
[ "$(id -u)" = 0 ] || die "needs root"
export CS_CLUSTER=${CS_CLUSTER:-prof}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PERF_PID=""
cleanup() {
	[ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null || true
	scripts/cluster.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT

scripts/cluster.sh up "$N" --port "$PORT" "${MTU[@]}" "${SETS[@]}" >&2
# shellcheck disable=SC1090
. "$CS_CLUSTER_ENV"
pids=${CS_PIDS// /,}
pids=${pids%,}

cpu_ns() {	# schedstat run time of every thread of the sidecars, ns
	local p t s=0 v
	for p in $CS_PIDS; do
		for t in /proc/"$p"/task/*/schedstat; do
			read -r v _ <"$t" && s=$((s + v))
		done
	done
	echo $s
}
stat_sum() {	# KEY: summed over the sidecars (collstack stats --raw)
	"$CLI" stats --raw 2>/dev/null | tr ' ' '\n' |
		awk -F= -v k="$1" '$1 == k { s += $2 } END { printf "%.0f\n", s }'
}

# Warm-up outside the profile: the sessions, the buffers, the RTT.
"$CLI" bench -o "$OP" -b "$BYTES" -e "$BYTES" -n 1 -w 1 >/dev/null
c0=$(cpu_ns) tx0=$(stat_sum tx_pkts) rx0=$(stat_sum rx_pkts) rb0=$(stat_sum rx_bytes)
perf record -q -e cpu-clock -F 1999 -p "$pids" -o "$OUT/perf-$PORT.data" \
	2>"$OUT/perf-$PORT.log" &
PERF_PID=$!
sleep 0.5
"$CLI" bench -o "$OP" -b "$BYTES" -e "$BYTES" -n "$ITERS" -w 0 \
	>"$OUT/bench-$PORT.txt" 2>&1 || die "bench failed: $(tail -2 "$OUT/bench-$PORT.txt")"
kill -INT "$PERF_PID"
wait "$PERF_PID" 2>/dev/null || true
PERF_PID=""
c1=$(cpu_ns) tx1=$(stat_sum tx_pkts) rx1=$(stat_sum rx_pkts) rb1=$(stat_sum rx_bytes)
"$CLI" stats >"$OUT/stats-$PORT.txt" 2>&1 || true

perf report -i "$OUT/perf-$PORT.data" --no-children --sort dso,sym --stdio \
	2>/dev/null | awk '$1 ~ /%$/ { sub(/%/, "", $1); print $1, $2, $3, $4 }' \
	>"$OUT/symbols-$PORT.txt"
frames=$(((tx1 - tx0) + (rx1 - rx0)))
kib=$(((rb1 - rb0) / 1024))
cpu=$((c1 - c0))
TXT=$OUT/profile-$PORT.txt
{
	echo "# profile-frame: $(date -u '+%Y-%m-%d %H:%M UTC'), port $PORT, $N nodes, $OP $BYTES x $ITERS back to back, load $(cut -d' ' -f1-3 /proc/loadavg)"
	grep -E '^ +[0-9]+ ' "$OUT/bench-$PORT.txt" | awk '$12 == "out" { printf "# out of place: %s us per op, busbw %s GB/s, trainers+sidecars %s CPU s/GB\n", $6, $8, $13 }'
	echo "# sidecars: $((cpu / 1000000)) ms CPU, $frames frames (tx+rx), $kib KiB received"
	printf '%-9s %7s %12s %11s\n' stage "% cpu" "ns/frame" "ns/KiB"
	awk -v cpu="$cpu" -v fr="$frames" -v kib="$kib" '
	function stage(s, k, dso) {
		if (k || dso ~ /kernel/) return "kernel"
		if (dso ~ /librte_(net|bus|mempool|eal|ethdev|mbuf)/) return "port"
		if (dso ~ /vdso/ || s ~ /clock_gettime/) return "clock"
		if (s ~ /memcpy|memmove|memset/) return "copy"
		if (s ~ /reduce|avx|sse|_f16|_bf16|_sum$|_prod$|_min$|_max$/) return "reduce"
		if (dso ~ /libcrypto|libsodium/ || s ~ /sodium|siphash|auth|gmac|^hdr_bytes$/) return "auth"
		if (s ~ /^cs_wire|^hdr_|^put(16|32|64)/) return "wire"
		if (s ~ /^(cs_rel|cs_pacer|cs_cc|cs_path|process_(ack|data)|detect_lost|mark_|acked_one|fill_ack|arm_|rtt_sample|probe_tail|window_open|rcv_bit|meta_of|rto_|beyond_reach|build_ext|cs_tp|tp_)/) return "core"
		if (s ~ /^(cs_coll|fill_tx|chunk_ready|chan_next|decode_cookie|rx_locate|direct_finish|send_from_src|send_overwritten|recv_|seg_|slot|test_bit|set_bit|pkt_geom|sub_part)/) return "engine"
		if (s ~ /^(cs_ipc|ipc_|serve_round|backend_poll|launch|pop|finish_and_next|check_done|be_|reg_|cs_spsc|cs_shm|verdict_done)/) return "ipc"
		if (s ~ /^(lcore_main|cs_lcore|sched_yield|nanosleep|clock_nanosleep|__poll|poll|ppoll|epoll|usleep|dpdk_wait|udp_wait|cs_port_wait)/) return "idle"
		if (s ~ /^(ar_|find_sess|earlier|implied_ack|ack_implied|hold|replay|ack_prev|flush|frame_buf|frame_send|pure_ack|resend|may_resend|service|acks_owed|remember_rtt|settle|prev_service|op_|core_|svc_)/) return "service"
		if (s ~ /^(dpdk_|eth_|rte_|memif|af_packet|udp_|io_uring|__io_uring|cs_port|cs_fault|cs_drv|classify|raw_|ms_|refill|post_recv|gso_)/) return "port"
		return "other"
	}
	{
		pct = $1; dso = $2; k = ($3 == "[k]"); sym = $4
		st = stage(sym, k, dso); p[st] += pct; tot += pct
	}
	END {
		n = split("port kernel wire core service engine reduce copy ipc auth clock idle other", order, " ")
		for (i = 1; i <= n; i++) {
			s = order[i]; if (!(s in p)) continue
			share = p[s] / (tot ? tot : 1)
			printf "%-9s %7.1f %12.0f %11.0f\n", s, 100 * share,
				fr ? share * cpu / fr : 0, kib ? share * cpu / kib : 0
		}
		printf "%-9s %7.1f %12.0f %11.0f\n", "total", 100, fr ? cpu / fr : 0, kib ? cpu / kib : 0
	}' "$OUT/symbols-$PORT.txt"
	echo "# top symbols (% of sidecar samples):"
	head -15 "$OUT/symbols-$PORT.txt" | sed 's/^/#   /'
} >"$TXT"
cat "$TXT"
