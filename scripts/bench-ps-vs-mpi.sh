#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Parameter server, collstack vs Open MPI, on the same 4-node netns
# cluster in one run: `collstack bench -o ps` (push / pull / push+pull of
# sparse rows through the sidecars, sidecar/svc_ps.c) and
# `cs-mpi-bench -o ps` (the same keys, shard map, gradients and checks,
# point to point to the owning rank over Open MPI's TCP BTL on the same
# bridge), case by case, then the dense push+pull. Prints both stacks'
# lines, the ratio collstack / MPI (rows/s; dense: busbw) and the load
# average before each case. Open MPI's ranks run one per namespace
# (scripts/netns-rsh.sh, as scripts/bench-vs-mpi.sh does); the sidecars
# are stopped (SIGSTOP) while MPI runs, so that their polling does not
# take MPI's CPU, and continued after.
#
#   scripts/bench-ps-vs-mpi.sh [--iters N] [--warmup W] [--kpp P]
#                              [--rows R] [--skew Z] [--mode M]
#                              [--sizes 64,1024] [--patterns push,pull,pushpull]
#                              [--dense BYTES|0] [--mtu M] [--msg-max B]
#                              [--port udp|af_packet]
#
# --port: the sidecars' port (scripts/cluster.sh; default udp: on veths
# with their default offloads its GSO sends and GRO receives cross the
# kernel once per run of frames, af_packet once per frame; BENCHMARKS.md,
# "Which port on veths").
#
# --msg-max B: collstack's PS messages up to B bytes (default: the
# sidecar's, 1 MiB; a message longer than a frame goes as several).
#
# --warmup W (default 1000) steps before the N (default 200) timed ones,
# so that both stacks are timed with their tables in the same state:
# Open MPI's ranks fill their whole shard before the first step, the
# sidecars create a row when a key first comes (4 workers x 256 keys a
# step leave e^-10 of 100,000 rows untouched after 1000 steps). With 3
# warm-up steps collstack's timed steps created most of its rows
# (docs/ps.md, "What a step waits for").
#
# CS_CLUSTER (default pq) names the cluster (scripts/cluster.sh); it is
# brought up here and taken down at exit. Needs root, Open MPI (mpirun)
# and a build with cs-mpi-bench (build/, or CS_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${CS_BUILD_DIR:-build}
CLI=$ROOT/$BUILD/tools/collstack
MPI_BENCH=$ROOT/$BUILD/tools/cs-mpi-bench
ITERS=200 WARM=1000 KPP=256 ROWS=100000 SKEW=0 MODE=sync SIZES=64,1024
PATTERNS=push,pull,pushpull DENSE=1M MTU=1500 MSG= PORT=udp
while [ $# -gt 0 ]; do
	case $1 in
	--iters) ITERS=$2 ;;
	--warmup) WARM=$2 ;;
	--kpp) KPP=$2 ;;
	--rows) ROWS=$2 ;;
	--skew) SKEW=$2 ;;
	--mode) MODE=$2 ;;
	--sizes) SIZES=$2 ;;
	--patterns) PATTERNS=$2 ;;
	--dense) DENSE=$2 ;;
	--mtu) MTU=$2 ;;
	--msg-max) MSG=$2 ;;
	--port) PORT=$2 ;;
	-h | --help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-ps-vs-mpi: unknown option $1" >&2; exit 2 ;;
	esac
	shift 2
done
[ "$(id -u)" -eq 0 ] || { echo "bench-ps-vs-mpi: needs root" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench-ps-vs-mpi: no mpirun" >&2; exit 1; }
[ -x "$CLI" ] && [ -x "$MPI_BENCH" ] ||
	{ echo "bench-ps-vs-mpi: build $CLI and $MPI_BENCH first" >&2; exit 1; }
export CS_CLUSTER=${CS_CLUSTER:-pq}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cs-ps-mpi.XXXXXX")
cleanup() {
	for p in ${CS_PIDS:-}; do kill -CONT "$p" 2>/dev/null || true; done
	scripts/cluster.sh down >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 --port "$PORT" --mtu "$MTU" >&2
# shellcheck disable=SC1090
. "$CS_CLUSTER_ENV"
NODES=($CS_NODES)
: >"$TMP/hostfile"
: >"$TMP/hosts.map"
for ns in "${NODES[@]}"; do
	a=$(ip -n "$ns" -o -4 addr show scope global | awk '{ split($4, p, "/"); print p[1]; exit }')
	echo "$a slots=1" >>"$TMP/hostfile"
	echo "$a $ns" >>"$TMP/hosts.map"
done
NET=${a%.*}.0/24

sidecars() {	# STOP|CONT the collstackd PIDs cluster.sh started
	for p in ${CS_PIDS:-}; do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = collstackd ] &&
			kill -"$1" "$p" 2>/dev/null || true
	done
}

mpi_said() {	# the first two lines of mpirun's own words (no rules)
	grep -v -e '^ps-bench' -e '^-*$' "$TMP/mpi.out" | head -2 | tr '\n' ' '
}

mpi() {	# cs-mpi-bench -o ps arguments
	local rc
	sidecars STOP
	timeout 600 ip netns exec "${NODES[0]}" env CS_RSH_MAP="$TMP/hosts.map" \
		unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "${NODES[0]}" \
		mpirun --allow-run-as-root -np "${#NODES[@]}" \
		--hostfile "$TMP/hostfile" --map-by node --bind-to none \
		--mca plm_rsh_agent "$ROOT/scripts/netns-rsh.sh" \
		--mca plm_rsh_no_tree_spawn 1 \
		--mca btl tcp,self --mca btl_tcp_if_include "$NET" \
		--mca oob_tcp_if_include "$NET" --mca mpi_yield_when_idle 1 \
		"$MPI_BENCH" -o ps "$@" >"$TMP/mpi.out" 2>&1 && rc=0 || rc=$?
	sidecars CONT
	# a result line stands even when mpirun exits non-zero after it
	# (said below it); none: FAILED, with mpirun's last words
	if grep '^ps-bench' "$TMP/mpi.out"; then
		[ "$rc" = 0 ] || echo "# mpirun exited $rc after its result: $(mpi_said)"
	else
		echo "ps-bench stack=mpi FAILED (mpirun exit $rc: $(mpi_said))"
	fi
}

kv() { grep -o " $1=[^ ]*" <<<"$2" | head -1 | cut -d= -f2; }
ratio() {
	awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "NA"; else printf "%.2f\n", a / b }'
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo ?) cpus: $(nproc)" \
	"nodes: ${NODES[*]} port $PORT MTU $MTU, $(mpirun --version 2>/dev/null | head -1)"
echo "# $0 --iters $ITERS --warmup $WARM --kpp $KPP --rows $ROWS --skew $SKEW --mode $MODE --sizes $SIZES --patterns $PATTERNS --dense $DENSE --mtu $MTU${MSG:+ --msg-max $MSG}"
common=(-n "$ITERS" -w "$WARM" --mode "$MODE")
csopt=()
[ -z "$MSG" ] || csopt=(--msg-max "$MSG")
for rb in ${SIZES//,/ }; do
	for pat in ${PATTERNS//,/ }; do
		echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
		cs=$("$CLI" bench -o ps --pattern "$pat" --row-bytes "$rb" \
			--keys-per-push "$KPP" --rows "$ROWS" --skew "$SKEW" \
			--dense 0 "${common[@]}" "${csopt[@]}" 2>&1 |
			grep '^ps' || true)
		echo "${cs:-ps-bench stack=collstack FAILED}"
		m=$(mpi --pattern "$pat" --row-bytes "$rb" --keys-per-push "$KPP" \
			--rows "$ROWS" --skew "$SKEW" "${common[@]}")
		echo "$m"
		echo "ratio pattern=$pat row_bytes=$rb rows_per_s collstack/mpi=$(ratio "$(kv rows_per_s "$cs")" "$(kv rows_per_s "$m")")"
	done
done
if [ "$DENSE" != 0 ]; then
	bytes=$(numfmt --from=iec "$DENSE")
	echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
	cs=$("$CLI" bench -o ps --pattern none --dense "$DENSE" \
		"${common[@]}" "${csopt[@]}" 2>&1 | grep '^ps' || true)
	echo "${cs:-ps-bench stack=collstack FAILED}"
	m=$(mpi --dense 1 --rows $((bytes / 1024)) --row-bytes 1024 "${common[@]}")
	echo "$m"
	echo "ratio pattern=dense bytes=$bytes busbw collstack/mpi=$(ratio "$(kv busbw_GBps "$cs")" "$(kv busbw_GBps "$m")")"
fi
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
