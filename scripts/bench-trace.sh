#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The cost of the timeline: a 4-node cluster (scripts/cluster.sh, the
# transport core), 64 MiB f32 allreduces, with recording on
# and off (the control request trace_on on every sidecar), alternating
# the order each round so that drift of a shared machine hits both alike.
# Prints the cost of one event in isolation (tests/observe/trace_bench.c),
# each round's mean time per allreduce and the CPU time the four
# sidecars used per allreduce (utime + stime of their processes, from
# /proc: less sensitive than wall time to what else runs on the machine),
# and the medians; the overhead decides trace.enable's default (on when
# < 2 %; BENCHMARKS.md). The 1-minute load average is noted before the
# cluster starts and after every sample. The load average counts the
# cluster's own polling threads, so whether the machine was quiet is
# decided from the CPU time everything else used during the samples: the
# machine's busy time (/proc/stat) less the sidecars' and this script's
# children's (the collstack runs) CPU time, as a share of all CPUs. The
# last line says quiet (that share < 15 % in every sample: the figure may
# go into BENCHMARKS.md) or not (then it may not: keep the output only).
#
#   scripts/bench-trace.sh [ROUNDS] [ITERS]     (root; defaults 5 and 3)
#   CS_TRACE_BYTES=64M CS_TRACE_PORT=af_packet
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/netns/lib.sh

ROUNDS=${1:-5}
ITERS=${2:-3}
BYTES=${CS_TRACE_BYTES:-64M}
PORT=${CS_TRACE_PORT:-af_packet}
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
export CS_CLUSTER=${CS_CLUSTER:-btrace}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env

# one event in isolation first (tests/observe/trace_bench.c)
[ -x "$BUILD/tests/observe/cs-trace-bench" ] &&
	echo "# $("$BUILD/tests/observe/cs-trace-bench")"
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
scripts/cluster.sh up 4 --port "$PORT" >/dev/null
. "$CS_CLUSTER_ENV"

set_trace() {
	local n r
	for n in $CS_NODES; do
		r=$(cs_ctl "$CS_RUN/$n" "trace_on $1")
		[[ $r == ok* ]] || { echo "trace_on on $n: $r" >&2; exit 1; }
	done
}

cpu_ticks() {	# utime + stime of the sidecars, in clock ticks
	local p s=0 f
	for p in $CS_PIDS; do
		f=($(sed 's/.*) //' "/proc/$p/stat"))
		s=$((s + f[11] + f[12]))
	done
	echo $s
}

busy_ticks() {	# the machine's busy time (all CPUs), in clock ticks
	awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat
}

child_ticks() {	# CPU time of this script's finished children, in ticks
	local f
	f=($(sed 's/.*) //' "/proc/$BASHPID/stat"))
	echo $((f[13] + f[14]))
}

one() {	# mode -> "mean_us cpu_ms_per_allreduce" ("fail -" when it failed)
	local t c0 c1 b0 b1 k0 k1 w0 w1
	set_trace "$1"
	c0=$(cpu_ticks) b0=$(busy_ticks) k0=$(child_ticks) w0=$(date +%s%N)
	t=$("$CLI" run allreduce --bytes "$BYTES" --iters "$ITERS" --warmup 0 \
		--timeout 120000 2>>"$ERRS" |
		awk '/^ +[0-9]+ +[0-9]+ +f32/ {print $5}') || true
	c1=$(cpu_ticks) b1=$(busy_ticks) k1=$(child_ticks) w1=$(date +%s%N)
	echo "$(awk -v b=$((b1 - b0 - (c1 - c0) - (k1 - k0))) \
		-v w=$((w1 - w0)) -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" \
		'BEGIN {o = b / hz / (w / 1e9 * n) * 100; printf "%.1f", o < 0 ? 0 : o}')" >>"$OTHERF"
	if [ -z "$t" ]; then
		echo "fail -"
	else
		awk -v t="$t" -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" \
			-v n="$ITERS" 'BEGIN {printf "%s %.1f\n", t, c / hz * 1000 / n}'
	fi
}
ERRS=$(mktemp)
OTHERF=$(mktemp)
LOADS=()
load1() { cut -d' ' -f1 /proc/loadavg; }
LOADS+=("$(load1)")

echo "# bench-trace: 4 nodes, $PORT, $BYTES f32 allreduce," \
	"$ITERS iterations per sample, $ROUNDS rounds, $(nproc) CPUs, $(date -u +%FT%TZ)"
printf '%-6s %14s %12s %14s %12s\n' round on_us on_cpu_ms off_us off_cpu_ms
on=() off=() onc=() offc=()
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then
		a=($(one 1)); LOADS+=("$(load1)"); b=($(one 0))
	else
		b=($(one 0)); LOADS+=("$(load1)"); a=($(one 1))
	fi
	LOADS+=("$(load1)")
	if [ "${a[0]}" != fail ]; then on+=("${a[0]}"); onc+=("${a[1]}"); fi
	if [ "${b[0]}" != fail ]; then off+=("${b[0]}"); offc+=("${b[1]}"); fi
	printf '%-6s %14s %12s %14s %12s\n' "$r" "${a[0]}" "${a[1]}" "${b[0]}" "${b[1]}"
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
if [ ${#on[@]} -gt 0 ] && [ ${#off[@]} -gt 0 ]; then
	awk -v a="$(med "${on[@]}")" -v b="$(med "${off[@]}")" \
	    -v c="$(med "${onc[@]}")" -v d="$(med "${offc[@]}")" 'BEGIN {
	printf "median time on %.1f us, off %.1f us: %+.2f %%; sidecar CPU per allreduce on %.1f ms, off %.1f ms: %+.2f %%\n",
		a, b, (a / b - 1) * 100, c, d, (c / d - 1) * 100 }'
fi
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# Events one allreduce leaves per node (the rings' counters around one
# sample with recording on), and what they cost at the per-event figures
# of cs-trace-bench: a frame sent is one event, a frame received one event
# and one clock read.
recorded() { "$CLI" trace --out /dev/null | sed -n 's/.*(\([0-9]*\) recorded).*/\1/p' |
	awk '{s += $1; n++} END {printf "%.0f", n ? s / n : 0}'; }
set_trace 1
r0=$(recorded)
x=($(one 1))
r1=$(recorded)
echo "events per allreduce and node: $(( (r1 - r0) / ITERS )) (sample: ${x[0]} us, sidecar CPU ${x[1]} ms per allreduce)"
[ -s "$ERRS" ] && { echo "# failed runs said:"; sed 's/^/#   /' "$ERRS"; }
rm -f "$ERRS"
printf '%s\n' "${LOADS[@]}" | awk '{s = s " " $1}
	END {printf "# 1-minute load before and after each sample:%s\n", s}'
awk '{if ($1 > m) m = $1; s = s " " $1}
	END {printf "# CPU used by other processes per sample, %% of all CPUs:%s\n", s
	     if (m < 15) print "# quiet: other processes used < 15 % of the CPUs in every sample: the figure may go into BENCHMARKS.md"
	     else printf "# NOT quiet: other processes used up to %.1f %% of the CPUs: keep this figure out of BENCHMARKS.md\n", m}' "$OTHERF"
rm -f "$OTHERF"
