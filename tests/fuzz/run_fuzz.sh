#!/bin/sh
# SPDX-License-Identifier: MIT
# Run one fuzz target over a fresh seed corpus.
#
#   run_fuzz.sh fuzz   FUZZER SEEDGEN   libFuzzer for $CS_FUZZ_SECONDS (60)
#   run_fuzz.sh replay DRIVER SEEDGEN   seeds + seeded mutations, no libFuzzer
#
# SEEDGEN DIR writes valid frames into DIR. CS_FUZZ_CORPUS names a folder to
# keep the grown corpus in (default: a temporary one, removed afterwards);
# crash inputs go to $CS_FUZZ_ARTIFACTS (default ./fuzz-artifacts/ in the
# test's working directory). Exit status is non-zero on any failure.
set -u

mode=${1:-}
target=${2:-}
seedgen=${3:-}
if [ -z "$mode" ] || [ ! -x "$target" ] || [ ! -x "$seedgen" ]; then
	echo "usage: $0 fuzz|replay TARGET SEEDGEN" >&2
	exit 2
fi

# meson may hand over paths relative to the working directory
case $target in /*) ;; *) target=$PWD/$target ;; esac
case $seedgen in /*) ;; *) seedgen=$PWD/$seedgen ;; esac

secs=${CS_FUZZ_SECONDS:-60}
case $secs in
'' | *[!0-9]*)
	echo "run_fuzz: CS_FUZZ_SECONDS must be a number of seconds" >&2
	exit 2
	;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cs-fuzz.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
seeds=$tmp/seeds
mkdir "$seeds" || exit 2
"$seedgen" "$seeds" || { echo "run_fuzz: seed generator failed" >&2; exit 2; }

if [ "$mode" = replay ]; then
	exec "$target" -n "${CS_FUZZ_REPLAY_ITERS:-100000}" "$seeds"/*
fi

corpus=${CS_FUZZ_CORPUS:-$tmp/corpus}
artifacts=${CS_FUZZ_ARTIFACTS:-$PWD/fuzz-artifacts}
mkdir -p "$corpus" "$artifacts" || exit 2

# The watchdog bounds the run, so meson's own timeout can stay off.
timeout -k 10 $((secs + 120)) "$target" \
	-max_total_time="$secs" -print_final_stats=1 -max_len=9200 \
	-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" \
	"$corpus" "$seeds"
rc=$?
if [ $rc -ne 0 ]; then
	echo "run_fuzz: $(basename "$target") failed (exit $rc);" \
		"inputs in $artifacts" >&2
fi
exit $rc
