#!/usr/bin/env bash
# Configures and builds fp8moe (Release) into build/; the binary is build/bin/fp8moe.
# Extra arguments go to CMake's configure step (e.g. -DFP8MOE_ENABLE_CUDA=OFF).
# FP8MOE_TARGETS: build only these targets (scripts/run.sh builds just `fp8moe`, not the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${FP8MOE_JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >&2
if [[ -n ${FP8MOE_TARGETS:-} ]]; then
  # shellcheck disable=SC2086
  cmake --build build -j "$jobs" --target $FP8MOE_TARGETS >&2
else
  cmake --build build -j "$jobs" >&2
fi
