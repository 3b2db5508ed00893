#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, and run fp8moe on the built-in
# default (torchao's padded op-level case, every pass and mode). Arguments are passed to
# `fp8moe gemm`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/bin/fp8moe gemm "$@"
