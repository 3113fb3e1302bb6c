#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# collstack vs Open MPI (TCP BTL) on the same network namespaces, the same
# operations and sizes, in the same run: the stacks alternate per repetition
# and the table, CSV and plots show medians over the repetitions. Adverse
# conditions (loss on the bridge, a rate-limited link) apply to both stacks.
#
# Both stacks are timed the same way, the way nccl-tests and OSU do
# (--timing b2b, the default): the warm-up iterations checked, then a
# barrier and the timed iterations back to back; time = the slowest
# rank's total / iterations, p50/p99 beside it (per-iteration gaps).
# --timing iter keeps the older way: every iteration refilled, fenced by a
# barrier and timed alone (the harness then weighs on both sides).
# MTU 1500 by default (--mtu 9000 for jumbo frames). --offload on|off|both
# (default both): the veths' segmentation offloads as they come (on: TCP's
# 64 KiB segments cross veth and bridge whole, as through a NIC with
# TSO/GRO) or off (ethtool -K tso gso gro off on both ends of every veth:
# every frame a packet of its own, as on a wire); both runs each
# condition twice, rows "COND/on" and "COND/off". Each row also gives the
# CPU seconds each stack used per GB moved (b2b: trainers + sidecars, or
# the MPI ranks, over the timed iterations; bytes = all ranks' sends), and
# the table ends with the machine's load average and steal per stack.
# CS_CLUSTER=P (1-6 letters/digits) names the namespaces (scripts/cluster.sh
# P*, scripts/lib/netns.sh Pb*), the state files and the nft table.
#
#   scripts/bench-vs-mpi.sh [--quick] [--reps R] [--nodes N]
#                           [--ops all|allreduce,reduce_scatter,...]
#                           [--conds clean,loss,rate] [--adverse-ops LIST]
#                           [--sizes 4K:64M] [--loss PCT] [--rate 1gbit]
#                           [--cluster auto|own|cluster] [--port P] [--mtu M]
#                           [--offload on|off|both] [--timing b2b|iter]
#                           [--iters-large N] [--pause-sidecars] [--place out|in]
#                           [--set KEY=VALUE]...   (collstackd settings,
#                                                   cluster.sh clusters)
#                           [--out DIR] [--no-plots] [--no-mpi]
#                           [--no-collstack] [--report-only]
#                           [--iters-small N] [--cpus auto|none|LIST]
#                           [--pin-mpi] [--a2av-skew S] [--a2av-seed N]
#                           [--variant NAME=PORT[:KEY=VALUE,...]]...
#
# Open MPI ranks: one per namespace, launched by mpirun in the first
# namespace through scripts/netns-rsh.sh (an rsh agent that runs the orted
# line with `ip netns exec`), TCP BTL on the bridge subnet only,
# --mca mpi_yield_when_idle 1 (ranks share the cores), --bind-to none.
# --cpus (default auto): one CPU per node, node i on the (i mod k)-th CPU
# this script may use (scripts/lib/switch.sh cs_node_cpus): node i's
# sidecar and its trainers run there; none: unpinned. Open MPI's ranks
# float (--bind-to none) unless --pin-mpi puts rank i on node i's CPU too
# (its orted starts under taskset): pinned beside the idle pinned
# sidecars, Open MPI 4.1's TCP BTL often failed to connect ("connect()
# ... Operation now in progress (115)"; docs/bench-vs-mpi.md).
# The collstack side is `build/tools/collstack bench -o OP ...` against the
# sidecars of scripts/cluster.sh; where that command or the cluster is
# missing its cells are NA. See docs/bench-vs-mpi.md.
# --ops alltoall (not in all/auto): MPI_Alltoall against `collstack bench
# -o alltoall` (cs_alltoall through the trainers); size = each rank's send
# buffer, busbw = size / time x (n-1)/n (nccl-tests), out-of-place rows
# only, every warm-up iteration's blocks checked on both sides. Adverse
# conditions run --adverse-ops (default allreduce): pass --adverse-ops
# alltoall for alltoall under loss. The goals lines give issue 23's
# alltoall 1 MiB ratios (>= 1.5x clean, >= 3x under loss) where the run
# has them. --ops alltoallv (not in all/auto): MPI_Alltoallv against
# `collstack bench -o alltoallv` (cs_alltoallv), both with the count
# matrix of tools/zipf_split.h for --a2av-skew S (default 1.1) and
# --a2av-seed N (default 1): every rank sends size bytes in all, split by
# Zipf weights 1/(k+1)^S over one seeded permutation of the ranks (one
# rank everybody's hottest); busbw = algbw x (n-1)/n as alltoall; both
# print each size's matrix ("# counts" in the logs) and the goals lines
# say whether the two sides' matrices were the same; issue 23's goals as
# for alltoall (1 MiB, >= 1.5x clean, >= 3x under loss: --adverse-ops
# alltoallv).
# --ops sendrecv (not in all/auto): point to point, OSU style (osu_bibw,
# MPI_Sendrecv): ranks paired, rank i with rank i + n/2 (one per node:
# every pair crosses nodes); per iteration each rank posts its receive
# from its partner and its send of size bytes to it and waits for both
# (`collstack bench -o sendrecv`: cs_recv + cs_send; cs-mpi-bench -o
# sendrecv: MPI_Irecv + MPI_Isend + MPI_Waitall); every warm-up
# iteration's data checked on both sides; busbw = algbw = size / time,
# the bytes each rank sends per iteration (it receives as many); CPU per
# GB over n x size. Needs an even --nodes; no goals lines (no issue goal).
#
# Output (in --out, default bench-out/): bench-vs-mpi.csv (medians and
# ratios), bench-vs-mpi-raw.csv (every row of every run),
# bench-vs-mpi-steal.csv (the host's steal time during each benchmark
# invocation, from /proc/stat), bench-vs-mpi.txt
# (the table), bw-OP.png and lat-OP.png, logs/. Full (not --quick) runs also
# copy the plots to docs/img/bench-vs-mpi-*.png. --report-only redoes the
# table, CSV and plots from an existing bench-vs-mpi-raw.csv in --out.
# --iters-small N: timed iterations per size up to 1 MiB (default 20; the
# p50 of 20 samples moves a lot on a shared machine), both stacks;
# --iters-large N: above 1 MiB (default 10 with b2b, 3 with iter).
# --port P: the sidecars' port (scripts/cluster.sh), default udp: on
# veths with their default offloads the udp port's GSO sends and GRO
# receives cross the kernel once per run of frames, af_packet's once per
# frame (BENCHMARKS.md, "Which port on veths"); --port af_packet for DPDK's.
# --variant NAME=PORT[:KEY=VALUE,...] (repeatable): an A/B of collstack
# configurations in one run, e.g. --variant afp=af_packet --variant
# udp=udp:port.udp_gro=false --variant gro=udp:port.udp_gro=true. The
# cluster comes up once per variant (its port, --set settings plus its
# own); each condition's rows are named COND/OFFLOAD@NAME; Open MPI runs
# only with the first variant and its figures stand in every variant's
# rows (same namespaces, same conditions). Needs --cluster cluster/auto.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac	# meson gives it whole
CLI=$BUILD/tools/collstack
MPI_BENCH=$BUILD/tools/cs-mpi-bench
DAEMON=$BUILD/sidecar/collstackd
CS_BENCH_ARGS=${CS_BENCH_ARGS:-}	# extra arguments for collstack bench
RUN_TIMEOUT=${CS_RUN_TIMEOUT:-600}	# seconds per benchmark invocation
MPI_START_TIMEOUT=${CS_MPI_START_TIMEOUT:-60}	# seconds to the first output

NODES_N=4 REPS="" QUICK=0 OPS="" CONDS=clean,loss,rate ADVERSE_OPS=allreduce
SIZES="" LOSS=1 RATE=1gbit CLUSTER=auto PORT=udp OFFLOADS=both
TIMING=b2b SETS=()
PAUSE_SIDECARS=0 REPORT_ONLY=0 PLACE=out OUT=bench-out PLOTS=1 DO_MPI=1 DO_CS=1
CPUS=auto PIN_MPI=0
A2AV_SKEW=1.1 A2AV_SEED=1	# --ops alltoallv's counts (tools/zipf_split.h)
VARIANTS=()	# NAME=PORT[:KEY=VALUE,...]
VSETS=()	# the current variant's --set arguments
MTU=1500	# on every veth of the namespaces, for both stacks
FACTOR=4 SPLIT=$((1 << 20))	# sizes above SPLIT get fewer iterations
ITERS_SMALL=20 WARM_SMALL=5 ITERS_LARGE="" WARM_LARGE=1
P=${CS_CLUSTER:-cs}
[[ "$P" =~ ^[a-z0-9]{1,6}$ ]] || { echo "bench-vs-mpi: bad CS_CLUSTER '$P'" >&2; exit 2; }
if [ "$P" = cs ]; then CS_ENV_FILE=/run/collstack/cluster.env
else CS_ENV_FILE=/run/collstack/cluster-$P.env; fi
if [ -n "${CS_CLUSTER:-}" ]; then NB_ENV_FILE=/run/collstack-bench-$P/netns.env
else NB_ENV_FILE=/run/collstack-bench/netns.env; fi

die() { echo "bench-vs-mpi: $*" >&2; exit 1; }
log() { echo "bench-vs-mpi: $*" >&2; }
usage() { sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1; shift ;;
	--reps) REPS=$2; shift 2 ;;
	--nodes) NODES_N=$2; shift 2 ;;
	--ops) OPS=$2; shift 2
		[ "$OPS" = all ] && OPS=allreduce,reduce_scatter,all_gather,broadcast ;;
	--conds) CONDS=$2; shift 2 ;;
	--adverse-ops) ADVERSE_OPS=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--loss) LOSS=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--cluster) CLUSTER=$2; shift 2 ;;
	--port) PORT=$2; shift 2 ;;
	--mtu) MTU=$2; shift 2 ;;
	--no-offload) OFFLOADS=off; shift ;;	# the older spelling
	--offload) OFFLOADS=$2; shift 2 ;;
	--timing) TIMING=$2; shift 2 ;;
	--iters-large) ITERS_LARGE=$2; shift 2 ;;
	--set) SETS+=(--set "$2"); shift 2 ;;
	--pause-sidecars) PAUSE_SIDECARS=1; shift ;;
	--place) PLACE=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--no-plots) PLOTS=0; shift ;;
	--no-mpi) DO_MPI=0; shift ;;
	--no-collstack) DO_CS=0; shift ;;
	--report-only) REPORT_ONLY=1; shift ;;
	--iters-small) ITERS_SMALL=$2; ITERS_SMALL_SET=1; shift 2 ;;
	--cpus) CPUS=$2; shift 2 ;;
	--pin-mpi) PIN_MPI=1; shift ;;
	--a2av-skew) A2AV_SKEW=$2; shift 2 ;;
	--a2av-seed) A2AV_SEED=$2; shift 2 ;;
	--variant) VARIANTS+=("$2"); shift 2 ;;
	-h|--help) usage; exit 0 ;;
	*) die "unknown option $1 (--help)" ;;
	esac
done

if [ $QUICK = 1 ]; then
	: "${REPS:=1}" "${SIZES:=4K:1M}" "${OPS:=allreduce}"
	[ -n "${ITERS_SMALL_SET:-}" ] || ITERS_SMALL=10
	WARM_SMALL=2
else
	: "${REPS:=3}" "${SIZES:=4K:64M}"
	: "${OPS:=auto}"
fi
[[ "$REPS" =~ ^[0-9]+$ ]] && [ "$REPS" -ge 1 ] || die "--reps wants a count"
[[ "$ITERS_SMALL" =~ ^[0-9]+$ ]] && [ "$ITERS_SMALL" -ge 1 ] &&
	[ "$ITERS_SMALL" -le 100000 ] || die "--iters-small wants a count (1..100000)"
[[ "$NODES_N" =~ ^[0-9]+$ ]] && [ "$NODES_N" -ge 2 ] || die "--nodes wants >= 2"
case $PLACE in out|in) ;; *) die "--place out|in" ;; esac
case $OFFLOADS in on|off) OFFL_LIST=$OFFLOADS ;; both) OFFL_LIST="on off" ;;
*) die "--offload on|off|both" ;; esac
case $TIMING in b2b) : "${ITERS_LARGE:=10}" ;; iter) : "${ITERS_LARGE:=3}" ;;
*) die "--timing b2b|iter" ;; esac
[[ "$ITERS_LARGE" =~ ^[0-9]+$ ]] && [ "$ITERS_LARGE" -ge 1 ] || die "--iters-large wants a count"
[[ "$A2AV_SKEW" =~ ^[0-9]+(\.[0-9]+)?$ ]] &&
	awk -v s="$A2AV_SKEW" 'BEGIN { exit !(s <= 16) }' ||
	die "--a2av-skew wants a number from 0 to 16"
[[ "$A2AV_SEED" =~ ^[0-9]+$ ]] || die "--a2av-seed wants a whole number"
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, nft, tc)"
for t in ip nft tc awk sort timeout ethtool; do
	command -v $t >/dev/null || die "missing tool: $t"
done

to_bytes() {	# 4K, 64M, 1G, 4096 -> bytes
	local s=$1 m=1
	case $s in
	*[kK]) m=1024; s=${s%?} ;;
	*[mM]) m=$((1 << 20)); s=${s%?} ;;
	*[gG]) m=$((1 << 30)); s=${s%?} ;;
	esac
	[[ "$s" =~ ^[0-9]+$ ]] || die "bad size $1"
	echo $((s * m))
}
MINB=$(to_bytes "${SIZES%%:*}")
MAXB=$(to_bytes "${SIZES##*:}")
[ "$MAXB" -ge "$MINB" ] || die "--sizes MIN:MAX"

# --- the cluster: cluster.sh (sidecars, both stacks) or our own namespaces.

NODES=() ADDRS=() NODE_CPUS=() IFACES=() VETHS=() BR="" SIDECAR_PIDS="" CLUSTER_KIND=""
CLUSTER_ENV=""	# the state file collstack's CLI finds the sidecars in

# How the collstack side runs: "bench" (collstack bench -o OP ..., every
# op), "run" (collstack run allreduce --bytes S, allreduce only, mean time
# and no p50) or "none".
cs_mode() {
	[ -x "$CLI" ] || { echo none; return; }
	if "$CLI" bench --help 2>&1 | grep -e ' -o' -e allreduce >/dev/null; then
		echo bench
	elif "$CLI" run --help 2>&1 | grep allreduce >/dev/null; then
		echo run
	else
		echo none
	fi
}

# Fill NODES/ADDRS/IFACES from a state file's CS_NODES and the namespaces.
read_nodes() {
	local n a i
	NODES=() ADDRS=() IFACES=()
	for n in $CS_NODES; do
		NODES+=("$n")
		# The interface with an IPv4 address in the namespace (not lo).
		read -r i a < <(ip -n "$n" -o -4 addr show scope global |
			awk '{ split($4, p, "/"); print $2, p[1]; exit }')
		[ -n "${a:-}" ] || die "no IPv4 address in namespace $n"
		IFACES+=("$i") ADDRS+=("$a")
	done
	read -r -a VETHS <<<"$CS_VETHS"
	read -r -a NODE_CPUS <<<"${CS_CPUS:-}"
	BR=$CS_BRIDGE
	SWNS=${CS_SWITCH:-}
	SIDECAR_PIDS=${CS_PIDS:-}
}

# The one place that picks the namespaces: scripts/cluster.sh (csn*, the
# project's cluster) or scripts/lib/netns.sh (csb*, usable while a
# cluster.sh cluster is up). Both start a collstackd per namespace when
# the collstack side runs.
cluster_up() {
	local kind=$CLUSTER daemons=0 port=$PORT
	[ $DO_CS = 1 ] && [ -x "$DAEMON" ] && [ "$(cs_mode)" != none ] && daemons=1
	if [ "$kind" = auto ]; then
		kind=own
		[ $daemons = 1 ] && [ -x scripts/cluster.sh ] &&
			[ ! -e "$CS_ENV_FILE" ] && kind=cluster
	fi
	# Without DPDK only the udp port exists.
	if [ $daemons = 1 ] && [ "$port" != udp ] &&
	   ! "$DAEMON" --help-config | grep 'port types:.* dpdk' >/dev/null; then
		log "collstackd has no DPDK: port udp instead of $port"
		port=udp
	fi
	CLUSTER_KIND=$kind
	case $kind in
	cluster)
		[ -x scripts/cluster.sh ] || die "scripts/cluster.sh missing"
		if [ $daemons = 1 ]; then
			scripts/cluster.sh up "$NODES_N" --port "$port" \
				--mtu "$MTU" --cpus "$CPUS" "${SETS[@]}" \
				"${VSETS[@]}" >&2
		else
			scripts/cluster.sh up "$NODES_N" --no-daemons \
				--mtu "$MTU" --cpus "$CPUS" >&2
		fi
		CLUSTER_ENV=$CS_ENV_FILE
		;;
	own)
		[ ${#SETS[@]} = 0 ] && [ ${#VSETS[@]} = 0 ] ||
			die "--set and --variant KEY=VALUE need a scripts/cluster.sh cluster (--cluster cluster)"
		if [ $daemons = 1 ]; then
			scripts/lib/netns.sh up "$NODES_N" --daemons "$port" \
				--mtu "$MTU" --cpus "$CPUS" >&2
		else
			scripts/lib/netns.sh up "$NODES_N" --mtu "$MTU" \
				--cpus "$CPUS" >&2
		fi
		CLUSTER_ENV=$NB_ENV_FILE
		;;
	*) die "--cluster auto|own|cluster" ;;
	esac
	# shellcheck disable=SC1090
	. "$CLUSTER_ENV"
	CS_PORT_USED=$([ $daemons = 1 ] && echo "$port" || echo none)
	read_nodes
}

cluster_down() {
	case $CLUSTER_KIND in
	cluster) scripts/cluster.sh down >&2 || true ;;
	own) scripts/lib/netns.sh down >&2 || true ;;
	esac
	CLUSTER_KIND=""
}

# --- adverse conditions, on the bridge and its switch-side veths only.

NFT_TABLE=${P}bench	# bridge family; nothing else uses this name
COND_NOW=""
SWNS=""	# the namespace of the bridge (CS_SWITCH; none: the host's)
sw() {	# run a command where the bridge is
	if [ -n "$SWNS" ]; then ip netns exec "$SWNS" "$@"; else "$@"; fi
}

cond_apply() {
	local c=$1 v set="" per10k
	COND_NOW=$c
	case $c in
	clean) ;;
	loss)
		for v in "${VETHS[@]}"; do set+="\"$v\", "; done
		per10k=$(awk -v p="$LOSS" 'BEGIN { printf "%d", p * 100 + 0.5 }')
		sw nft -f - <<EOF
table bridge $NFT_TABLE {
	chain forward {
		type filter hook forward priority 0; policy accept;
		iifname { ${set%, } } numgen random mod 10000 < $per10k counter drop
	}
}
EOF
		log "condition loss: bridge $BR drops $LOSS% of forwarded frames"
		;;
	rate)
		for v in "${VETHS[@]}"; do
			sw tc qdisc replace dev "$v" root handle 1: htb default 1
			sw tc class replace dev "$v" parent 1: classid 1:1 htb \
				rate "$RATE" ceil "$RATE" quantum 65536
		done
		log "condition rate: HTB $RATE on ${VETHS[*]} (towards each node)"
		;;
	*) die "unknown condition $c (clean, loss, rate)" ;;
	esac
}

cond_counters() {	# the loss rule's counter: "packets N bytes B"
	sw nft list table bridge $NFT_TABLE 2>/dev/null |
		grep -o 'packets [0-9]* bytes [0-9]*' || true
}

cond_clear() {
	local v
	case $COND_NOW in
	loss)
		log "condition loss: dropped $(cond_counters)"
		echo "# loss $LOSS%: the bridge dropped $(cond_counters)" >>"$OUT/bench-vs-mpi.env"
		sw nft delete table bridge $NFT_TABLE 2>/dev/null || true
		;;
	rate)
		for v in "${VETHS[@]}"; do
			sw tc qdisc del dev "$v" root 2>/dev/null || true
		done
		;;
	esac
	COND_NOW=""
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[ -n "$SIDECAR_PIDS" ] && sidecars CONT
	[ -n "$COND_NOW" ] && cond_clear
	sw nft delete table bridge $NFT_TABLE 2>/dev/null || true
	[ -n "$CLUSTER_KIND" ] && cluster_down
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sidecars() {	# STOP|CONT: only the collstackd PIDs cluster.sh started
	local p
	[ $PAUSE_SIDECARS = 1 ] || return 0
	for p in $SIDECAR_PIDS; do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = collstackd ] &&
			kill -"$1" "$p" 2>/dev/null || true
	done
}

# The veths' segmentation offloads, on both ends of every node's veth:
# on (as they come) or off (every frame a packet of its own).
offload_set() {
	local i v=$1
	for i in "${!NODES[@]}"; do
		ip netns exec "${NODES[$i]}" ethtool -K "${IFACES[$i]}" \
			tso "$v" gso "$v" gro "$v" >/dev/null 2>&1 ||
			log "ethtool -K ${IFACES[$i]} tso/gso/gro $v failed"
		[ -n "${VETHS[$i]:-}" ] || continue
		sw ethtool -K "${VETHS[$i]}" tso "$v" gso "$v" gro "$v" \
			>/dev/null 2>&1 ||
			log "ethtool -K ${VETHS[$i]} tso/gso/gro $v failed"
	done
	log "veth offloads (tso, gso, gro) $v"
}

# --- the two stacks. Each prints the nccl-tests-style rows of one run.

MPI_DIR=""
mpi_setup() {
	local i
	MPI_DIR=$OUT/mpi
	mkdir -p "$MPI_DIR"
	: >"$MPI_DIR/hostfile"
	: >"$MPI_DIR/hosts.map"
	for i in "${!NODES[@]}"; do
		echo "${ADDRS[$i]} slots=1" >>"$MPI_DIR/hostfile"
		# third column: the node's CPU (scripts/netns-rsh.sh)
		echo "${ADDRS[$i]} ${NODES[$i]} $([ $PIN_MPI = 1 ] && echo "${NODE_CPUS[i]:-}")" >>"$MPI_DIR/hosts.map"
	done
	MPI_NET=${ADDRS[0]%.*}.0/24
}

mpi_ranks_up() {	# a cs-mpi-bench process in every namespace?
	local ns p up
	for ns in "${NODES[@]}"; do
		up=0
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			[ "$(cat /proc/"$p"/comm 2>/dev/null)" = cs-mpi-bench ] &&
				{ up=1; break; }
		done
		[ $up = 1 ] || return 1
	done
}

mpi_bench() {	# op minb maxb iters warmup logfile
	[ -x "$MPI_BENCH" ] || { echo "cs-mpi-bench not built" >"$6"; return 1; }
	local rc=0 pid attempt t started pin=() va=()
	# alltoallv: the counts of the collstack side (tools/zipf_split.h)
	[ "$1" = alltoallv ] &&
		va=(--zipf-skew "$A2AV_SKEW" --zipf-seed "$A2AV_SEED")
	# mpirun starts the first namespace's rank itself, not via the agent
	if [ $PIN_MPI = 1 ] && [ -n "${NODE_CPUS[0]:-}" ]; then
		pin=(taskset -c "${NODE_CPUS[0]}")
	fi
	sidecars STOP
	for attempt in 1 2 3; do
		# mpirun runs in the first namespace, hostname = its name.
		timeout "$RUN_TIMEOUT" ip netns exec "${NODES[0]}" "${pin[@]}" \
			env CS_RSH_MAP="$MPI_DIR/hosts.map" \
			unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' \
			"${NODES[0]}" \
			mpirun --allow-run-as-root -np "${#NODES[@]}" \
			--hostfile "$MPI_DIR/hostfile" --map-by node --bind-to none \
			--mca plm_rsh_agent "$ROOT/scripts/netns-rsh.sh" \
			--mca plm_rsh_no_tree_spawn 1 \
			--mca btl tcp,self --mca btl_tcp_if_include "$MPI_NET" \
			--mca oob_tcp_if_include "$MPI_NET" \
			--mca mpi_yield_when_idle 1 \
			"$MPI_BENCH" -o "$1" -b "$2" -e "$3" -f "$FACTOR" \
			-n "$4" -w "$5" -m "$TIMING" "${va[@]}" >"$6.run" 2>&1 &
		pid=$!
		# Watchdog: orteds are daemonized, so mpirun never learns of
		# one that died before reporting in and waits for ever.
		started=0
		for ((t = 0; t < MPI_START_TIMEOUT; t++)); do
			mpi_ranks_up && { started=1; break; }
			kill -0 $pid 2>/dev/null || break
			sleep 1
		done
		if [ $started = 0 ] && kill -0 $pid 2>/dev/null; then
			log "  mpirun did not start in ${MPI_START_TIMEOUT}s (attempt $attempt), stopping it"
			kill -TERM $pid 2>/dev/null || true
		fi
		rc=0
		wait $pid || rc=$?
		# A short run may end between two looks: its header counts.
		grep -q '^# op' "$6.run" && started=1
		grep -v 'setpgid.*failed in parent' "$6.run" >>"$6" || true
		rm -f "$6.run"
		[ $started = 1 ] && break
		echo "# attempt $attempt: rc $rc, no start" >>"$6"
	done
	sidecars CONT
	return $rc
}

CS_AVAILABLE=""
collstack_bench() {	# op minb maxb iters warmup logfile
	local mode z rc=0 va=()
	# alltoallv: the counts of the Open MPI side (tools/zipf_split.h)
	[ "$1" = alltoallv ] && va=(--skew "$A2AV_SKEW" --seed "$A2AV_SEED")
	if [ -z "$CS_AVAILABLE" ]; then
		mode=$(cs_mode)
		CS_AVAILABLE=$mode
		if [ "$CS_PORT_USED" = none ] || [ "$mode" = none ]; then
			CS_AVAILABLE=no
			log "collstack bench not available (NA): $("$CLI" bench --help 2>&1 | head -1)"
		elif [ "$mode" = run ]; then
			log "collstack side: 'collstack run allreduce' (allreduce only, mean times, no p50)"
		fi
	fi
	if [ "$CS_AVAILABLE" = run ] && [ "$1" != allreduce ]; then
		echo "collstack run has no $1" >"$6"
		return 1
	fi
	case $CS_AVAILABLE in
	bench)
		# shellcheck disable=SC2086
		timeout "$RUN_TIMEOUT" "$CLI" bench -o "$1" -b "$2" -e "$3" \
			-f "$FACTOR" -n "$4" -w "$5" -m "$TIMING" "${va[@]}" \
			--cluster "$CLUSTER_ENV" \
			$CS_BENCH_ARGS >"$6" 2>&1 || rc=$?
		# The sidecars' health counters after it (cumulative since
		# they started): what a slow rep resent, dropped or waited.
		"$CLI" stats --cluster "$CLUSTER_ENV" 2>&1 |
			sed 's/^/# after: /' >"${6%.log}.stats.log" || true
		return $rc
		;;
	run)
		# One call per size (ours go up by FACTOR, run's by 2);
		# its rows are "size count type redop time algbw busbw
		# #wrong": make them ours, with no p50/p99 (NA).
		# A failed size does not stop the others (rc is kept).
		for ((z = $2; z <= $3; z *= FACTOR)); do
			# shellcheck disable=SC2086
			timeout "$RUN_TIMEOUT" "$CLI" run allreduce \
				--cluster "$CLUSTER_ENV" --bytes "$z" \
				-n "$4" -w "$5" $CS_BENCH_ARGS >"$6.run" 2>&1 ||
				rc=$?
			cat "$6.run" >>"$6.raw"
			awk -v p="$PLACE" 'NF == 8 && $1 ~ /^[0-9]+$/ {
				print $1, $2, "float", $4, -1, $5, $6, $7, $8,
				      "NA", "NA", p }' "$6.run" >>"$6"
			rm -f "$6.run"
		done
		[ -f "$6.raw" ] && mv "$6.raw" "${6%.log}.orig.log"
		return $rc
		;;
	*)
		echo "collstack bench not available" >"$6"
		return 1
		;;
	esac
}

# --- runs and results.

RAW=""	# the raw CSV
STEAL=""	# the host's steal per benchmark invocation (CSV)
cpu_ticks() {	# "busy+idle steal" ticks of all CPUs so far (/proc/stat)
	awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9 }' /proc/stat
}
run_one() {	# cond rep stack op
	local cond=$1 rep=$2 stack=$3 op=$4 b e=0 fn lf part rc ok=0 n w t0 t1 load
	fn=mpi_bench
	[ "$stack" = collstack ] && fn=collstack_bench
	# Small sizes get more iterations than the large ones.
	for part in small large; do
		b=$MINB
		if [ $part = small ]; then
			[ "$MINB" -le $SPLIT ] || continue
			e=$MINB
			while [ $((e * FACTOR)) -le "$MAXB" ] &&
			      [ $((e * FACTOR)) -le $SPLIT ]; do
				e=$((e * FACTOR))
			done
			n=$ITERS_SMALL w=$WARM_SMALL
		else
			while [ "$b" -le $SPLIT ]; do b=$((b * FACTOR)); done
			[ "$b" -le "$MAXB" ] || continue
			e=$MAXB
			n=$ITERS_LARGE w=$WARM_LARGE
		fi
		lf=$OUT/logs/${cond//\//-}-r$rep-$stack-$op-$part.log
		log "$cond rep $rep: $stack $op $b..$e B (-n $n -w $w)"
		rc=0
		: >"$lf"
		t0=$(cpu_ticks)
		load=$(cut -d' ' -f1 /proc/loadavg)
		$fn "$op" "$b" "$e" "$n" "$w" "$lf" || rc=$?
		# Steal: time the hypervisor ran something else while a vCPU
		# of this machine wanted to run. A rep that the host slowed
		# shows here (docs/bench-vs-mpi.md).
		t1=$(cpu_ticks)
		awk -v a="$t0" -v b="$t1" -v k="$cond,$rep,$stack,$op,$part" \
			-v l="$load" 'BEGIN {
			split(a, x, " "); split(b, y, " "); t = y[1] - x[1]
			printf "%s,%d,%d,%.1f,%s\n", k, t, y[2] - x[2], (t > 0 ? 100 * (y[2] - x[2]) / t : 0), l
		}' >>"$STEAL"
		log "  host steal: $(tail -1 "$STEAL" | cut -d, -f8)% of the CPU time"
		[ $rc = 0 ] || { [ "$stack" = collstack ] && [ "$(head -c 9 "$lf")" = collstack ]; } ||
			log "  $stack $op failed (rc $rc), see $lf: $(tail -1 "$lf")"
		# size count type redop root time algbw busbw #wrong p50 p99 place
		# [cpu(s/GB)]
		awk -v c="$cond" -v r="$rep" -v s="$stack" -v o="$op" \
			'(NF == 12 || NF == 13) && $1 ~ /^[0-9]+$/ {
				printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
				c, r, s, o, $1, $12, $6, $7, $8, $9, $10, $11,
				(NF == 13 ? $13 : "NA")
			}' "$lf" >>"$RAW"
		grep -q "^$cond,$rep,$stack,$op," "$RAW" && ok=1
	done
	[ $ok = 1 ]
}

median() {	# reads numbers (or NA), prints the median or NA
	awk '$1 != "NA" && $1 != "" { v[n++] = $1 }
	END {
		if (!n) { print "NA"; exit }
		for (i = 1; i < n; i++)	# insertion sort, n is small
			for (j = i; j > 0 && v[j - 1] + 0 > v[j] + 0; j--) {
				t = v[j]; v[j] = v[j - 1]; v[j - 1] = t
			}
		if (n % 2) print v[int(n / 2)]
		else {
			m = (v[n / 2 - 1] + v[n / 2]) / 2
			printf (m >= 1000 ? "%.1f\n" : "%.4g\n"), m
		}
	}'
}

human() {	# bytes -> 4K / 64M
	awk -v b="$1" 'BEGIN {
		if (b >= 1073741824 && b % 1073741824 == 0) printf "%dG", b / 1073741824
		else if (b >= 1048576 && b % 1048576 == 0) printf "%dM", b / 1048576
		else if (b >= 1024 && b % 1024 == 0) printf "%dK", b / 1024
		else printf "%d", b
	}'
}

ratio() {	# a / b with 2 decimals, NA if either is NA or b is 0
	awk -v a="$1" -v b="$2" 'BEGIN {
		if (a == "NA" || b == "NA" || b + 0 == 0) print "NA"
		else printf "%.2f\n", a / b
	}'
}

# Medians per (cond, op, size, stack) -> the summary CSV and the table.
summarize() {
	local sum=$OUT/bench-vs-mpi.csv txt=$OUT/bench-vs-mpi.txt
	local cond op size cbw mbw cl ml wrong cn mn ccpu mcpu ct mt c99 m99
	# Latency: p50, or the mean time where the collstack side has no p50
	# (collstack run), for both stacks alike.
	LATCOL=11 LATNAME=p50
	if awk -F, '$3 == "collstack" && $11 == "NA" { f = 1 } END { exit !f }' "$RAW"; then
		LATCOL=7 LATNAME=mean
	fi
	echo "cond,op,size,collstack_busbw_GBps,mpi_busbw_GBps,busbw_ratio_cs_over_mpi,collstack_lat_us,mpi_lat_us,lat_ratio_mpi_over_cs,collstack_reps,mpi_reps,place,wrong,lat_kind,collstack_cpu_s_per_GB,mpi_cpu_s_per_GB,collstack_time_us,mpi_time_us,collstack_p99_us,mpi_p99_us" >"$sum"
	{
		printf '# collstack vs Open MPI (TCP), %d nodes, medians of %d reps, %s-of-place rows, %s\n' \
			"${#NODES[@]}" "$REPS" "$PLACE" "$(date -u '+%Y-%m-%d %H:%M UTC')"
		cat "$OUT/bench-vs-mpi.env" 2>/dev/null
		printf '# bw x = collstack/MPI busbw (GB/s); lat x = MPI/collstack %s time (us); >1: collstack better\n' "$LATNAME"
		printf '# (k): only k of the %d reps gave that figure (the others failed; see logs/)\n' "$REPS"
		printf '# time: mean per op (us); p50/p99 of the per-op times; cpu: CPU seconds per GB moved (all ranks'"'"' sends)\n'
		printf '%-13s %-10s %5s %9s %9s %6s %9s %9s %9s %9s %9s %9s %6s %6s\n' cond op size \
			"cs busbw" "mpi busbw" "bw x" "cs time" "mpi time" "cs $LATNAME" "mpi $LATNAME" \
			"cs p99" "mpi p99" "cs cpu" "mpi cpu"
	} >"$txt"
	# Keys: conditions and ops in run order, sizes ascending.
	awk -F, -v p="$PLACE" 'NR > 1 && $6 == p {
		if (!($1 in ci)) ci[$1] = ++nc
		if (!($4 in oi)) oi[$4] = ++no
		print ci[$1], oi[$4], $5, $1 "," $4 "," $5 }' "$RAW" |
		sort -n -k1,1 -k2,2 -k3,3 -u | cut -d' ' -f4 |
		while IFS=, read -r cond op size; do
		pick() {	# stack column -> median over reps
			# (Open MPI's rows of COND@V stand for every variant)
			awk -F, -v c="$cond" -v o="$op" -v z="$size" -v s="$1" \
				-v p="$PLACE" -v k="$2" \
				'function base(x) { sub(/@.*/, "", x); return x }
				 (s == "mpi" ? base($1) == base(c) : $1 == c) &&
				 $4 == o && $5 == z && $3 == s && $6 == p { print $k }' \
				"$RAW" | median
		}
		cbw=$(pick collstack 9) mbw=$(pick mpi 9)
		mn=$(awk -F, -v c="$cond" -v o="$op" -v z="$size" -v p="$PLACE" \
			'function base(x) { sub(/@.*/, "", x); return x }
			 ($1 == c || ($3 == "mpi" && base($1) == base(c))) &&
			 $4 == o && $5 == z && $6 == p { n[$3]++ }
			 END { print n["collstack"] + 0, n["mpi"] + 0 }' "$RAW")
		cn=${mn% *} mn=${mn#* }
		cl=$(pick collstack $LATCOL) ml=$(pick mpi $LATCOL)
		wrong=$(awk -F, -v c="$cond" -v o="$op" -v z="$size" -v p="$PLACE" \
			'$1 == c && $4 == o && $5 == z && $6 == p { w += $10 } END { print w + 0 }' "$RAW")
		ccpu=$(pick collstack 13) mcpu=$(pick mpi 13)
		ct=$(pick collstack 7) mt=$(pick mpi 7)
		c99=$(pick collstack 12) m99=$(pick mpi 12)
		echo "$cond,$op,$size,$cbw,$mbw,$(ratio "$cbw" "$mbw"),$cl,$ml,$(ratio "$ml" "$cl"),$cn,$mn,$PLACE,$wrong,$LATNAME,$ccpu,$mcpu,$ct,$mt,$c99,$m99" >>"$sum"
		few() {	# value count -> "value(k)" when k < REPS
			if [ "$2" -gt 0 ] && [ "$2" -lt "$REPS" ]; then
				echo "$1($2)"
			else
				echo "$1"
			fi
		}
		printf '%-13s %-10s %5s %9s %9s %6s %9s %9s %9s %9s %9s %9s %6s %6s%s\n' "$cond" "$op" \
			"$(human "$size")" "$(few "$cbw" "$cn")" "$(few "$mbw" "$mn")" \
			"$(ratio "$cbw" "$mbw")" "$ct" "$mt" \
			"$(few "$cl" "$cn")" "$(few "$ml" "$mn")" "$c99" "$m99" \
			"$ccpu" "$mcpu" \
			"$([ "$wrong" = 0 ] || echo "  WRONG=$wrong")" >>"$txt"
	done
	goals >>"$txt"
	steal_summary >>"$txt"
	cat "$txt"
}

steal_summary() {	# the host's steal per stack, where the run recorded it
	local f=$OUT/bench-vs-mpi-steal.csv
	[ -s "$f" ] || return 0
	awk -F, 'NR > 1 { n[$3]++; s[$3] += $8; l[$3] += $9
		if (!($3 in m) || $8 > m[$3]) { m[$3] = $8; w[$3] = $1 " rep " $2 " " $5 } }
		END { for (k in n) printf "#   %s runs: load average (1 min) at their start %.2f on %d cores; host steal mean %.1f%%, most %.1f%% (%s)\n", k, l[k] / n[k], '"$(nproc)"', s[k] / n[k], m[k], w[k] }' "$f" | sort
}

goals() {	# the headline figures of issues 22 and 23, where the run has them
	local sum=$OUT/bench-vs-mpi.csv
	echo "# goals (${#NODES[@]} nodes, MTU $MTU, medians; bw x = collstack/MPI busbw, time x = MPI/collstack mean time):"
	# issue 23: alltoall and alltoallv (Zipf counts) 1 MiB busbw >= 1.5x
	# Open MPI clean, >= 3x under loss
	awk -F, 'NR > 1 && ($2 == "alltoall" || $2 == "alltoallv") &&
		$3 == 1048576 {
		g = $1 ~ /^loss/ ? 3 : $1 ~ /^clean/ ? 1.5 : 0
		v = ""
		if (g && $6 == "NA") v = " (goal >= " g ": NA)"
		else if (g && $6 + 0 >= g) v = " (goal >= " g ": met)"
		else if (g) v = " (goal >= " g ": not met)"
		printf "#   %-13s %-9s 1M busbw: collstack %s, Open MPI %s GB/s, bw x %s%s\n",
			$1, $2, $4, $5, $6, v
	}' "$sum"
	a2av_counts
	awk -F, 'NR > 1 && $2 == "allreduce" &&
		($3 == 67108864 || $3 == 1048576 || $3 == 4096) {
		z = $3 == 67108864 ? "64M" : $3 == 1048576 ? "1M" : "4K"
		if ($3 == 4096)
			printf "#   %-9s allreduce %3s mean time: collstack %s, Open MPI %s us, time x %s\n",
				$1, z, $17, $18, ($17 > 0 && $18 != "NA" && $17 != "NA" ? sprintf("%.2f", $18 / $17) : "NA")
		else
			printf "#   %-9s allreduce %3s busbw: collstack %s, Open MPI %s GB/s, bw x %s\n",
				$1, z, $4, $5, $6
	}' "$sum"
}

# alltoallv: the count matrices both sides printed ("# counts SIZE: ..."
# in their logs), per stack, compared; a difference makes the ratios
# meaningless.
a2av_counts() {
	local c m
	ls "$OUT"/logs/*-alltoallv-*.log >/dev/null 2>&1 || return 0
	c=$(cat "$OUT"/logs/*-collstack-alltoallv-*.log 2>/dev/null |
		grep '^# counts' | sort -u || true)
	m=$(cat "$OUT"/logs/*-mpi-alltoallv-*.log 2>/dev/null |
		grep '^# counts' | sort -u || true)
	if [ -z "$c" ] || [ -z "$m" ]; then
		echo "#   alltoallv count matrices: not compared (a side printed none)"
	elif [ "$c" = "$m" ]; then
		echo "#   alltoallv count matrices (tools/zipf_split.h): the same on both sides, $(wc -l <<<"$c") sizes$(grep '^# counts 1048576:' <<<"$c" | cut -d/ -f1 | cut -d: -f2 | awk 'NF { $1 = $1; print "; 1M: every rank sends (" $0 ") f32 elements to ranks 0.." NF - 1 }')"
	else
		echo "#   alltoallv count matrices: DIFFER between the sides (logs/*-alltoallv-*.log, '# counts'): the ratios compare different work"
	fi
}

plots() {
	local sum=$OUT/bench-vs-mpi.csv op cond gp f st xt="" z k=0
	command -v gnuplot >/dev/null || { log "gnuplot missing: no plots"; return 0; }
	for z in $(awk -F, 'NR > 1 { print $3 }' "$sum" | sort -n -u); do
		xt+="\"$(human "$z")\" $z, "
	done
	for op in $(awk -F, 'NR > 1 { print $2 }' "$sum" | awk '!seen[$0]++'); do
		local bwp="" latp=""
		k=0
		for cond in $(awk -F, -v o="$op" 'NR > 1 && $2 == o { print $1 }' "$sum" | awk '!seen[$0]++'); do
			k=$((k + 1))
			f=$OUT/plot-$op-${cond//\//-}.dat
			awk -F, -v o="$op" -v c="$cond" 'NR > 1 && $2 == o && $1 == c {
				print $3, $4, $5, $7, $8 }' "$sum" >"$f"
			# Colour per stack, dash and point per condition.
			st="with linespoints lw 2 dt $k pt $((k * 2 + 5))"
			bwp+="'$f' using 1:2 $st lc rgb '#1f77b4' title 'collstack, $cond', "
			bwp+="'$f' using 1:3 $st lc rgb '#d62728' title 'Open MPI TCP, $cond', "
			latp+="'$f' using 1:4 $st lc rgb '#1f77b4' title 'collstack, $cond', "
			latp+="'$f' using 1:5 $st lc rgb '#d62728' title 'Open MPI TCP, $cond', "
		done
		gp="set terminal pngcairo size 900,560 font 'sans,11'
set datafile missing 'NA'
set logscale x 2
set xtics (${xt%, })
set xrange [$(awk -F, 'NR > 1 { if (!lo || $3 < lo) lo = $3; if ($3 > hi) hi = $3 }
	END { printf "%g:%g", lo / 1.3, hi * 1.3 }' "$sum")]
set grid
set key top left
set xlabel 'message size (bytes)'"
		# Columns that are all NA (no collstack yet) only warn: drop that.
		gnuplot <<EOF 2>&1 | grep -v -e 'no valid points' -e '^ *$' >&2 || true
$gp
set output '$OUT/bw-$op.png'
set title '$op busbw, ${#NODES[@]} nodes, median of $REPS reps'
set ylabel 'busbw (GB/s)'
set yrange [0:*]
plot ${bwp%, }
set output '$OUT/lat-$op.png'
set title '$op $LATNAME time per operation, ${#NODES[@]} nodes, median of $REPS reps'
set ylabel '$LATNAME time (us)'
set logscale y 10
set yrange [*:*]
plot ${latp%, }
EOF
		[ -f "$OUT/bw-$op.png" ] || log "gnuplot failed for $op"
	done
	if [ $QUICK = 0 ]; then
		mkdir -p docs/img
		for f in "$OUT"/bw-*.png "$OUT"/lat-*.png; do
			[ -f "$f" ] && cp "$f" "docs/img/bench-vs-mpi-$(basename "$f")"
		done
		log "plots copied to docs/img/bench-vs-mpi-*.png"
	fi
}

# --- main

mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
RAW=$OUT/bench-vs-mpi-raw.csv
if [ $REPORT_ONLY = 1 ]; then
	[ -f "$RAW" ] || die "no $RAW to report on"
	mapfile -t NODES < <(seq "$NODES_N")
	REPS=$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m + 0 }' "$RAW")
	summarize
	[ $PLOTS = 1 ] && plots
	exit 0
fi
echo "cond,rep,stack,op,size,place,time_us,algbw_GBps,busbw_GBps,wrong,p50_us,p99_us,cpu_s_per_GB" >"$RAW"
STEAL=$OUT/bench-vs-mpi-steal.csv
echo "cond,rep,stack,op,part,cpu_ticks,steal_ticks,steal_pct,load1" >"$STEAL"
rm -f "$OUT"/logs/*.log "$OUT"/*.png "$OUT"/plot-*.dat

start=$SECONDS
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=("")
# NAME=PORT[:K=V,...] -> VNAME, PORT, VSETS
variant_set() {
	local v=$1 kv
	VNAME="" VSETS=()
	[ -n "$v" ] || return 0
	[[ "$v" =~ ^[a-z0-9_]+=[a-z_]+(:.+)?$ ]] ||
		die "--variant NAME=PORT[:KEY=VALUE,...], not '$v'"
	VNAME=${v%%=*} v=${v#*=}
	PORT=${v%%:*}
	if [ "$v" != "$PORT" ]; then
		IFS=, read -r -a kv <<<"${v#*:}"
		for v in "${kv[@]}"; do VSETS+=(--set "$v"); done
	fi
}
variant_set "${VARIANTS[0]}"
cluster_up
mpi_setup
{
	echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# cluster: $CLUSTER_KIND ($CLUSTER_ENV), collstackd port $CS_PORT_USED, nodes ${NODES[*]}, addresses ${ADDRS[*]}, bridge $BR, MTU $MTU, CPUs per node ${NODE_CPUS[*]:-any} ($([ $PIN_MPI = 1 ] && echo 'both stacks' || echo 'collstack; Open MPI ranks float')), veth offloads: $OFFL_LIST (off: ethtool -K tso gso gro off, both ends), timing $TIMING"
	echo "# collstackd settings: ${SETS[*]:-defaults}"
	[ -z "$VNAME" ] || echo "# variants (rows COND/OFFLOAD@NAME; Open MPI ran with the first): ${VARIANTS[*]}"
	echo "# $(mpirun --version 2>/dev/null | head -1), btl tcp,self on $MPI_NET, mpi_yield_when_idle 1"
	case ,$OPS,$ADVERSE_OPS, in *,alltoallv,*)
		echo "# alltoallv counts: tools/zipf_split.h, Zipf $A2AV_SKEW, seed $A2AV_SEED (collstack bench --skew $A2AV_SKEW --seed $A2AV_SEED, cs-mpi-bench --zipf-skew $A2AV_SKEW --zipf-seed $A2AV_SEED)" ;;
	esac
	echo "# sizes $MINB..$MAXB x$FACTOR, iterations <=1M: -n $ITERS_SMALL -w $WARM_SMALL, larger: -n $ITERS_LARGE -w $WARM_LARGE, reps $REPS"
} | tee "$OUT/bench-vs-mpi.env" >&2

# auto: every op the collstack side has (all four without a collstack side).
if [ "$OPS" = auto ]; then
	OPS=allreduce,reduce_scatter,all_gather,broadcast
	[ "$CS_PORT_USED" != none ] && [ "$(cs_mode)" = run ] && OPS=allreduce
	log "ops: $OPS"
fi
IFS=, read -r -a conds <<<"$CONDS"
first_variant=1
for variant in "${VARIANTS[@]}"; do
if [ $first_variant = 0 ]; then
	cluster_down
	variant_set "$variant"
	cluster_up
	DO_MPI_SAVED=${DO_MPI_SAVED:-$DO_MPI} DO_MPI=0
fi
[ -z "$VNAME" ] || log "variant $VNAME: port $CS_PORT_USED ${VSETS[*]}"
for offl in $OFFL_LIST; do
offload_set "$offl"
for cond in "${conds[@]}"; do
	ops=$OPS
	[ "$cond" = clean ] || ops=$ADVERSE_OPS
	IFS=, read -r -a oplist <<<"$ops"
	cond_apply "$cond"
	for ((rep = 1; rep <= REPS; rep++)); do
		# Alternate which stack goes first, rep by rep.
		if [ $((rep % 2)) = 1 ]; then order="collstack mpi"; else order="mpi collstack"; fi
		for op in "${oplist[@]}"; do
			for stack in $order; do
				[ $stack = mpi ] && [ $DO_MPI = 0 ] && continue
				[ $stack = collstack ] && [ $DO_CS = 0 ] && continue
				run_one "$cond/$offl${VNAME:+@$VNAME}" "$rep" "$stack" "$op" || true
			done
		done
	done
	cond_clear
done
done
first_variant=0
done
DO_MPI=${DO_MPI_SAVED:-$DO_MPI}
cluster_down

summarize
[ $PLOTS = 1 ] && plots
log "done in $((SECONDS - start)) s: $OUT/bench-vs-mpi.{csv,txt}, raw rows in bench-vs-mpi-raw.csv"
