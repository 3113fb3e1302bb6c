#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What packet authentication costs on a cluster: 64 MiB allreduces with
# auth.enable=0 and =1 alternating, a fresh cluster per line (docs/bench-auth.md).
#
#   scripts/bench-auth.sh [NODES...]   (default: 2 4; root)
#
# Environment: CS_AUTH_ROUNDS (3 off/on pairs per size), CS_AUTH_PORT
# (af_packet), CS_AUTH_MTU (9000), CS_AUTH_BYTES (64M), CS_AUTH_ITERS (3),
# CS_BUILD_DIR (build). Prints one line per run: time per operation,
# algbw/busbw, #wrong, retransmissions, the checker's verdict, and the
# sidecars' CPU seconds (utime + stime, all of them) over the run.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${CS_BUILD_DIR:-build}
CLI=$BUILD/tools/collstack
ROUNDS=${CS_AUTH_ROUNDS:-3}
PORT=${CS_AUTH_PORT:-af_packet}
MTU=${CS_AUTH_MTU:-9000}
BYTES=${CS_AUTH_BYTES:-64M}
ITERS=${CS_AUTH_ITERS:-3}
NODES=("$@")
[ ${#NODES[@]} -gt 0 ] || NODES=(2 4)
[ "$(id -u)" -eq 0 ] || { echo "bench-auth: needs root" >&2; exit 1; }
[ -x "$CLI" ] || { echo "bench-auth: not built: $CLI" >&2; exit 1; }
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT

cpu_of() { # utime + stime of the sidecars, in clock ticks
	local t=0 p
	for p in $(cat /run/collstack/csn*/pid 2>/dev/null); do
		read -ra f <"/proc/$p/stat" 2>/dev/null || continue
		t=$((t + f[13] + f[14]))
	done
	echo $t
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)" \
	"$PORT mtu $MTU $BYTES x $ITERS (+1 warm-up);" \
	"tags: $("$CLI" selftest | grep -o 'tag cost.*')"
for n in "${NODES[@]}"; do
	for r in $(seq "$ROUNDS"); do
		for a in 0 1; do
			scripts/cluster.sh up "$n" --port "$PORT" --mtu "$MTU" \
				--set auth.enable=$a \
				--set boot.token=bench-token-0123456789 \
				>/dev/null || { echo "cluster up failed"; exit 1; }
			c0=$(cpu_of) t0=$(date +%s.%N)
			out=$("$CLI" run allreduce --bytes "$BYTES" \
				--iters "$ITERS" 2>&1)
			c1=$(cpu_of) t1=$(date +%s.%N)
			scripts/cluster.sh down >/dev/null 2>&1
			row=$(grep -E '^ *[0-9]+ +[0-9]+ +f32' <<<"$out" | tail -1)
			if [ -z "$row" ]; then	# say why, keep going
				printf '%s nodes auth.enable=%s %s: no result: %s\n' \
					"$n" "$a" "$(date -u +%T)" \
					"$(grep -v '^#' <<<"$out" | tail -2 | tr '\n' ' ')"
				continue
			fi
			read -r _ _ _ _ tus alg bus wrong <<<"$row"
			printf '%s nodes auth.enable=%s %s loadavg %s: time_us=%s algbw=%s busbw=%s wrong=%s %s, %s | sidecars CPU %.2f s, wall %.2f s\n' \
				"$n" "$a" "$(date -u +%T)" \
				"$(cut -d' ' -f1 /proc/loadavg)" "$tus" "$alg" \
				"$bus" "$wrong" \
				"$(grep -o '[0-9]* retransmissions' <<<"$out" | tail -1)" \
				"$(grep -o 'Out of bounds values.*' <<<"$out" | tail -1)" \
				"$(echo "($c1 - $c0) / $(getconf CLK_TCK)" | bc -l)" \
				"$(echo "$t1 - $t0" | bc -l)"
		done
	done
done
