#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Incast through the sidecars: 4 netns nodes, node 0's bridge port
# rate-limited with tc TBF (--rate, default 1gbit), and an allreduce run as
# a direct exchange (coll.direct_max raised), so nodes 1-3 each send their
# whole input to node 0 at once. Prints, per setting (--set lists, one run
# each, in one cluster run), the queue's drops and the share of the limited
# rate node 0 received:
#
#   incast cfg="..." bytes=.. time_ms=.. rx_gbps=.. util=.. tbf_sent=..
#          tbf_dropped=.. drop_pct=.. backlog_max=..B retx=.. timeouts=..
#          spurious=.. load=..
#
# (load: the 1-minute load average when the setting's run ended.) --old
# adds a first setting that restores the defaults from before receiver
# credit and the timer fixes (rel.credit=0 tp.rx_budget=0 tp.rx_stall=0
# rel.rto_ceil=10ms), so that old and new defaults run in one go.
#
# Root; uses scripts/cluster.sh.
#
#   scripts/bench-incast.sh [--port af_packet|udp] [--rate R] [--bytes B]
#       [--iters I] [--limit BYTES] [--old] [--cfg "KEY=V KEY=V"]...
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=af_packet RATE=1gbit BYTES=4M ITERS=3 LIMIT=256k CFGS=() OLD=0
while [ $# -gt 0 ]; do
	case $1 in
	--port) PORT=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--bytes) BYTES=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--limit) LIMIT=$2; shift 2 ;;
	--cfg) CFGS+=("$2"); shift 2 ;;
	--old) OLD=1; shift ;;
	*) echo "bench-incast: unknown option $1" >&2; exit 2 ;;
	esac
done
[ ${#CFGS[@]} -gt 0 ] || CFGS=("")
[ "$OLD" = 0 ] ||
	CFGS=("rel.credit=0 tp.rx_budget=0 tp.rx_stall=0 rel.rto_ceil=10ms" "${CFGS[@]}")
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
export CS_CLUSTER=${CS_CLUSTER:-inc}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
P=$CS_CLUSTER SW=${CS_CLUSTER}sw DEV=${CS_CLUSTER}v0
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
rate_gbps=$(awk -v r="$RATE" 'BEGIN {
	v = r + 0; u = tolower(substr(r, length(v "") + 1))
	if (u ~ /^g/) v *= 1; else if (u ~ /^m/) v /= 1e3; else if (u ~ /^k/) v /= 1e6
	else v /= 1e9; print v }')
for cfg in "${CFGS[@]}"; do
	sets=(--set coll.direct_max=1G)
	for kv in $cfg; do sets+=(--set "$kv"); done
	CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 --port "$PORT" \
		"${sets[@]}" >/dev/null
	ip netns exec "$SW" tc qdisc replace dev "$DEV" root tbf rate "$RATE" \
		burst 32k limit "$LIMIT"
	# the queue's backlog, sampled while the runs go
	( mx=0; while :; do
		b=$(ip netns exec "$SW" tc -s qdisc show dev "$DEV" |
		    sed -n 's/.*backlog \([0-9]*\)b.*/\1/p' | head -1)
		[ -n "$b" ] && [ "$b" -gt "$mx" ] && mx=$b && echo "$mx" >"/tmp/$P.backlog"
		sleep 0.005
	  done ) &
	sampler=$!
	echo 0 >"/tmp/$P.backlog"
	s0=$(ip netns exec "$SW" tc -s qdisc show dev "$DEV")
	t0=$(date +%s%N)
	out=$("$CLI" run allreduce --bytes "$BYTES" --iters "$ITERS" \
		--warmup 0 --timeout 300000)
	t1=$(date +%s%N)
	s1=$(ip netns exec "$SW" tc -s qdisc show dev "$DEV")
	kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
	st=$("$CLI" stats --raw 2>/dev/null | grep "ar_stats" || true)
	echo "$out" | grep -E '^ +[0-9]' || true
	awk -v cfg="$cfg" -v bytes="$BYTES" -v iters="$ITERS" \
	    -v t0="$t0" -v t1="$t1" -v g="$rate_gbps" \
	    -v bl="$(cat "/tmp/$P.backlog")" \
	    -v s0="$(sed -n 's/.*Sent \([0-9]*\) bytes \([0-9]*\) pkt (dropped \([0-9]*\).*/\1 \2 \3/p' <<<"$s0" | head -1)" \
	    -v s1="$(sed -n 's/.*Sent \([0-9]*\) bytes \([0-9]*\) pkt (dropped \([0-9]*\).*/\1 \2 \3/p' <<<"$s1" | head -1)" \
	    -v tus="$(awk '/^ +[0-9]/ { s += $5; n++ } END { print (n ? s / n : 0) }' <<<"$out")" \
	    -v retx="$(sed -n 's/.* retx=\([0-9]*\).*/\1/p' <<<"$st" | awk "{ s += \$1 } END { print s + 0 }")" \
	    -v to="$(sed -n 's/.* timeouts=\([0-9]*\).*/\1/p' <<<"$st" | awk "{ s += \$1 } END { print s + 0 }")" \
	    -v sp="$(sed -n 's/.* spurious=\([0-9]*\).*/\1/p' <<<"$st" | awk "{ s += \$1 } END { print s + 0 }")" \
	    -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
		split(s0, a, " "); split(s1, b, " ")
		by = b[1] - a[1]; pk = b[2] - a[2]; dr = b[3] - a[3]
		secs = tus * iters / 1e6
		gb = secs > 0 ? by * 8 / secs / 1e9 : 0
		printf "incast cfg=\"%s\" bytes=%s time_ms=%.1f rx_gbps=%.3f util=%.2f tbf_sent=%d tbf_dropped=%d drop_pct=%.3f backlog_max=%dB retx=%s timeouts=%s spurious=%s load=%s\n",
		       cfg, bytes, tus / 1e3, gb, gb / g, pk, dr,
		       pk + dr ? 100 * dr / (pk + dr) : 0, bl, retx, to, sp, load
	}'
	scripts/cluster.sh down >/dev/null 2>&1
done
rm -f "/tmp/$P.backlog"
