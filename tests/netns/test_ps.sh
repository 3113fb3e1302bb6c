#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Parameter server through real sidecars (collstack run ps; sidecar/svc_ps.c):
# 4 namespaces, af_packet, every PS message a frame of the sidecars'
# transport cores.
#
#   test_ps.sh CASE   (suite netns; CS_BUILD_DIR set by meson)
#
#   ps_4x_both   every sidecar server and worker: sync SGD, 10 versions;
#                every shard and every worker's last pull equal to the
#                serial reference (wrong=0), on a freshly started cluster
#                (the bridge still floods frames to MACs it has not
#                learnt: a PS frame that reaches another node is refused)
#   ps_4x_roles  roles s,s,w,b: server-only, worker-only and both
#   ps_4x_bad    bad requests get a clear error and start nothing: a role
#                letter that is none, a node outside the view, a second
#                job while one runs, ps_wait / ps_go / ps_steps / ps_check
#                with no job, an
#                unknown mode / pattern / option, dense with KPP != ROWS
#   ps_4x_async  --mode async: every pulled row within its bounds (its
#                own pushes at least, the job's at most), every shard
#                exact once every push was taken
#   ps_4x_ssp    --mode ssp:1, roles s,b,w,b: every pulled row has seen
#                every worker's versions below its clock - 1
#   ps_4x_bad_push  worker 0 first sends a push for an unknown table and
#                one with rows one value longer: both refused (rejected=2),
#                nothing applied (every row exact), then the sidecars run
#                another job
#   ps_4x_bench  collstack bench -o ps, a few steps of each pattern and
#                the dense case, every line wrong=0, no push dropped for
#                coming early (push_early=0), no frame refused by the PS
#                flow (flow_bad=0), no message refused at send
#                (send_err=0), no pull refused for a full parking
#                (pull_busy=0)
#   ps_4x_spill  --budget 4096 (64 rows of 64 bytes a shard in memory,
#                the rest in a spill file in ps.spill_dir, a new folder):
#                sync, async and ssp:1, every shard and every pull exact
#                (wrong=0, the shards' rows add up to the table), most of
#                each shard's rows on disk and read back, pushes' rows
#                read while the lcore served on; budgets refused with a
#                reason (fewer than 64 rows, not a number, no spill
#                folder); bench -o ps --budget; every spill file removed
#
# Needs root (skips, 77, without). CS_CLUSTER names the cluster (default:
# p<pid digits><case digits>, so that parallel checkouts never meet).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/netns/lib.sh

CASE=${1:?usage: test_ps.sh CASE}
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for t in ip nft python3; do
	command -v $t >/dev/null || skip "missing tool: $t"
done
[ -x "$CLI" ] || fail "not built: $CLI"
export CS_CLUSTER=${CS_CLUSTER:-p$(printf '%02d' $(($$ % 100)))$(printf '%s' "$CASE" | cksum | cut -c1-2)}
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
SD=
trap 'scripts/cluster.sh down >/dev/null 2>&1; [ -z "$SD" ] || rm -rf "$SD" "$SD.gone"' EXIT
UP=()
if [ "$CASE" = ps_4x_spill ]; then
	SD=$(mktemp -d /tmp/cs-ps-spill.XXXXXX)
	UP=(--set ps.spill_dir="$SD")
fi
CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 "${UP[@]}" || fail "cluster.sh up 4"

run_ps() {	# args of collstack run ps
	out=$("$CLI" run ps --iters 10 --rows 5000 --dim 16 \
		--keys-per-push 32 --timeout 60000 "$@")
	rc=$?
	echo "$out"
	[ $rc -eq 0 ] || fail "run ps $*: exit $rc"
	grep -q '^ps ok .* wrong=0 ' <<<"$out" || fail "run ps $*: $out"
}

N=/run/collstack/${CS_CLUSTER}n
case $CASE in
ps_4x_both)
	run_ps
	;;
ps_4x_roles)
	run_ps --roles sswb
	grep -q 'role=server ' <<<"$out" && grep -q 'role=worker ' <<<"$out" &&
		grep -q 'role=both ' <<<"$out" || fail "roles not reported"
	;;
ps_4x_bad)
	r=$(cs_ctl ${N}0 "ps_start 7 bbxb 5 100 4 8 0,1,2,3")
	grep -q '^err role x' <<<"$r" || fail "bad role: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 100 4 8 0,9")
	grep -q '^err a node list' <<<"$r" || fail "node outside: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 100 4 0 0,1")
	grep -q '^err usage' <<<"$r" || fail "zero keys per push: $r"
	r=$(cs_ctl ${N}0 "ps_wait 10")
	grep -q '^err usage' <<<"$r" || fail "ps_wait without a job: $r"
	r=$(cs_ctl ${N}0 "ps_go")
	grep -q '^err no PS job' <<<"$r" || fail "ps_go without a job: $r"
	r=$(cs_ctl ${N}0 "ps_steps 10")
	grep -q '^err usage' <<<"$r" || fail "ps_steps without a job: $r"
	r=$(cs_ctl ${N}0 "ps_check")
	grep -q '^err no PS job' <<<"$r" || fail "ps_check without a job: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 100 4 8 0,1")
	grep -q '^ok' <<<"$r" || fail "ps_start: $r"
	r=$(cs_ctl ${N}0 "ps_start 8 bb 5 100 4 8 0,1")
	grep -q '^err a PS job runs' <<<"$r" || fail "second job: $r"
	r=$(cs_ctl ${N}0 "ps_forget")
	grep -q '^ok' <<<"$r" || fail "ps_forget: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 100 4 8 0,1 mode=bogus")
	grep -q '^err option mode=bogus' <<<"$r" || fail "bad mode: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 100 4 8 0,1 pattern=x")
	grep -q '^err option pattern=x' <<<"$r" || fail "bad pattern: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 100 4 8 0,1 what")
	grep -q '^err option what' <<<"$r" || fail "bad option: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 100 4 8 0,1 dense=1")
	grep -q '^err dense=1' <<<"$r" || fail "dense, KPP != ROWS: $r"
	r=$(cs_ctl ${N}0 "ps_wait 10")
	grep -q '^err usage' <<<"$r" || fail "a refused job started: $r"
	# nothing broke: a job over every sidecar still runs right
	run_ps
	;;
ps_4x_async)
	run_ps --mode async
	grep -q '^ps ok .*mode=async ' <<<"$out" || fail "mode not async"
	;;
ps_4x_ssp)
	run_ps --mode ssp:1 --roles sbwb
	grep -q 'mode=ssp ' <<<"$out" || fail "mode not ssp"
	;;
ps_4x_bad_push)
	run_ps --bad-push --iters 5
	grep -q '^ps ok .* rejected=2 ' <<<"$out" || fail "refusals: $out"
	run_ps
	grep -q '^ps ok .* rejected=0 ' <<<"$out" || fail "after: $out"
	;;
ps_4x_bench)
	out=$("$CLI" bench -o ps -n 3 -w 1 --rows 2000 --keys-per-push 32 \
		--row-bytes 64,1024 --dense 64K --timeout 120000)
	rc=$?
	echo "$out"
	[ $rc -eq 0 ] || fail "bench -o ps: exit $rc"
	[ "$(grep -c '^ps-bench stack=collstack .* wrong=0 ' <<<"$out")" = 7 ] ||
		fail "bench -o ps: 7 lines with wrong=0 expected"
	# pushes ahead of a server's window are parked, not dropped; no
	# frame refused by the PS flow, no message refused at send, no pull
	# refused for a full parking (the dense line too)
	[ "$(grep -c '^ps-bench stack=collstack .* push_early=0 flow_bad=0 send_err=0 pull_busy=0 ' <<<"$out")" = 7 ] ||
		fail "bench -o ps: push_early=0 flow_bad=0 send_err=0 pull_busy=0 expected on the 7 lines"
	;;
ps_4x_spill)
	for m in sync async ssp:1; do
		run_ps --iters 20 --keys-per-push 64 --mode $m --budget 4096
		grep -q "^ps ok .* budget=4096\$" <<<"$out" ||
			fail "$m: budget not reported: $out"
		# each server: its shard exact, most of its rows on disk
		while read -r line; do
			sr=$(sed -n 's/.* shard_rows=\([0-9]*\).*/\1/p' <<<"$line")
			mr=$(sed -n 's/.* shard_mem_rows=\([0-9]*\).*/\1/p' <<<"$line")
			rd=$(sed -n 's/.* spill_rd=\([0-9]*\).*/\1/p' <<<"$line")
			rp=$(sed -n 's/.* spill_rd_push=\([0-9]*\).*/\1/p' <<<"$line")
			[ -n "$sr" ] && [ -n "$mr" ] && [ "$mr" -le 64 ] &&
				[ "$rd" -gt 0 ] || fail "$m: not spilled: $line"
			[ "$rp" -gt 0 ] ||
				fail "$m: no push's rows read while the lcore served on: $line"
		done < <(grep ' role=both ' <<<"$out")
		[ "$(grep -c ' role=both .* shard_wrong=0 ' <<<"$out")" = 4 ] ||
			fail "$m: 4 exact shards expected"
	done
	# held rows (from the sidecars' logs): most on disk
	for ((i = 0; i < 4; i++)); do
		line=$(grep "ps job: spill file $SD/.* removed" "${N}$i.log" | tail -1)
		echo "  n$i: ${line#* INFO }"
		held=$(sed -n 's/.* removed: \([0-9]*\) rows held.*/\1/p' <<<"$line")
		mem=$(sed -n 's/.* rows held, \([0-9]*\) in memory.*/\1/p' <<<"$line")
		[ -n "$held" ] && [ "$mem" -le 64 ] && [ $((2 * mem)) -lt "$held" ] ||
			fail "n$i: not mostly on disk: $line"
	done
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 5000 16 8 0,1 budget=1024")
	grep -q '^err mem_budget of 1024 bytes: 16 rows of 64 bytes, at least 64 a shard' <<<"$r" ||
		fail "16 rows' budget: $r"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 5000 16 8 0,1 budget=lots")
	grep -q '^err option budget=lots' <<<"$r" || fail "budget=lots: $r"
	mv "$SD" "$SD.gone"
	r=$(cs_ctl ${N}0 "ps_start 7 bb 5 5000 16 8 0,1 budget=4096")
	mv "$SD.gone" "$SD"
	grep -q "^err budget: no spill file in ps.spill_dir '$SD'" <<<"$r" ||
		fail "no spill folder: $r"
	r=$(cs_ctl ${N}0 "ps_wait 10")
	grep -q '^err usage' <<<"$r" || fail "a refused job started: $r"
	out=$("$CLI" bench -o ps -n 3 -w 1 --rows 5000 --keys-per-push 64 \
		--row-bytes 64 --dense 0 --budget 4096 --timeout 120000)
	rc=$?
	echo "$out"
	[ $rc -eq 0 ] || fail "bench -o ps --budget: exit $rc"
	[ "$(grep -c '^ps-bench stack=collstack .* wrong=0 .* budget=4096$' <<<"$out")" = 3 ] ||
		fail "bench -o ps --budget: 3 lines with wrong=0 expected"
	[ -z "$(ls -A "$SD")" ] || fail "files left in $SD: $(ls -A "$SD")"
	;;
*)
	fail "unknown case $CASE"
	;;
esac
echo "PASS: $CASE"
