#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: set up this machine (packages, hugepages, build), then run
# collstack's checks and benchmarks on it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo
build/tools/collstack selftest
