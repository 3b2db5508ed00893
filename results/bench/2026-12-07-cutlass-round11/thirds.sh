#!/usr/bin/env bash
# Round 11, call 1: the third-width fold with A from registers (CutlassFold::under_other_third,
# rows co/t3/...) on the device. `fp8moe bench --no-quant --cutlass-only co/t3` first (every tile
# walk of the two new kernels, each checked bitwise before it is timed, next to the backend's
# `cutlass` row and the cuBLASLt loop of the same run), then test_kernels_cutlass (every built
# kernel bitwise the model in three walks, 1-5 k-blocks and at production size: the new ones, and
# the others after their chains' issue was made one helper), then test_kernels_cublaslt's cases
# but the production-size one.
#   results/bench/2026-12-07-cutlass-round11/thirds.sh PACK OUT_DIR
set -uo pipefail
pack=$1; out=$2
mkdir -p "$out"
tar -C "$pack" -xJf "$pack/gpu-bins.tar.xz"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; echo "pack $(cat "$pack/commit")"; git log -1 --format=%H 2>/dev/null; git status --short 2>/dev/null | head -20; } >"$out/device.log" 2>&1
timeout 240 "$pack/bin/fp8moe" bench --no-quant --cutlass-only co/t3 --warmup 1 --runs 5 >"$out/tune_t3.log" 2>&1
echo "TUNE rc=$? $(date -u)" >>"$out/device.log"
timeout 280 "$pack/bin/test_kernels_cutlass" >"$out/test_kernels_cutlass.log" 2>&1
echo "TEST rc=$? $(date -u)" >>"$out/device.log"
# test_kernels_cublaslt without its production-size case (which round 10's 120 s cut short): its
# floor case on normal data, which no device ran since round 10 changed it.
timeout 150 "$pack/bin/test_kernels_cublaslt" --test-case-exclude="production and bench shapes*" >"$out/test_kernels_cublaslt.log" 2>&1
echo "TEST cublaslt rc=$? $(date -u)" >>"$out/device.log"
