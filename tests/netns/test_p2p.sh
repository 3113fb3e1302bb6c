#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Point-to-point send and receive (cs_send / cs_recv, sidecar/svc_p2p.c)
# through real collstackd sidecars, with tests/netns/cs_trainer_p2p.c:
#
#   p2p_local  no root, no namespaces: one collstackd (loop port,
#              coll.deadline 3 s) and 3 trainers on it: the ring (both
#              neighbours, all in flight, 0 B to 1 MiB, every byte
#              checked, 8 messages of one tag in order), the bad inputs
#              (a peer that is itself or past the group, memory not the
#              client's, sizes that differ: both sides refused naming the
#              other's size, then a proper one; a send nobody receives:
#              CS_ERR_TIMEOUT), cs_reduce / cs_gather / cs_scatter from
#              every root (every element), cs_reduce of 6 dtypes x 4 ops
#              (every root, in place, counts below, above and not a
#              multiple of the size; every element), a rank that exits
#              with its reduce posted (the root gets an error naming it),
#              a trainer that dies with its 256 MiB
#              receive running (the sender's error names it, unless the
#              transfer was done first; a later send to it ends with
#              CS_ERR_PEER_LOST on its node, CS_ERR_TIMEOUT at
#              coll.deadline on another), then the ring again, and
#              tests/netns/p2p_check.py (Python's Group.send/recv with tags,
#              reduce, gather, scatter; where numpy is)
#   p2p_4x2    the same across 4 nodes, 2 trainers each, with 2 % of
#              frames dropped by the fault shim (coll.deadline 5 s); the
#              death case with one trainer per node, so that the dying
#              receiver is on another node than its sender; then
#              tests/torch/p2p_pipeline.py (torch.distributed isend/irecv
#              over the collstack backend, 8 pipeline stages, forward and
#              backward, several micro-batches in flight, every element);
#              cs_reduce of 8 MiB to rank 0: nodes 1..3 each receive
#              less than 8 MiB (collstack stats rx_bytes), an allreduce
#              of 8 MiB more than 10 MiB
#
# The namespace case needs root (skip, 77, without). CS_CLUSTER names the
# cluster (default: p<pid digits>).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/netns/lib.sh

CASE=${1:?usage: test_p2p.sh p2p_local|p2p_4x2}
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
DAEMON=$BUILD/sidecar/collstackd
TRAINER=$BUILD/tests/netns/cs-trainer-p2p

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# launch T MODE ARGS...: every rank's output in $out; fails on exit != 0
launch() {
	local t=$1
	shift
	# a group of its own: the last run's may not be gone yet
	LAUNCHES=$((${LAUNCHES:-0} + 1))
	export P2P_GROUP=p2p.$LAUNCHES
	out=$(timeout 600 "$CLI" launch "${LAUNCH_ARGS[@]}" -T "$t" \
		--cluster "$ENV" --timeout 500 --all-output -- "$TRAINER" "$@" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  /'
	[ $rc -eq 0 ] || fail "launch -T $t $*: exit $rc"
	grep -q "FAIL" <<<"$out" && fail "a rank failed"
	return 0
}

# want N PATTERN: N lines of $out match
want() {
	local got
	got=$(grep -c "$2" <<<"$out")
	[ "$got" = "$1" ] || fail "$1 lines '$2' expected, $got found"
}

checks() {	# RANKS: the ring, the bad inputs
	local n=$1
	launch "$T" ring 2
	want "$n" '^ring ok rank .* bytes=4247688$'
	launch "$T" bad
	want "$n" '^bad ok rank'
	want 1 'rank 1 recv of 200 bytes of a send of 100: .*matching send of rank 0 is 100 bytes'
	want 1 'rank 0 send nobody receives: .*no matching recv within'
	want "$n" 'send to itself: .*root rank out of range'
	launch "$T" rooted
	want "$n" '^rooted ok rank'
	launch "$T" reduce
	want "$n" '^reduce ok rank .* cases=1[0-9][0-9]$'
}

[ -x "$CLI" ] && [ -x "$TRAINER" ] || fail "not built: $CLI $TRAINER"
LAUNCH_ARGS=()

case $CASE in
p2p_local)
	loop_sidecar p2p
	export P2P_DEADLINE_S=3
	T=3
	checks 3
	launch 3 die
	want 1 '^die ok rank 0$'
	want 1 'send to the rank gone: .*\(no matching recv\|rank 1 is gone\)'
	want 1 '^die ok rank 2$'
	launch 3 ring 1
	want 3 '^ring ok rank'
	# one node: cs_reduce is an allreduce there unless forced (the
	# reduce mode above ran that way); forced: the two stages
	COLLSTACK_REDUCE=scatter-gather launch 3 reduce
	want 3 '^reduce ok rank .* cases=1[0-9][0-9]$'
	COLLSTACK_REDUCE=scatter-gather launch 3 reducedie
	want 1 '^reducedie ok rank 0: .*reduce of .*\(rank 2\|no matching\)'
	want 1 '^reducedie ok rank 1'
	launch 3 ring 1
	want 3 '^ring ok rank'
	if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
		out=$(COLLSTACK_LIB="$BUILD/client/libcollstack.so" timeout 300 \
			"$CLI" launch --no-netns -T 3 --cluster "$ENV" --timeout 200 \
			--all-output -- /usr/bin/python3 tests/netns/p2p_check.py 2>&1)
		rc=$?
		echo "$out" | sed 's/^/  /'
		[ $rc -eq 0 ] || fail "p2p_check.py: exit $rc"
		# (counted as matches: launch may relay two ranks' lines as one)
		[ "$(grep -o 'python p2p ok rank [0-9]*' <<<"$out" | wc -l)" = 3 ] ||
			fail "3 'python p2p ok' expected"

	fi
	kill -0 $pid 2>/dev/null || fail "collstackd died"
	;;
p2p_4x2)
	[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
	command -v ip >/dev/null || skip "missing tool: ip"
	PORT=udp	# (grep -q would end the pipe early: pipefail)
	grep -q 'port types:.* dpdk' <<<"$("$DAEMON" --help-config)" && PORT=af_packet
	export CS_CLUSTER=${CS_CLUSTER:-p$(printf '%02d' $(($$ % 100)))}
	ENV=/run/collstack/cluster-$CS_CLUSTER.env
	trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
	CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 --port $PORT \
		--set coll.deadline=5s --set fault.drop=0.02 \
		--set fault.seed=7 || fail "cluster.sh up 4"
	export P2P_DEADLINE_S=5
	T=2
	checks 8
	# not an allreduce: the nodes without the root receive what the
	# reduce-scatter brings them (3/4 of 8 MiB) and nothing of the
	# gather, where an allreduce brings them 2 x 3/4 (its all-gather)
	rx() {	# the port's received bytes of nodes 1..3, one line
		"$CLI" stats --cluster "$ENV" --raw |
			sed -n 's/^[^ ]*n\([123]\) stats: .* rx_bytes=\([0-9]*\).*/\2/p' |
			tr '\n' ' '
	}
	for how in reduce allreduce; do
		b0=($(rx))
		launch 2 reducebig 8 $([ $how = allreduce ] && echo allreduce)
		want 8 '^reducebig ok rank'
		b1=($(rx))
		[ ${#b0[@]} = 3 ] && [ ${#b1[@]} = 3 ] || fail "no rx_bytes from collstack stats"
		for i in 0 1 2; do
			d=$((b1[i] - b0[i]))
			echo "  $how of 8 MiB to rank 0: node $((i + 1)) received $d bytes"
			if [ $how = reduce ]; then
				[ $d -lt $((8 << 20)) ] ||
					fail "reduce: node $((i + 1)) received $d bytes (an allreduce's?)"
			else	# the measure tells them apart
				[ $d -gt $((10 << 20)) ] ||
					fail "allreduce: node $((i + 1)) received only $d bytes"
			fi
		done
	done
	T=1
	launch 1 die
	want 1 '^die ok rank 0$'
	want 1 'send to the rank gone: .*\(no matching recv\|rank 1 is gone\)'
	want 2 '^die ok rank [23]$'
	launch 2 ring 1
	want 8 '^ring ok rank'
	# torch.distributed over collstack: a pipeline of 8 stages, 4 of its
	# hops across nodes
	if /usr/bin/python3 -c "import torch" 2>/dev/null; then
		out=$(MASTER_ADDR=10.77.0.1 MASTER_PORT=${CS_TORCH_MASTER_PORT:-29541} \
			COLLSTACK_LIB="$BUILD/client/libcollstack.so" \
			PYTHONWARNINGS=ignore OMP_NUM_THREADS=1 timeout 600 \
			"$CLI" launch -T 2 --cluster "$ENV" --timeout 500 \
			--all-output -- /usr/bin/python3 tests/torch/p2p_pipeline.py 2>&1)
		rc=$?
		echo "$out" | sed 's/^/  /'
		[ $rc -eq 0 ] || fail "p2p_pipeline.py: exit $rc"
		want 8 '^pipeline ok rank .* half_groups=2'
	else
		echo "(no torch for /usr/bin/python3: the pipeline check skipped)"
	fi
	# last: after a trainer died with a cross-node reduce-scatter
	# posted, the sidecars sometimes stopped carrying new groups'
	# operations (a bug of their failure path, fixed on 6 December:
	# docs/p2p.md); kept last so that a return of it fails this case
	# alone
	launch 2 reducedie
	# (across nodes the others' reduce-scatter ends cancelled, or at
	# coll.deadline on the dead rank's peers: the trainer checks the
	# root's is CS_ERR_PEER_LOST, _TIMEOUT or _CANCELLED)
	want 1 '^reducedie ok rank 0: rank 0 reduce of '
	want 7 '^reducedie ok rank'
	for i in 0 1 2 3; do
		p=$(cat "/run/collstack/${CS_CLUSTER}n$i/pid" 2>/dev/null)
		[ -n "$p" ] && kill -0 "$p" 2>/dev/null ||
			fail "the sidecar of ${CS_CLUSTER}n$i died"
	done
	;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: $CASE"
