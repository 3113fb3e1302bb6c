#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The parameter-server trainer API (collstack/ps.h) through real sidecars:
# trainers (libcollstack) create tables, push and pull through their
# node's collstackd, which carries every request as PS messages of the
# table's flow on its transport core (sidecar/svc_ps_trainer.c).
# 4 namespaces, af_packet (udp where collstackd has no DPDK).
#
#   test_ps_trainers.sh CASE   (suite netns; CS_BUILD_DIR set by meson)
#
#   pstr_4x1     cs-trainer-ps train, one trainer per node: sync (every
#                pulled row equal to the serial reference, bit for bit),
#                async and ssp:1 (the whole table exact at the end)
#   pstr_4x2     the same, two trainers per node (sync, ssp:2); then
#                tests/netns/strat_ps_check.py: the "ps" strategy of
#                collstack/strategy.h equals allreduce element by element
#                (switched to, away and back), f64 refused
#   pstr_4x1_bad bad inputs, each with its named error, the sidecars
#                running on: push before create, unknown table, rows of
#                another size or type, a key outside the table, a pull of
#                zero keys, buffers outside the segments, a destroyed
#                table, bad attributes, ranks that disagree on them; a
#                trainer that dies while its pull is in flight (one per
#                node, then two per node): the other trainers' requests end
#                with an error instead of hanging; then training again
#   pstr_4x1_example  examples/ps_recsys.py (python3 + numpy): a sparse
#                embedding table through the PS and dense layers through
#                allreduce in one job; the loss goes down and the final
#                table equals the single-process run's, bit for bit
#   pstr_2x2_example  the same on 2 nodes x 2 trainers, then
#                python/examples/train_hybrid.py, whose embedding moves to
#                the "ps" strategy at step 20
#   pstr_local   no root, no namespaces: one collstackd (loop port) and two
#                trainers on it (a group on one node: its tables' shard is
#                that node): train sync and ssp:1, the bad inputs, a pull
#                past coll.deadline (3 s: CS_ERR_TIMEOUT, then the table
#                goes on), a dying trainer (the other's pull ends with
#                CS_ERR_PEER_LOST naming it), the example (where numpy is)
#   pstr_ckpt    no root: one loop-port sidecar, two trainers:
#                cs-trainer-ps ckpt (cs_ps_checkpoint, cs_ps_table_restore:
#                the restored rows equal the rows at checkpoint time bit
#                for bit; a missing directory, a file in the way, a second
#                checkpoint, another table's file, no file, a damaged file
#                each refused by name, the sidecar serving on); then
#                tests/netns/ps_ckpt_check.py (table.checkpoint(dir),
#                ps_table(..., restore=dir)) where numpy is
#   pstr_4x1_ckpt  the same over 4 namespaces, one trainer each: 4 shards,
#                4 files
#   pstr_4x1_spill  4 namespaces, ps.spill_dir a new folder: tables with a
#                small mem_budget (most rows on the SSD tier): train in
#                sync and ssp:1 (every pulled row and the final table
#                equal to the reference), every shard's log says most
#                rows were on disk and read back, no spill file left after
#                destroy; the ckpt round trip with a budget; the folder
#                gone: a table with a budget is refused naming
#                ps.spill_dir, the sidecars serve on; the sidecars
#                stopped while trainers hold a spilled table: no file left
#   pstr_4x1_recover  a lost node, recovered by the trainers: 4 nodes
#                (bootstrap coordinator in node 0), one trainer each in an
#                elastic group (cs-trainer-ps recover): a table trained and
#                checkpointed (4 shard files), trained on; kill -9 of
#                node 2's sidecar and trainer while the others' pulls
#                wait: each ends with CS_ERR_PEER_LOST naming node 2; the
#                group re-forms on the 3 nodes left, the table is created
#                again and restored from the 4 files onto 3 shards
#                (resharded), training goes on; the final table equals
#                tests/netns/ps_recover_check.py's replay from the
#                checkpoint's files, bit for bit
#
# The namespace cases need root (skip, 77, without). CS_CLUSTER names the cluster (default:
# q<pid digits><case digits>).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/netns/lib.sh

CASE=${1:?usage: test_ps_trainers.sh CASE}
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
DAEMON=$BUILD/sidecar/collstackd
TRAINER=$BUILD/tests/netns/cs-trainer-ps

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# pstr_local: one sidecar on the loop port, in a folder of its own
local_case() {
	loop_sidecar pstr
	train 2 sync
	train 2 ssp:1
	launch 2 "$TRAINER" bad
	want 2 '^ps_trainer bad_ok rank=.* cases=16$'
	launch 2 "$TRAINER" deadline
	want 2 '^ps_trainer deadline_ok rank='
	want 2 "no answer within the sidecar's coll.deadline"
	launch 2 "$TRAINER" die 1
	want 1 '^ps_trainer died_ok rank=0 .*rank 1 was lost'
	train 2 sync
	kill -0 $pid 2>/dev/null || fail "collstackd died"
	if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
		example 2
		strat 2
	else
		echo "(no numpy for /usr/bin/python3: example skipped)"
	fi
	kill -0 $pid 2>/dev/null || fail "collstackd died"
	echo "PASS: $CASE"
	exit 0
}
# ckpt_case N: cs-trainer-ps ckpt into a new folder, then its files
ckpt_case() {
	local ck shards=$1 f
	# (in the loop sidecar's folder, removed at exit; else removed by
	# the namespace cases' exit trap)
	ck=$(mktemp -d "${dir:-/tmp}/cs-pstr-ck.XXXXXX")
	CKDIR=$ck
	launch "$2" "$TRAINER" ckpt "$ck" "${@:4}"
	want "$3" '^ps_trainer ckpt_ok rank=.* clock=5 rows=600 equal=600$'
	for what in 'second checkpoint: .*still running' \
		"checkpoint to a missing directory: .*'$ck/missing': node [0-9]*: No such file or directory" \
		"checkpoint under a file: .*'$ck/file/x': node [0-9]*: Not a directory" \
		"restore of another dim: .*'$ck/ok': node [0-9]*: the file is another table's" \
		"restore without a file: .*'$ck/ok': node [0-9]*: No such file or directory" \
		"restore of a damaged file: .*'$ck/bad': node [0-9]*: the file is damaged"; do
		want "$3" "$what"
	done
	ls -l "$ck/ok" | sed 's/^/  /'
	[ "$(ls "$ck/ok" | grep -c '^ck\.shard[0-9]*\.ckpt$')" = "$shards" ] ||
		{ rm -rf "$ck"; fail "$shards shard files expected in $ck/ok"; }
	[ -z "$(ls "$ck/ok" | grep -v '^ck\.shard[0-9]*\.ckpt$')" ] ||
		{ rm -rf "$ck"; fail "files left in $ck/ok besides the shards'"; }
	pyck "$2" "$3" "$ck"
	rm -rf "$ck"
}

pyck() {	# T N DIR: ps_ckpt_check.py (the Python binding), where numpy is
	local lib
	lib=$(ls "$BUILD"/client/libcollstack.so 2>/dev/null) || return 0
	/usr/bin/python3 -c "import numpy" 2>/dev/null ||
		{ echo "(no numpy for /usr/bin/python3: ps_ckpt_check.py skipped)"; return 0; }
	out=$(COLLSTACK_LIB="$lib" PYTHONPATH="$PWD/python" timeout 600 \
		"$CLI" launch "${LAUNCH_ARGS[@]}" -T "$1" --cluster "$ENV" \
		--timeout 500 --all-output -- \
		/usr/bin/python3 tests/netns/ps_ckpt_check.py "$3" \
		${PYBUDGET:+"$PYBUDGET"} 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  /'
	[ $rc -eq 0 ] || { rm -rf "$3"; fail "ps_ckpt_check.py: exit $rc"; }
	[ "$(grep -o 'ps_ckpt_py ok rank=[0-9]* clock=3 rows=300' <<<"$out" |
		wc -l)" = "$2" ] || { rm -rf "$3"; fail "$2 'ps_ckpt_py ok' expected"; }
}

# pstr_ckpt: checkpoint and restore on one loop-port sidecar
ckpt_local_case() {
	loop_sidecar pstr
	ckpt_case 1 2 2
	# the shard's 600 rows in paced steps (256 rows the first): >= 2
	grep 'checkpoint .*/ok/ck.shard0.ckpt written' "$dir/l0.log" |
		sed 's/^/  /'
	grep -q 'checkpoint .*/ok/ck.shard0.ckpt written: clock 5, \([2-9]\|[1-9][0-9]\+\) paced steps' \
		"$dir/l0.log" || fail "no checkpoint of clock 5 in 2 or more paced steps in the sidecar's log"
	kill -0 $pid 2>/dev/null || fail "collstackd died"
	echo "PASS: $CASE"
	exit 0
}
LAUNCH_ARGS=()
NODES=1


up() {	# N [cluster.sh args]
	local n=$1
	shift
	CS_BUILD_DIR=$BUILD scripts/cluster.sh up "$n" --port $PORT "$@" ||
		fail "cluster.sh up $n"
	NODES=$n
}

# launch T PROGRAM ARGS...: every rank's output in $out; fails on exit != 0
launch() {
	local t=$1
	shift
	out=$(timeout 600 "$CLI" launch "${LAUNCH_ARGS[@]}" -T "$t" \
		--cluster "$ENV" --timeout 500 --all-output -- "$@" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  /'
	[ $rc -eq 0 ] || fail "launch -T $t $*: exit $rc"
}

# want N PATTERN: N lines of $out match
want() {
	local got
	got=$(grep -c "$2" <<<"$out")
	[ "$got" = "$1" ] || fail "$1 lines '$2' expected, $got found"
}

alive() {
	local i pid
	for ((i = 0; i < NODES; i++)); do
		pid=$(cat "/run/collstack/${CS_CLUSTER}n$i/pid" 2>/dev/null)
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null ||
			fail "the sidecar of ${CS_CLUSTER}n$i died"
	done
}

train() {	# T MODE
	launch "$1" "$TRAINER" train --steps 12 --mode "$2"
	want $((NODES * $1)) "^ps_trainer ok rank=.* mode=$2 .* wrong=0$"
}

example() {	# T
	local lib
	lib=$(ls "$BUILD"/client/libcollstack.so 2>/dev/null) ||
		skip "libcollstack.so not built"
	/usr/bin/python3 -c "import numpy" 2>/dev/null ||
		skip "no numpy for /usr/bin/python3"
	out=$(COLLSTACK_LIB="$lib" PYTHONPATH="$PWD/python" timeout 600 \
		"$CLI" launch "${LAUNCH_ARGS[@]}" -T "$1" --cluster "$ENV" \
		--timeout 500 -- \
		/usr/bin/python3 examples/ps_recsys.py --steps 30 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  /'
	[ $rc -eq 0 ] || fail "ps_recsys.py: exit $rc"
	grep -q "^ps_recsys ok ranks=$((NODES * $1)) .* loss_down=True.* table_equal_reference=True" <<<"$out" ||
		fail "no 'ps_recsys ok' line with the loss down and the table equal"
}

strat() {	# T: the "ps" strategy equals allreduce (strat_ps_check.py)
	local lib
	lib=$(ls "$BUILD"/client/libcollstack.so 2>/dev/null) ||
		skip "libcollstack.so not built"
	out=$(COLLSTACK_LIB="$lib" PYTHONPATH="$PWD/python" timeout 600 \
		"$CLI" launch "${LAUNCH_ARGS[@]}" -T "$1" --cluster "$ENV" \
		--timeout 500 --all-output -- \
		/usr/bin/python3 tests/netns/strat_ps_check.py 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  /'
	[ $rc -eq 0 ] || fail "strat_ps_check.py: exit $rc"
	# (counted as matches: launch may relay two ranks' lines as one)
	[ "$(grep -o 'strat_ps ok rank=[0-9]* steps=12 ps_steps=7' <<<"$out" |
		wc -l)" = $((NODES * $1)) ] ||
		fail "$((NODES * $1)) 'strat_ps ok' expected"
}

[ -x "$CLI" ] && [ -x "$TRAINER" ] || fail "not built: $CLI $TRAINER"
[ "$CASE" = pstr_local ] && local_case
[ "$CASE" = pstr_ckpt ] && ckpt_local_case
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for t in ip nft python3; do
	command -v $t >/dev/null || skip "missing tool: $t"
done
PORT=udp	# (grep -q would end the pipe early: pipefail)
grep -q 'port types:.* dpdk' <<<"$("$DAEMON" --help-config)" && PORT=af_packet
export CS_CLUSTER=${CS_CLUSTER:-q$(printf '%02d' $(($$ % 100)))$(printf '%s' "$CASE" | cksum | cut -c1-2)}
ENV=/run/collstack/cluster-$CS_CLUSTER.env
CKDIR=
SPDIR=
RPIDS=()	# trainers started here (recover_case), ended at exit
trap 'for p in "${RPIDS[@]}"; do kill $(pgrep -P "$p") "$p" 2>/dev/null; done
scripts/cluster.sh down >/dev/null 2>&1; [ -z "$CKDIR" ] || rm -rf "$CKDIR"
[ -z "$SPDIR" ] || rm -rf "$SPDIR" "$SPDIR.gone" "$SPDIR.hold"' EXIT

# recover_case: pstr_4x1_recover (see the head of the file)
recover_case() {
	local ck i pids=() p2 t run=/run/collstack lost=2 st rc=0
	up 4 --boot --set member.hb_interval=200ms \
		--set member.fail_timeout=3s --set rel.max_timeouts=3000
	ck=$(mktemp -d /tmp/cs-pstr-rc.XXXXXX)
	CKDIR=$ck
	for ((i = 0; i < 4; i++)); do
		ip netns exec "${CS_CLUSTER}n$i" env RANK=$i WORLD_SIZE=4 \
			LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
			COLLSTACK_SOCKET=$run/${CS_CLUSTER}n$i/collstack.sock \
			timeout 600 "$TRAINER" recover "$ck" "$ck/go" \
			--group rc >"$ck/t$i.out" 2>&1 &
		pids[$i]=$!
		RPIDS+=($!)
	done
	for ((i = 0; i < 4; i++)); do
		for _ in $(seq 3000); do
			grep -q '^ps_trainer \(phase1\|FAIL\)' "$ck/t$i.out" && break
			sleep 0.1
		done
		grep -q '^ps_trainer phase1' "$ck/t$i.out" ||
			{ cat "$ck/t$i.out"; fail "trainer $i: no phase 1"; }
	done
	ls "$ck" | grep '^rc\.shard' | sed 's/^/  checkpoint: /'
	# node 2 goes while the others' pulls wait
	p2=$(cat "$run/${CS_CLUSTER}n$lost/pid")
	kill -9 "$p2"
	kill -9 $(pgrep -P "${pids[$lost]}") "${pids[$lost]}" 2>/dev/null
	wait "${pids[$lost]}" 2>/dev/null
	echo "  killed node $lost's sidecar (pid $p2) and trainer"
	for ((i = 0; i < 4; i++)); do
		[ $i = $lost ] && continue
		for _ in $(seq 1200); do
			st=$(cs_ctl "$run/${CS_CLUSTER}n$i" ping)
			[ "$(kv "$st" lost)" = $lost ] && break
			sleep 0.1
		done
		[ "$(kv "$st" lost)" = $lost ] ||
			fail "${CS_CLUSTER}n$i: node $lost not lost: $st"
	done
	echo "  node $lost lost in the view of every other node"
	touch "$ck/go"
	for ((i = 0; i < 4; i++)); do
		[ $i = $lost ] && continue
		wait "${pids[$i]}" || rc=1
		sed 's/^/  t'$i': /' "$ck/t$i.out"
	done
	[ $rc = 0 ] || fail "a trainer failed"
	out=$(cat "$ck"/t[013].out)
	want 3 "^ps_trainer lost rank=.* err=peer lost msg=.*node $lost"
	want 3 '^ps_trainer recover_ok rank=.* size=3 clock=6 rows=600 equal=600 final_wrong=0$'
	for i in 0 1 3; do
		grep 'restored from' "$run/${CS_CLUSTER}n$i.log" | tail -1 |
			sed 's/^/  n'$i': /'
		grep -q 'restored from .* at clock 6: a checkpoint of 4 shard(s) onto 3, 4 file(s) read' \
			"$run/${CS_CLUSTER}n$i.log" ||
			fail "node $i: no restore of 4 shards onto 3 in its log"
	done
	out=$(python3 tests/netns/ps_recover_check.py "$ck" --shards 4 \
		--workers 3 2>&1)
	rc=$?
	echo "  $out"
	[ $rc = 0 ] && grep -q '^ps_recover_ref ok .* differing_values=0$' \
		<<<"$out" || fail "the table differs from the replay"
	for i in 0 1 3; do
		kill -0 "$(cat "$run/${CS_CLUSTER}n$i/pid")" 2>/dev/null ||
			fail "the sidecar of ${CS_CLUSTER}n$i died"
	done
}

# spill_case: pstr_4x1_spill (see the head of the file)
spill_case() {
	local sd i n line held mem rd ard
	sd=$(mktemp -d /tmp/cs-pstr-sd.XXXXXX)
	SPDIR=$sd
	up 4 --set ps.spill_dir="$sd"
	# 5000 rows of 8 f32 (32-byte frames), 128 of them in memory a shard
	launch 1 "$TRAINER" train --steps 12 --mode sync --budget 4096
	want 4 '^ps_trainer ok rank=.* mode=sync steps=12 .* wrong=0$'
	launch 1 "$TRAINER" train --steps 12 --mode ssp:1 --budget 4096
	want 4 '^ps_trainer ok rank=.* mode=ssp:1 steps=12 .* wrong=0$'
	# every shard of both tables: most rows on disk, read back
	n=0
	for ((i = 0; i < 4; i++)); do
		while read -r line; do
			held=$(sed -n 's/.* removed: \([0-9]*\) rows held.*/\1/p' <<<"$line")
			mem=$(sed -n 's/.* rows held, \([0-9]*\) in memory.*/\1/p' <<<"$line")
			rd=$(sed -n 's/.*, read \([0-9]*\) (.*/\1/p' <<<"$line")
			ard=$(sed -n 's/.* (\([0-9]*\) while the lcore served on.*/\1/p' <<<"$line")
			echo "  n$i: ${line#* INFO }"
			[ -n "$held" ] && [ "$mem" -le 128 ] &&
				[ $((2 * mem)) -lt "$held" ] && [ "$rd" -gt 0 ] ||
				fail "n$i: not mostly on disk, or nothing read back: $line"
			[ -n "$ard" ] && [ "$ard" -gt 0 ] ||
				fail "n$i: no pull's rows read while the lcore served on: $line"
			n=$((n + 1))
		done < <(grep "table ps/emb#.*: spill file $sd/.* removed" \
			"/run/collstack/${CS_CLUSTER}n$i.log")
	done
	[ $n = 8 ] || fail "8 spill files removed expected (2 tables x 4 nodes), $n found"
	[ -z "$(ls -A "$sd")" ] || fail "files left in $sd: $(ls -A "$sd")"
	# checkpoint and restore with 96 rows of 150 in memory a shard
	# (the Python binding's tables too: 64 rows of 20 or 24 bytes)
	PYBUDGET=1536 ckpt_case 4 1 4 --budget 1536
	grep -c "table ps/ck#.*: spill file $sd/.* removed" \
		/run/collstack/${CS_CLUSTER}n0.log | sed 's/^/  n0: spilled ck tables: /'
	grep -q "table pyck/pyck#.*: spill file $sd/.* removed" \
		/run/collstack/${CS_CLUSTER}n0.log ||
		fail "no spilled table of the Python binding in n0's log"
	[ -z "$(ls -A "$sd")" ] || fail "files left in $sd: $(ls -A "$sd")"
	alive
	# no spill directory: refused by name, the sidecars serve on
	mv "$sd" "$sd.gone"
	launch 1 "$TRAINER" spill_refused
	want 4 "create with a missing spill dir: .*no spill file in ps.spill_dir '$sd': No such file or directory"
	want 4 '^ps_trainer spill_refused_ok rank='
	mv "$sd.gone" "$sd"
	alive
	# the sidecars exit with a spilled table open: its files go too
	timeout 600 "$CLI" launch -T 1 --cluster "$ENV" --timeout 500 \
		--all-output -- "$TRAINER" hold --budget 1024 \
		>"$sd.hold" 2>&1 &
	RPIDS+=($!)
	for _ in $(seq 600); do
		[ "$(grep -c '^ps_trainer held' "$sd.hold")" = 4 ] && break
		sleep 0.1
	done
	sed 's/^/  /' "$sd.hold"
	[ "$(grep -c '^ps_trainer held' "$sd.hold")" = 4 ] ||
		fail "the trainers did not hold their table"
	ls -A "$sd" | sed 's/^/  spill file while held: /'
	[ "$(ls -A "$sd" | grep -c '^cs-pst-.*\.spill$')" = 4 ] ||
		fail "4 spill files expected while the table is held"
	scripts/cluster.sh down
	[ -z "$(ls -A "$sd")" ] ||
		fail "files left in $sd after the sidecars exited: $(ls -A "$sd")"
	echo "  the sidecars exited: no file left in $sd"
	rm -rf "$sd" "$sd.hold"
}

case $CASE in
pstr_4x1_spill)
	spill_case
	;;
pstr_4x1_recover)
	recover_case
	;;
pstr_4x1_ckpt)
	up 4
	ckpt_case 4 1 4
	alive
	;;
pstr_4x1)
	up 4
	train 1 sync
	train 1 async
	train 1 ssp:1
	;;
pstr_4x2)
	up 4
	train 2 sync
	train 2 ssp:2
	if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
		strat 2
	fi
	;;
pstr_4x1_bad)
	up 4 --set coll.deadline=20s
	launch 1 "$TRAINER" bad
	want 4 '^ps_trainer bad_ok rank=.* cases=16$'
	for what in 'push before create: .*not a PS table of this trainer' \
		'row size mismatch: .*rows of another type or size' \
		'key outside the table: .*key \[1\] is not below' \
		'pull of zero keys: .*element count out of range' \
		'create mem_budget: .*mem_budget of 100 bytes: 6 rows of 16 bytes, at least 64 a shard' \
		'create row larger than a frame: .*does not fit a frame'; do
		want 4 "$what"
	done
	alive
	launch 1 "$TRAINER" mismatch
	want 4 '^ps_trainer mismatch_ok rank=.*other attributes'
	# a trainer dies while its pull is in flight: the others end
	launch 1 "$TRAINER" die 2
	want 3 '^ps_trainer died_ok rank=.*node 2 ended the table'
	alive
	launch 2 "$TRAINER" die 5
	want 1 '^ps_trainer died_ok rank=4 .*rank 5 was lost'
	want 6 '^ps_trainer died_ok rank=.*node 2 ended the table'
	alive
	train 1 sync
	alive
	;;
pstr_4x1_example)
	up 4
	example 1
	alive
	;;
pstr_2x2_example)
	up 2
	example 2
	alive
	# the hybrid job moves its embedding to PS at step 20 (taken here)
	out=$(COLLSTACK_LIB="$BUILD/client/libcollstack.so" \
		PYTHONPATH="$PWD/python" timeout 600 "$CLI" launch -T 2 \
		--cluster "$ENV" --timeout 500 -- /usr/bin/python3 \
		python/examples/train_hybrid.py --switch-at 20 --steps 40 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  /'
	[ $rc -eq 0 ] || fail "train_hybrid.py: exit $rc"
	grep -q "'embedding': 'ps'.*params identical on every rank: True" \
		<<<"$out" || fail "train_hybrid.py: embedding not on ps at the end"
	grep -q "switch refused" <<<"$out" && fail "train_hybrid.py: refused"
	alive
	;;
*)
	fail "unknown case $CASE"
	;;
esac
echo "PASS: $CASE"
