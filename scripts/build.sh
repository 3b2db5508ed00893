#!/usr/bin/env bash
# Configures and builds fp8moe (Release) into build/; the binary is build/bin/fp8moe.
# Extra arguments go to CMake's configure step (e.g. -DFP8MOE_ENABLE_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${FP8MOE_JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >&2
cmake --build build -j "$jobs" >&2
