#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The cost of the timeline: a 4-node cluster (scripts/cluster.sh, the
# transport core: svc.core=1), 64 MiB f32 allreduces, with recording on
# and off (the control request trace_on on every sidecar), alternating
# the order each round so that drift of a shared machine hits both alike.
# Prints each round's mean time per allreduce and the medians; the
# overhead decides trace.enable's default (on when < 2 %; BENCHMARKS.md).
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
scripts/cluster.sh up 4 --port "$PORT" --set svc.core=1 >/dev/null
. "$CS_CLUSTER_ENV"

set_trace() {
	local n r
	for n in $CS_NODES; do
		r=$(cs_ctl "$CS_RUN/$n" "trace_on $1")
		[[ $r == ok* ]] || { echo "trace_on on $n: $r" >&2; exit 1; }
	done
}

one() {	# mode -> mean us per allreduce ("fail" when the run failed)
	local t
	set_trace "$1"
	t=$("$CLI" run allreduce --bytes "$BYTES" --iters "$ITERS" --warmup 1 \
		--timeout 120000 2>>"$ERRS" |
		awk '/^ +[0-9]+ +[0-9]+ +f32/ {print $5}') || true
	echo "${t:-fail}"
}
ERRS=$(mktemp)

echo "# bench-trace: 4 nodes, $PORT, svc.core=1, $BYTES f32 allreduce," \
	"$ITERS iterations per sample, $ROUNDS rounds, $(nproc) CPUs, $(date -u +%FT%TZ)"
printf '%-6s %14s %14s\n' round on_us off_us
on=() off=()
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then
		a=$(one 1); b=$(one 0)
	else
		b=$(one 0); a=$(one 1)
	fi
	[ "$a" = fail ] || on+=("$a")
	[ "$b" = fail ] || off+=("$b")
	printf '%-6s %14s %14s\n' "$r" "$a" "$b"
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
mon=$(med "${on[@]}"); moff=$(med "${off[@]}")
awk -v a="$mon" -v b="$moff" 'BEGIN {
	printf "median on %.1f us, off %.1f us: tracing costs %+.2f %%\n", a, b, (a / b - 1) * 100 }'
[ -s "$ERRS" ] && { echo "# failed runs said:"; sed 's/^/#   /' "$ERRS"; }
rm -f "$ERRS"
