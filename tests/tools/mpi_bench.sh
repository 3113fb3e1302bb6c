#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cs-mpi-bench -o alltoall and -o alltoallv on this machine (mpirun, no
# namespaces): every row checked (#wrong 0: every element of every
# warm-up iteration compared), the columns of cs-trainer-bench (redop
# none, root -1, out-of-place rows only), busbw = algbw x (n-1)/n; a rank
# count that does not divide the size (3 ranks) and an unknown op.
# alltoallv: the "# counts" matrix of every size is the one
# tools/zipf_split.h gives (test_zipf_split prints it; cs-trainer-bench
# prints the same), with the default Zipf 1.1, seed 1 and with
# --zipf-skew 0 (even blocks) / --zipf-skew 2 --zipf-seed 5. sendrecv
# on 2 and 4 ranks (4100..65600 bytes: counts the rank count does not
# divide, kept whole), busbw = algbw, every element checked; 3 ranks
# refused.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${CS_BUILD_DIR:-build}/tools/cs-mpi-bench
Z=${CS_BUILD_DIR:-build}/tests/tools/test_zipf_split
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$B" ] || fail "$B not built"
[ -x "$Z" ] || fail "$Z not built"
run() {	# ranks op [args...] -> rows on stdout
	local np=$1 op=$2
	shift 2
	timeout 240 mpirun --allow-run-as-root --oversubscribe -np "$np" \
		--bind-to none --mca mpi_yield_when_idle 1 \
		"$B" -o "$op" -b 4K -e 256K -f 4 -n 3 -w 2 "$@" 2>&1 |
		grep -v 'setpgid.*failed in parent'
}
counts_ok() {	# ranks skew seed output: its matrices are zipf_split's
	local want z
	want=$(for z in 4096 16384 65536 262144; do "$Z" $z "$1" "$2" "$3"; done)
	[ "$(grep '^# counts' <<<"$4")" = "$want" ] ||
		fail "alltoallv on $1 ranks, skew $2 seed $3: matrices differ from zipf_split's: want
$want
got: $4"
}
for np in 4 3; do
	for op in alltoall alltoallv; do
		out=$(run $np $op) || fail "$op on $np ranks: rc $?: $out"
		grep -q "^# op $op ranks $np, timing b2b" <<<"$out" ||
			fail "$op on $np ranks: no header: $out"
		rows=$(awk '$1 ~ /^[0-9]+$/' <<<"$out")
		[ "$(wc -l <<<"$rows")" = 4 ] ||
			fail "$op on $np ranks: want 4 rows (4K..256K, out of place): $out"
		awk -v n=$np -v op=$op '{
			if ($4 != "none" || $5 != -1 || $12 != "out") bad = bad " columns " $0
			if ($9 != 0) bad = bad " wrong " $0
			if ($2 != int($1 / 4) || $2 % n) bad = bad " count " $0
			# busbw = algbw (n-1)/n, to the printed rounding
			d = $8 - $7 * (n - 1) / n
			if (d > 0.0015 || d < -0.0015) bad = bad " busbw " $0
		} END { if (bad != "") { print op ":" bad; exit 1 } }' <<<"$rows" ||
			fail "$op on $np ranks: $out"
		[ $op = alltoall ] || counts_ok $np 1.1 1 "$out"
	done
done
for a in "0 1" "2 5"; do
	set -- $a
	out=$(run 4 alltoallv --zipf-skew "$1" --zipf-seed "$2") ||
		fail "alltoallv --zipf-skew $1 --zipf-seed $2: rc $?: $out"
	awk '$1 ~ /^[0-9]+$/ && $9 != 0 { exit 1 }' <<<"$out" ||
		fail "alltoallv --zipf-skew $1: wrong elements: $out"
	counts_ok 4 "$1" "$2" "$out"
	[ "$1" != 0 ] || grep -q '^# counts 4096: 256 256 256 256 / ' <<<"$out" ||
		fail "--zipf-skew 0: blocks not even: $out"
done
# sendrecv: pairs (i, i + n/2), size each way, every element checked;
# busbw = algbw = size / time, count not rounded to the ranks; odd refused
for np in 2 4; do
	out=$(run $np sendrecv -b 4100 -e 65600) || fail "sendrecv on $np ranks: rc $?: $out"
	grep -q "^# op sendrecv ranks $np, timing b2b" <<<"$out" ||
		fail "sendrecv on $np ranks: no header: $out"
	rows=$(awk '$1 ~ /^[0-9]+$/' <<<"$out")
	[ "$(wc -l <<<"$rows")" = 3 ] ||
		fail "sendrecv on $np ranks: want 3 rows (4100..65600, out of place): $out"
	awk '{
		if ($4 != "none" || $5 != -1 || $12 != "out") bad = bad " columns " $0
		if ($9 != 0) bad = bad " wrong " $0
		if ($2 != $1 / 4) bad = bad " count " $0
		if ($8 != $7) bad = bad " busbw " $0
	} END { if (bad != "") { print "sendrecv:" bad; exit 1 } }' <<<"$rows" ||
		fail "sendrecv on $np ranks: $out"
done
err=$(run 3 sendrecv) && fail "sendrecv on 3 ranks ran: $err"
grep -q "needs an even number of ranks, not 3" <<<"$err" ||
	fail "sendrecv on 3 ranks: '$err'"
err=$(run 2 nosuchop) && fail "an unknown op ran: $err"
grep -q "mpi_bench: unknown op nosuchop" <<<"$err" || fail "unknown op: '$err'"
echo "PASS: cs-mpi-bench alltoall, alltoallv (4 and 3 ranks; the matrices of tools/zipf_split.h), sendrecv (2 and 4 ranks; 3 refused), unknown op refused"
