#!/usr/bin/env bash
# Round 12, call 1: the one-partial 192-wide mainloop with the cooperative tile's second warpgroup
# started a fold behind the first (CutlassFold::after_mma_offset, rows co/fo/...). `fp8moe bench
# --no-quant --cutlass-only co/fo` first (every tile walk of the two new kernels, each checked
# bitwise before it is timed, next to the backend's `cutlass` row and the cuBLASLt loop of the same
# run), then test_kernels_cutlass (every built kernel bitwise the model in three walks, 1-5
# k-blocks and at production size: the new ones included, each launched twice).
#   results/bench/2026-12-07-cutlass-round12/offset.sh PACK OUT_DIR
set -uo pipefail
pack=$1; out=$2
mkdir -p "$out"
tar -C "$pack" -xJf "$pack/gpu-bins.tar.xz"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; echo "pack $(cat "$pack/commit")"; git log -1 --format=%H 2>/dev/null; git status --short 2>/dev/null | head -20; } >"$out/device.log" 2>&1
timeout 200 "$pack/bin/fp8moe" bench --no-quant --cutlass-only co/fo --warmup 1 --runs 5 >"$out/tune_fo.log" 2>&1
echo "TUNE rc=$? $(date -u)" >>"$out/device.log"
timeout 150 "$pack/bin/test_kernels_cutlass" >"$out/test_kernels_cutlass.log" 2>&1
echo "TEST rc=$? $(date -u)" >>"$out/device.log"
