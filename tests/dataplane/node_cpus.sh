#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cs_node_cpus (scripts/lib/switch.sh), which places the nodes of a
# cluster on one machine (--cpus of cluster.sh, lib/netns.sh and
# bench-vs-mpi.sh): one CPU per node, round robin over the CPUs this shell
# may use or over a list; bad lists and CPUs outside the affinity refused.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/switch.sh
fail() { echo "FAIL: $*"; exit 1; }

allowed=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
first=${allowed%%[-,]*}
out=$(cs_node_cpus auto 4) || fail "auto refused (affinity $allowed)"
[ "$(wc -w <<<"$out")" = 4 ] || fail "auto for 4 nodes printed '$out'"
for c in $out; do
	[ "$(cs_node_cpus "$c" 1 2>/dev/null)" = "$c" ] ||
		fail "auto chose CPU $c, outside the affinity $allowed"
done
[ -z "$(cs_node_cpus none 4)" ] || fail "none printed CPUs"
[ "$(cs_node_cpus "$first" 3)" = "$first $first $first" ] ||
	fail "one CPU for 3 nodes: '$(cs_node_cpus "$first" 3)'"
[ "$(cs_node_cpus "$first-$first" 2)" = "$first $first" ] ||
	fail "a one-CPU range"
for bad in "" abc "0,abc" "0,-1" "3-1" "0,3-1" "1,,2" "0 1"; do
	cs_node_cpus "$bad" 2 >/dev/null 2>&1 && fail "'$bad' accepted"
done
# a CPU number no machine here has
err=$(cs_node_cpus 4095 2 2>&1 >/dev/null) && fail "CPU 4095 accepted"
grep -q "CPU 4095 is not one this shell may run on (allowed: $allowed)" <<<"$err" ||
	fail "CPU 4095: message '$err'"
echo "PASS: cs_node_cpus (affinity $allowed, auto for 4 nodes: $out)"
