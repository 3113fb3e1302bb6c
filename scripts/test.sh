#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run every default test suite and print "N passed, N failed[, N skipped]"
# counted from meson's own results (<build>/meson-logs/testlog.json).
#
#   build/        unit, sim, simlong and netns suites (netns needs root;
#                 skips else)
#   build-asan/   unit and sim suites under ASan+UBSan
#   build-fuzz/   the libFuzzer targets (clang), CS_FUZZ_SECONDS each (60)
#
#   CS_TEST_QUICK=1  only build/ (no sanitizer or fuzz builds)
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${CS_FUZZ_SECONDS:-60}
export CS_FUZZ_SECONDS=$FUZZ_SECONDS
logs=()

scripts/setup.sh || { echo "test: set-up failed"; echo "0 passed, 1 failed"; exit 1; }

run_suites() {	# build-dir suites...
	local dir=$1; shift
	local args=()
	for s in "$@"; do args+=(--suite "$s"); done
	rm -f "$dir/meson-logs/testlog.json"
	echo "== meson test -C $dir ${args[*]}"
	meson test -C "$dir" --print-errorlogs --num-processes 2 "${args[@]}"
	[ -f "$dir/meson-logs/testlog.json" ] && logs+=("$dir/meson-logs/testlog.json")
}

run_suites build unit sim simlong netns

if [ "${CS_TEST_QUICK:-0}" != 1 ]; then
	if [ ! -f build-asan/build.ninja ]; then
		meson setup build-asan -Dsanitizer=address,undefined \
			-Db_lundef=false -Ddpdk=disabled -Dcuda=disabled >/dev/null
	fi
	if ninja -C build-asan >/dev/null; then
		ASAN_OPTIONS=detect_leaks=1 run_suites build-asan unit sim
	else
		echo "test: ASan build failed"
		asan_build_failed=1
	fi
	if command -v clang >/dev/null; then
		if [ ! -f build-fuzz/build.ninja ]; then
			CC=clang meson setup build-fuzz -Dfuzz=enabled \
				-Dtests=disabled -Ddpdk=disabled -Dcuda=disabled \
				-Dverbs=disabled >/dev/null
		fi
		if ninja -C build-fuzz >/dev/null; then
			run_suites build-fuzz fuzz
		else
			echo "test: fuzz build failed"
			fuzz_build_failed=1
		fi
	fi
fi

read -r pass fail skip < <(python3 - "${logs[@]}" <<'PY'
import json, sys
p = f = s = 0
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line).get("result", "")
        if r in ("OK", "EXPECTEDFAIL"):
            p += 1
        elif r == "SKIP":
            s += 1
        else:
            f += 1
print(p, f, s)
PY
)
fail=$((fail + ${asan_build_failed:-0} + ${fuzz_build_failed:-0}))
if [ "$skip" -gt 0 ]; then
	echo "$pass passed, $fail failed, $skip skipped"
else
	echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
