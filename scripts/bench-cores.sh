#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# collstack vs Open MPI on one many-core machine, with no network
# namespaces and no iproute2: N collstackd on loopback (udp port, one UDP
# port range per node), one trainer per node (`collstack bench
# --no-netns`), against Open MPI's TCP BTL over loopback and its shared
# memory (vader), all timed back to back (-m b2b, nccl-tests style) in
# one run. Prints one table.
#
#   scripts/bench-cores.sh [--nodes N] [--queues Q] [--sizes 4K:64M]
#                          [--iters N] [--iters-large N] [--reps R]
#                          [--poll auto|busy|adaptive] [--no-mpi]
#                          [--out DIR] [--set KEY=VALUE]...
#
# CPUs: with at least 2 x N CPUs (this shell's affinity), node i's sidecar
# gets CPU i and its trainer CPU N + i (each on its own core; lcores busy
# polling with --poll auto); with fewer, all float and lcores poll
# adaptively (a busy poller on a shared core starves its neighbours).
# Open MPI ranks are bound the same way as the trainers where CPUs allow.
# Sizes go up by 4; sizes up to 1 MiB run --iters (20) timed iterations,
# larger ones --iters-large (5), after 2 and 1 warm-up iterations.
# Bounded: every benchmark call has a timeout (CS_RUN_TIMEOUT, 120 s).
# Output: DIR/bench-cores.txt (the table), DIR/logs/. Defaults finish in
# about 3 minutes on 16 cores; here (2 cores) use --sizes 4K:4M.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${CS_BUILD_DIR:-build}
DAEMON=$ROOT/$BUILD/sidecar/collstackd
CLI=$ROOT/$BUILD/tools/collstack
MPI_BENCH=$ROOT/$BUILD/tools/cs-mpi-bench
RUN_TIMEOUT=${CS_RUN_TIMEOUT:-120}

N=4 Q=1 SIZES=4K:64M ITERS=20 ITERS_LARGE=5 REPS=1 POLL=auto DO_MPI=1
OUT=bench-out/cores SETS=()

die() { echo "bench-cores: $*" >&2; exit 1; }
log() { echo "bench-cores: $*" >&2; }
usage() { sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
	case $1 in
	--nodes) N=$2; shift 2 ;;
	--queues) Q=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--iters-large) ITERS_LARGE=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--poll) POLL=$2; shift 2 ;;
	--no-mpi) DO_MPI=0; shift ;;
	--out) OUT=$2; shift 2 ;;
	--set) SETS+=(--set "$2"); shift 2 ;;
	-h|--help) usage; exit 0 ;;
	*) die "unknown option $1 (--help)" ;;
	esac
done
whole() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
whole "$N" 2 32 || die "--nodes 2..32"
whole "$Q" 1 8 || die "--queues 1..8"
whole "$ITERS" 1 100000 || die "--iters wants a count"
whole "$ITERS_LARGE" 1 100000 || die "--iters-large wants a count"
whole "$REPS" 1 100 || die "--reps wants a count"
case $POLL in auto|busy|adaptive) ;; *) die "--poll auto|busy|adaptive" ;; esac
[ -x "$DAEMON" ] && [ -x "$CLI" ] || die "build first ($BUILD/)"
. scripts/lib/switch.sh	# cs_cpu_list

to_bytes() {
	local s=$1 m=1
	case $s in
	*[kK]) m=1024; s=${s%?} ;;
	*[mM]) m=$((1 << 20)); s=${s%?} ;;
	*[gG]) m=$((1 << 30)); s=${s%?} ;;
	esac
	[[ "$s" =~ ^[0-9]+$ ]] || die "bad size $1"
	echo $((s * m))
}
MINB=$(to_bytes "${SIZES%%:*}") MAXB=$(to_bytes "${SIZES##*:}")
[ "$MAXB" -ge "$MINB" ] || die "--sizes MIN:MAX"
SPLIT=$((1 << 20))

read -r -a CPUS <<<"$(cs_cpu_list "$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)")"
PIN=0
[ ${#CPUS[@]} -ge $((2 * N)) ] && PIN=1
MODE=$POLL
if [ "$MODE" = auto ]; then
	MODE=adaptive
	[ $PIN = 1 ] && MODE=busy
fi

mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
RUN=$(mktemp -d "${TMPDIR:-/tmp}/collstack-cores.XXXXXX")
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free range of 8 x N UDP ports on 127.0.0.1 (node i: base + 8i, its
# queue q on + q): the first port the kernel's choice, the rest checked.
free_base() {
	python3 - "$N" <<'PY'
import socket, sys
n = int(sys.argv[1]) * 8
for _ in range(100):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    base = s.getsockname()[1]
    s.close()
    if base + n > 65535:
        continue
    held, ok = [], True
    for p in range(base, base + n):
        t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            t.bind(("127.0.0.1", p))
            held.append(t)
        except OSError:
            ok = False
            break
    for t in held:
        t.close()
    if ok:
        print(base)
        sys.exit(0)
sys.exit(1)
PY
}

sidecars_up() {
	local i base nodes="" pin
	base=$(free_base) || die "no free UDP port range on 127.0.0.1"
	: >"$RUN/peers"
	for ((i = 0; i < N; i++)); do
		printf '%d 127.0.0.1 02:77:00:00:02:%02x %d cc%d\n' $i $((i + 1)) \
			$((base + 8 * i)) $i >>"$RUN/peers"
		nodes+="cc$i "
	done
	for ((i = 0; i < N; i++)); do
		pin=()
		[ $PIN = 1 ] && pin=(taskset -c "${CPUS[i]}")
		"${pin[@]}" "$DAEMON" --set name=cc$i --set run_dir="$RUN/cc$i" \
			--set node.rank=$i --set node.peers="$RUN/peers" \
			--set port.type=udp --set port.ip=127.0.0.1 \
			--set port.udp_port=$((base + 8 * i)) \
			--set port.queues="$Q" --set lcore.poll="$MODE" \
			"${SETS[@]}" </dev/null >"$OUT/logs/cc$i.log" 2>&1 &
		PIDS+=($!)
	done
	printf 'CS_NODES="%s"\nCS_RUN=%s\n' "${nodes% }" "$RUN" >"$RUN/cluster.env"
	for ((i = 0; i < N; i++)); do
		for _ in $(seq 600); do
			[ -f "$RUN/cc$i/ready" ] && break
			kill -0 "${PIDS[$i]}" 2>/dev/null ||
				die "collstackd cc$i exited: $(tail -3 "$OUT/logs/cc$i.log")"
			sleep 0.1
		done
		[ -f "$RUN/cc$i/ready" ] || die "cc$i not ready"
	done
}

# Rows "size time busbw p50 p99 cpu" of one stack, out-of-place.
rows() { awk '$1 ~ /^[0-9]+$/ && $12 == "out" { print $1, $6, $8, $10, $11, $13 }' "$1"; }

# One stack over the two size ranges; rows appended to $1.
run_stack() {	# out-file command...
	local f=$1 b e n w lf part
	shift
	for part in small large; do
		if [ $part = small ]; then
			[ "$MINB" -le $SPLIT ] || continue
			b=$MINB e=$MINB
			while [ $((e * 4)) -le "$MAXB" ] && [ $((e * 4)) -le $SPLIT ]; do
				e=$((e * 4))
			done
			n=$ITERS w=2
		else
			b=$MINB
			while [ "$b" -le $SPLIT ]; do b=$((b * 4)); done
			[ "$b" -le "$MAXB" ] || continue
			e=$MAXB n=$ITERS_LARGE w=1
		fi
		lf=$OUT/logs/$(basename "$f" .rows)-$part.log
		timeout "$RUN_TIMEOUT" "$@" -o allreduce -b "$b" -e "$e" -f 4 \
			-n "$n" -w "$w" -m b2b >"$lf" 2>&1 ||
			log "$(basename "$f" .rows) $part failed: $(tail -1 "$lf")"
		rows "$lf" >>"$f"
	done
}

mpi_cmd() {	# btl -> MPI_CMD, the mpirun command line (no bench args)
	local bind=(--bind-to none) list="" i
	if [ $PIN = 1 ]; then
		for ((i = 0; i < N; i++)); do list+="${CPUS[N + i]},"; done
		bind=(--cpu-set "${list%,}" --bind-to core)
	fi
	MPI_CMD=(mpirun --allow-run-as-root -np "$N" --host "localhost:$N"
		"${bind[@]}" --mca btl "$1" --mca btl_tcp_if_include lo
		--mca oob_tcp_if_include lo --mca mpi_yield_when_idle
		"$([ $PIN = 1 ] && echo 0 || echo 1)" "$MPI_BENCH")
}

start=$SECONDS
log "$N nodes, port.queues $Q, lcores $MODE, $([ $PIN = 1 ] && echo "pinned: sidecars on CPUs ${CPUS[*]:0:N}, trainers on ${CPUS[*]:N:N}" || echo "unpinned (${#CPUS[@]} CPUs < 2 x $N)")"
rm -f "$OUT"/*.rows
for ((rep = 1; rep <= REPS; rep++)); do
	sidecars_up
	# collstack bench pins each trainer to its sidecar's CPUs; with our
	# own layout, trainer i goes to CPU N + i instead (taskset on the
	# whole command, then --no-pin keeps it).
	if [ $PIN = 1 ]; then
		tl=""
		for ((i = 0; i < N; i++)); do tl+="${CPUS[N + i]},"; done
		run_stack "$OUT/collstack-r$rep.rows" taskset -c "${tl%,}" "$CLI" bench \
			--cluster "$RUN/cluster.env" --no-netns --no-pin \
			--timeout "$RUN_TIMEOUT"
	else
		run_stack "$OUT/collstack-r$rep.rows" "$CLI" bench \
			--cluster "$RUN/cluster.env" --no-netns \
			--timeout "$RUN_TIMEOUT"
	fi
	"$CLI" stats --cluster "$RUN/cluster.env" >"$OUT/logs/stats-r$rep.txt" 2>&1 || true
	cleanup
	PIDS=()
	RUN=$(mktemp -d "${TMPDIR:-/tmp}/collstack-cores.XXXXXX")
	if [ $DO_MPI = 1 ] && [ -x "$MPI_BENCH" ] && command -v mpirun >/dev/null; then
		mpi_cmd tcp,self
		run_stack "$OUT/mpitcp-r$rep.rows" "${MPI_CMD[@]}"
		mpi_cmd vader,self
		run_stack "$OUT/mpishm-r$rep.rows" "${MPI_CMD[@]}"
	fi
done

# Medians over reps, one table.
TXT=$OUT/bench-cores.txt
{
	echo "# bench-cores: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(lscpu 2>/dev/null | awk -F: '/^Model name/ { gsub(/^ +/, "", $2); print $2; exit }')), load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# $N nodes on loopback, udp port, port.queues $Q, lcores $MODE, $([ $PIN = 1 ] && echo 'one CPU per sidecar and per trainer' || echo unpinned), ${SETS[*]:-default settings}; allreduce float sum, out of place, b2b timing, medians of $REPS rep(s)"
	echo "# Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{ print $NF }'): tcp = btl tcp,self over lo; shm = btl vader,self"
	echo "# busbw GB/s; time = mean us per op; x = collstack/MPI-tcp busbw; cpu = CPU s per GB moved"
	printf '%6s %9s %9s %9s %9s %9s %9s %6s %7s %7s %8s %8s\n' size "cs bw" "tcp bw" "shm bw" \
		"cs time" "tcp time" "shm time" "bw x" "cs cpu" "tcp cpu" "cs p99" "tcp p99"
	for z in $(cat "$OUT"/*.rows 2>/dev/null | awk '{ print $1 }' | sort -n -u); do
		med() {	# stack column
			{ cat "$OUT"/"$1"-r*.rows 2>/dev/null || true; } |
				awk -v z="$z" -v k="$2" '$1 == z { print $k }' |
				sort -g | awk '{ v[n++] = $1 } END { if (!n) print "NA"; else print v[int((n - 1) / 2)] }'
		}
		cb=$(med collstack 3) tb=$(med mpitcp 3) sb=$(med mpishm 3)
		awk -v z="$z" -v cb="$cb" -v tb="$tb" -v sb="$sb" \
			-v ct="$(med collstack 2)" -v tt="$(med mpitcp 2)" -v st="$(med mpishm 2)" \
			-v cc="$(med collstack 6)" -v tc="$(med mpitcp 6)" \
			-v c9="$(med collstack 5)" -v t9="$(med mpitcp 5)" 'BEGIN {
			h = z >= 1048576 ? sprintf("%dM", z / 1048576) : sprintf("%dK", z / 1024)
			x = (cb != "NA" && tb != "NA" && tb > 0) ? sprintf("%.2f", cb / tb) : "NA"
			printf "%6s %9s %9s %9s %9s %9s %9s %6s %7s %7s %8s %8s\n", h, cb, tb, sb, ct, tt, st, x, cc, tc, c9, t9
		}'
	done
	echo "# done in $((SECONDS - start)) s"
} >"$TXT"
cat "$TXT"
