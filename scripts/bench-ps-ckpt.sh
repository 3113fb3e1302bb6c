#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A trainer table's checkpoint while its pushes go on, through a sidecar
# (docs/ps.md, "Trainer tables: checkpoints"; issue 24: "a checkpoint of a
# 1 GiB shard slows pushes by less than 10 % while it runs").
#
#   scripts/bench-ps-ckpt.sh [--mb MB] [--share S[,S...]] [--trainers T]
#                            [--secs S] [--dim D] [--kpp P]
#
# For each ps.ckpt_share S (default 0.05, the sidecar's default): one
# collstackd on the loop port (no root, no namespaces) with
# ps.ckpt_share=S, T trainers on it (default 2) running
# cs-ps-ckpt-bench: an async table of MB MiB (default 1024) of rows of D
# f32 values (256: 1 KiB) filled, then pushes of P random keys (256) back
# to back, counted S seconds before, while cs_ps_checkpoint runs, and S
# seconds after (default 5). Prints the trainers' line
#   ps_ckpt_bench ... before_rows_per_s= during_rows_per_s= after_rows_per_s= ckpt_s= slowdown_pct=
# with the load average before each. The checkpoint goes to a fresh
# folder under ${TMPDIR:-/tmp}, removed at the end. Needs a build
# (build/, or CS_BUILD_DIR; CS_DAEMON: another collstackd, e.g. of an
# older commit, for a before/after) and about 3 x MB MiB of memory and MB
# MiB of disk.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
DAEMON=${CS_DAEMON:-$BUILD/sidecar/collstackd}
CLI=$BUILD/tools/collstack
BENCH=$BUILD/tests/ps/cs-ps-ckpt-bench

mb=1024 shares=0.05 trainers=2 secs=5 dim=256 kpp=256
while [ $# -gt 0 ]; do
	case $1 in
	--mb) mb=$2 ;;
	--share) shares=$2 ;;
	--trainers) trainers=$2 ;;
	--secs) secs=$2 ;;
	--dim) dim=$2 ;;
	--kpp) kpp=$2 ;;
	*) echo "usage: $0 [--mb MB] [--share S[,S...]] [--trainers T]" \
		"[--secs S] [--dim D] [--kpp P]" >&2; exit 2 ;;
	esac
	shift 2
done
for b in "$DAEMON" "$CLI" "$BENCH"; do
	[ -x "$b" ] || { echo "bench-ps-ckpt: not built: $b" >&2; exit 1; }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/cs-ps-ckpt.XXXXXX")
pid=
stop() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	pid=
}
trap 'stop; rm -rf "$dir"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git rev-parse --short HEAD 2>/dev/null)" \
	"cpus: $(nproc) trainers: $trainers table: $mb MiB, rows of" \
	"$((dim * 4)) bytes, $kpp keys per push, windows of $secs s"
echo "# $0 --mb $mb --share $shares --trainers $trainers --secs $secs" \
	"--dim $dim --kpp $kpp"
rc=0
for share in ${shares//,/ }; do
	rm -rf "${dir:?}"/*
	mkdir -p "$dir/ckpt"
	"$DAEMON" --set name=l0 --set run_dir="$dir/l0" --set port.type=loop \
		--set coll.deadline=120s --set "ps.ckpt_share=$share" \
		</dev/null >"$dir/l0.log" 2>&1 &
	pid=$!
	for _ in $(seq 300); do
		[ -f "$dir/l0/ready" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if [ ! -f "$dir/l0/ready" ]; then
		echo "bench-ps-ckpt: collstackd did not start:"
		tail -20 "$dir/l0.log"
		exit 1
	fi
	printf 'CS_NODES="l0"\nCS_RUN=%s\n' "$dir" >"$dir/cluster.env"
	echo "# ps.ckpt_share=$share load: $(cut -d' ' -f1-3 /proc/loadavg)"
	out=$(timeout 1800 "$CLI" launch --no-netns -T "$trainers" \
		--cluster "$dir/cluster.env" --timeout 1700 --all-output -- \
		"$BENCH" "$dir/ckpt" --mb "$mb" --dim "$dim" --kpp "$kpp" \
		--secs "$secs" 2>&1)
	r=$?
	line=$(grep '^ps_ckpt_bench ' <<<"$out")
	if [ $r -ne 0 ] || [ -z "$line" ]; then
		echo "$out" | tail -20
		echo "bench-ps-ckpt: share $share failed (exit $r)"
		rc=1
	else
		echo "$line share=$share"
	fi
	stop
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
