#!/usr/bin/env bash
# Every test on a fresh machine: install dependencies, build, run all CTest suites (GPU suites
# skip visibly with exit code 77 where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
jobs=${FP8MOE_JOBS:-$(nproc)}
ctest --test-dir build --output-on-failure -j "$jobs" "$@"
