#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# scripts/bench-vs-mpi.sh --ops alltoallv on 4 namespaces (one short rep,
# 256K and 1M, clean, offloads on): both stacks give a row per size with
# no wrong element, both moved the count matrix of tools/zipf_split.h
# (the script compares the "# counts" lines of both sides' logs, and the
# 1 MiB matrix is the Zipf 1.1, seed 1 one of test_zipf_split), and the
# goals line of issue 23 has both figures; a differing matrix in one
# side's log is reported (--report-only). No timing is asserted. Then
# a bad --a2av-skew is refused with a clear error. Needs root, mpirun and
# cs-mpi-bench (77 otherwise). CS_CLUSTER: the namespaces' prefix
# (default bva).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${CS_BUILD_DIR:-build}
export CS_BUILD_DIR=$B CS_CLUSTER=${CS_CLUSTER:-bva}
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v mpirun >/dev/null && [ -x "$B/tools/cs-mpi-bench" ] ||
	{ echo "SKIP: no mpirun or cs-mpi-bench"; exit 77; }
OUT=$(mktemp -d /tmp/bench-vs-mpi-a2av.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
timeout 500 scripts/bench-vs-mpi.sh --quick --reps 1 --ops alltoallv \
	--conds clean --sizes 256K:1M --offload on --no-plots --out "$OUT" \
	>"$OUT/run.out" 2>&1 || { cat "$OUT/run.out"; fail "rc $?"; }
txt=$OUT/bench-vs-mpi.txt
for s in collstack mpi; do
	for z in 262144 1048576; do
		grep -q "^clean/on,1,$s,alltoallv,$z,out,.*,0,[0-9.]*,[0-9.]*,[0-9.NA]*\$" \
			"$OUT/bench-vs-mpi-raw.csv" ||
			{ cat "$OUT/run.out"; fail "$s: no clean row of $z B with #wrong 0"; }
	done
done
want=$("$B/tests/tools/test_zipf_split" 1048576 4 1.1 1 | cut -d/ -f1 |
	cut -d: -f2 | awk '{ $1 = $1; print }')
grep -q "alltoallv count matrices (tools/zipf_split.h): the same on both sides, 2 sizes; 1M: every rank sends ($want) f32" "$txt" ||
	{ cat "$txt"; fail "the two sides' matrices: not the same, or not Zipf 1.1 seed 1 ($want)"; }
grep -Eq "^#   clean/on +alltoallv 1M busbw: collstack [0-9.]+, Open MPI [0-9.]+ GB/s, bw x [0-9.]+ \(goal >= 1.5: (met|not met)\)" "$txt" ||
	{ cat "$txt"; fail "no goals line for alltoallv 1M"; }
grep "alltoallv 1M busbw\|count matrices" "$txt" | sed 's/^/  /'
# A matrix that differs on one side is reported (--report-only redoes
# the table from the same logs)
echo "# counts 1048576: 1 2 3 4 / 1 2 3 4 / 1 2 3 4 / 1 2 3 4" >> \
	"$(ls "$OUT"/logs/*-collstack-alltoallv-*.log | grep -v stats | head -n 1)"
scripts/bench-vs-mpi.sh --report-only --no-plots --out "$OUT" >/dev/null 2>&1 ||
	fail "--report-only: rc $?"
grep -q "alltoallv count matrices: DIFFER between the sides" "$txt" ||
	{ cat "$txt"; fail "a matrix that differs was not reported"; }
err=$(scripts/bench-vs-mpi.sh --ops alltoallv --a2av-skew x 2>&1) &&
	fail "--a2av-skew x ran"
grep -q "bench-vs-mpi: --a2av-skew wants a number from 0 to 16" <<<"$err" ||
	fail "--a2av-skew x: '$err'"
echo "PASS: bench-vs-mpi.sh --ops alltoallv (both stacks, the same matrix, goals line)"
