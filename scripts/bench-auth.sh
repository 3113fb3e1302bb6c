#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What packet authentication costs (docs/bench-auth.md), in one run:
#
# 1. per frame, one core: `collstack selftest`'s tag loops (cs_gmac_tag
#    and cs_auth_ctx_tag, what sidecar/frame_auth.c calls for every frame
#    sent and received: AES-256-GMAC from libcrypto, SipHash-2-4-128 from
#    libsodium) CS_AUTH_SELFTESTS times, each line as ns per 8896-byte
#    frame, GB/s per core and ns per pure ACK, then the best of them per
#    tag code (load only ever slows a run down);
# 2. 64 MiB allreduces with auth.enable=0 and =1 back to back (off, on,
#    off, on ...; with CS_AUTH_MACS="auto siphash": off, on with
#    auth.mac=auto, on with auth.mac=siphash ...), a fresh cluster per
#    line, then the medians and what authentication costs of busbw.
#
#   scripts/bench-auth.sh [NODES...]   (default: 4; root)
#
# With CS_AUTH_BUILDS="DIR_A DIR_B" (build directories, e.g. one of the
# commit before a change and one of the change) both parts run for each
# build in turn, alternating (A off, A on, B off, B on, A off ...), every
# line says which build, and the medians and the cost come per build.
#
# Environment: CS_AUTH_ROUNDS (2 off/on pairs per size; 0: per frame only),
# CS_AUTH_BUILDS (build directories to compare, default CS_BUILD_DIR),
# CS_AUTH_MACS (auth.mac values of the "on" runs, default "auto"), CS_AUTH_PORT
# (af_packet), CS_AUTH_MTU (9000), CS_AUTH_BYTES (64M), CS_AUTH_ITERS (3),
# CS_AUTH_SELFTESTS (5), CS_BUILD_DIR (build), CS_CLUSTER (namespace
# prefix, as scripts/cluster.sh). Prints one line per run: time per
# operation, algbw/busbw, #wrong, retransmissions, the checker's verdict,
# and the sidecars' CPU seconds (utime + stime, all of them) over the run;
# every line carries the 1-minute load average (figures go to
# BENCHMARKS.md only from a quiet machine).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${CS_BUILD_DIR:-build}
read -ra BUILDS <<<"${CS_AUTH_BUILDS:-$BUILD}"
ROUNDS=${CS_AUTH_ROUNDS:-2}
SELFTESTS=${CS_AUTH_SELFTESTS:-5}
P=${CS_CLUSTER:-cs}
if [ "$P" != cs ]; then	# the CLI finds the cluster through its state file
	export CS_CLUSTER_ENV=/run/collstack/cluster-$P.env
fi
PORT=${CS_AUTH_PORT:-af_packet}
MTU=${CS_AUTH_MTU:-9000}
BYTES=${CS_AUTH_BYTES:-64M}
ITERS=${CS_AUTH_ITERS:-3}
read -ra MACS <<<"${CS_AUTH_MACS:-auto}"
NODES=("$@")
[ ${#NODES[@]} -gt 0 ] || NODES=(4)
[ "$(id -u)" -eq 0 ] || { echo "bench-auth: needs root" >&2; exit 1; }
for b in "${BUILDS[@]}"; do
	[ -x "$b/tools/collstack" ] && [ -x "$b/sidecar/collstackd" ] ||
		{ echo "bench-auth: not built: $b" >&2; exit 1; }
done
# "[DIR] " before every line when builds are compared, else nothing
tagof() { [ ${#BUILDS[@]} -gt 1 ] && printf '[%s] ' "$1"; true; }
SUM=$(mktemp)
trap 'scripts/cluster.sh down >/dev/null 2>&1; rm -f "$SUM" "$SUM.frame"' EXIT

cpu_of() { # utime + stime of the sidecars, in clock ticks
	local t=0 p
	for p in $(cat /run/collstack/${P}n*/pid 2>/dev/null); do
		read -ra f <"/proc/$p/stat" 2>/dev/null || continue
		t=$((t + f[13] + f[14]))
	done
	echo $t
}

load() { cut -d' ' -f1 /proc/loadavg; }

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)" \
	"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs," \
	"loadavg $(load)"
[ ${#BUILDS[@]} -gt 1 ] && echo "# builds compared, in turn: ${BUILDS[*]}"
echo "# per frame, one core (collstack selftest's tag loops):"
for _ in $(seq "$SELFTESTS"); do
	for b in "${BUILDS[@]}"; do
		"$b/tools/collstack" selftest | grep -o 'tag cost.*' |
		sed 's/, auth.mac=auto//' |
		awk -v l="$(load)" -v t="$(tagof "$b")" '
		{	# tag cost (CODE): U us per B-byte payload (M MB/s), A us per pure ACK
			code = $3; gsub(/[():]/, "", code)
			u = $4; b = $7; sub(/-byte/, "", b); a = $11
			printf "%stag (%s): %.0f ns per %d-byte frame = %.2f GB/s per core; %.0f ns per pure ACK (loadavg %s)\n", \
				t, code, u * 1000, b, b / (u * 1000), a * 1000, l
		}'
	done
done | tee "$SUM.frame"
# the least disturbed run per code (other jobs only ever make a run slower)
for b in "${BUILDS[@]}"; do
	t=$(tagof "$b")
	for code in $(grep -F -- "$t" "$SUM.frame" |
		grep -o 'tag ([^)]*)' | sort -u | tr -d '()' | cut -d' ' -f2); do
		grep -F -- "$t" "$SUM.frame" | grep -F "tag ($code)" |
			sort -n -t: -k2 | head -1 |
			sed 's/tag /best of '"$SELFTESTS"': /'
	done
done
rm -f "$SUM.frame"
echo "# $PORT mtu $MTU, allreduce $BYTES x $ITERS (+1 warm-up), auth off/on (auth.mac ${MACS[*]}) back to back:"
RUNS=()	# one round: BUILD|0 BUILD|MAC ... per build, in turn
for b in "${BUILDS[@]}"; do
	for a in 0 "${MACS[@]}"; do
		RUNS+=("$b|$a")
	done
done
for n in "${NODES[@]}"; do
	for r in $(seq "$ROUNDS"); do
		for run in "${RUNS[@]}"; do
			b=${run%|*} a=${run##*|}
			CLI=$b/tools/collstack
			export CS_BUILD_DIR=$b	# scripts/cluster.sh's collstackd
			set -- --set auth.enable=0
			[ "$a" = 0 ] || set -- --set auth.enable=1 --set auth.mac="$a"
			scripts/cluster.sh up "$n" --port "$PORT" --mtu "$MTU" \
				"$@" --set boot.token=bench-token-0123456789 \
				>/dev/null || { echo "cluster up failed"; exit 1; }
			c0=$(cpu_of) t0=$(date +%s.%N)
			out=$("$CLI" run allreduce --bytes "$BYTES" \
				--iters "$ITERS" 2>&1)
			c1=$(cpu_of) t1=$(date +%s.%N)
			scripts/cluster.sh down >/dev/null 2>&1
			row=$(grep -E '^ *[0-9]+ +[0-9]+ +f32' <<<"$out" | tail -1)
			[ "$a" = 0 ] && what="auth.enable=0" ||
				what="auth.enable=1 auth.mac=$a"
			if [ -z "$row" ]; then	# say why, keep going
				printf '%s%s nodes %s %s: no result: %s\n' \
					"$(tagof "$b")" "$n" "$what" "$(date -u +%T)" \
					"$(grep -v '^#' <<<"$out" | tail -2 | tr '\n' ' ')"
				continue
			fi
			read -r _ _ _ _ tus alg bus wrong <<<"$row"
			printf '%s%s nodes %s %s loadavg %s: time_us=%s algbw=%s busbw=%s wrong=%s %s, %s | sidecars CPU %.2f s, wall %.2f s\n' \
				"$(tagof "$b")" "$n" "$what" "$(date -u +%T)" \
				"$(cut -d' ' -f1 /proc/loadavg)" "$tus" "$alg" \
				"$bus" "$wrong" \
				"$(grep -o '[0-9]* retransmissions' <<<"$out" | tail -1)" \
				"$(grep -o 'Out of bounds values.*' <<<"$out" | tail -1)" \
				"$(echo "($c1 - $c0) / $(getconf CLK_TCK)" | bc -l)" \
				"$(echo "$t1 - $t0" | bc -l)"
			echo "$n $a $bus $b" >>"$SUM"
		done
	done
done
# medians of busbw per node count, off and on (per auth.mac), and the cost
awk '
function median(s,   v, k, i, j, t) {
	k = split(s, v, " ")
	for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
		if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
	return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
}
{ k = $4 " " $1; b[k " " $2] = b[k " " $2] " " $3; seen[k] = 1
  if ($2 != "0") mac[$2] = 1 }
END {
	for (k in seen) for (m in mac) {
		if (b[k " 0"] == "" || b[k " " m] == "") continue
		split(k, f, " ")
		off = median(b[k " 0"]); on = median(b[k " " m])
		cost = off > 0 ? (off - on) / off * 100 : 0
		printf "%s%s nodes, auth.mac=%s: median busbw off %.3f GB/s, on %.3f GB/s: authentication costs %.1f %% of busbw\n", \
			multi ? "[" f[1] "] " : "", f[2], m, off, on, cost
	}
}' multi=$((${#BUILDS[@]} > 1)) "$SUM"
