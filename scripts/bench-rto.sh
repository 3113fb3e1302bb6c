#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Retransmission timeouts in clean runs (issue 22's goal: none in a clean
# 4-node run at either MTU). For each port and MTU, and each setting
# (--cfg, one cluster each, settings alternated so that they share the
# machine's load), a fresh 4-node netns cluster runs
# `collstack run allreduce -b 64K -e 16M --iters 5` (54 operations);
# `collstack stats` is summed over the nodes. One line per run:
#
#   rto port=udp mtu=1500 loss=0 cfg="..." rep=1 time_16M_us=.. drop=..
#       retx=.. tlp=.. rto=.. spurious=.. stall_max_ms=.. load=..
#
# (drop: `collstack stats`' drop column, on the udp port mostly
# rx_nombuf: multishot receives re-armed, nothing lost; tlp: tail loss
# probes, one packet each; stall_max_ms: the longest any sidecar's lcore
# was away from its port, `collstack stats`' stall column; load: the
# 1-minute load average when the run started.) --old adds a first
# setting, tp.away_floor=0: no RTO floor from the sidecar's own stalls.
# --loss PCT drops PCT % of the frames on the bridge (not a clean run: to
# see what the floor costs where losses are real).
#
# Root; uses scripts/cluster.sh (CS_CLUSTER, default rt).
#
#   scripts/bench-rto.sh [--ports "udp af_packet"] [--mtus "1500 9000"]
#       [--reps N] [--old] [--loss PCT] [--cfg "KEY=V KEY=V"]...
set -euo pipefail
cd "$(dirname "$0")/.."
PORTS="udp af_packet" MTUS="1500 9000" REPS=1 CFGS=() OLD=0 LOSS=()
while [ $# -gt 0 ]; do
	case $1 in
	--ports) PORTS=$2; shift 2 ;;
	--mtus) MTUS=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--cfg) CFGS+=("$2"); shift 2 ;;
	--old) OLD=1; shift ;;
	--loss) LOSS=(--bridge-loss "$2"); shift 2 ;;
	*) echo "bench-rto: unknown option $1" >&2; exit 2 ;;
	esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "bench-rto: --reps N (N >= 1)" >&2; exit 2; }
[ ${#CFGS[@]} -gt 0 ] || CFGS=("")
[ "$OLD" = 0 ] || CFGS=("tp.away_floor=0" "${CFGS[@]}")
export CS_CLUSTER=${CS_CLUSTER:-rt}
B=${CS_BUILD_DIR:-build}
ENV=/run/collstack/cluster-$CS_CLUSTER.env
LOG=$(mktemp)
trap 'scripts/cluster.sh down >/dev/null 2>&1 || true; rm -f "$LOG"' EXIT

one() { # PORT MTU CFG REP
	local sets=() kv load t
	for kv in $3; do sets+=(--set "$kv"); done
	load=$(cut -d' ' -f1 /proc/loadavg)
	if ! scripts/cluster.sh up 4 --port "$1" --mtu "$2" "${LOSS[@]}" \
		"${sets[@]}" >"$LOG" 2>&1; then
		echo "bench-rto: cluster up failed (port $1 mtu $2):" >&2
		tail -5 "$LOG" >&2
		scripts/cluster.sh down >/dev/null 2>&1 || true
		return 1
	fi
	t=$("$B/tools/collstack" run allreduce -b 64K -e 16M --iters 5 \
		--cluster "$ENV" 2>&1 | awk '$1 == 16777216 { print $5 }')
	"$B/tools/collstack" stats --cluster "$ENV" 2>&1 | awk -v p="$1" \
		-v m="$2" -v x="${LOSS[1]:-0}" -v c="$3" -v r="$4" \
		-v t="${t:-?}" -v l="$load" '
		$1 !~ /^#/ && $2 ~ /^[0-9]+$/ && NF >= 11 {
			split($9, a, /[(,)]/); split($10, b, /[()]/)
			drop += $4; retx += a[1]; tlp += a[3]
			rto += b[1]; spur += b[2]; n++
			if (NF >= 13 && $13 + 0 > stall) stall = $13 + 0
		}
		END {
			if (n != 4) { print "bench-rto: stats of " n \
				" nodes" > "/dev/stderr"; exit 1 }
			printf "rto port=%s mtu=%s loss=%s cfg=\"%s\" rep=%s " \
				"time_16M_us=%s drop=%d retx=%d tlp=%d rto=%d " \
				"spurious=%d stall_max_ms=%.1f load=%s\n", p,
				m, x, c, r, t, drop, retx, tlp, rto, spur,
				stall, l
		}'
	scripts/cluster.sh down >/dev/null 2>&1
}

for rep in $(seq "$REPS"); do
	for port in $PORTS; do
		for mtu in $MTUS; do
			for cfg in "${CFGS[@]}"; do
				one "$port" "$mtu" "$cfg" "$rep"
			done
		done
	done
done
