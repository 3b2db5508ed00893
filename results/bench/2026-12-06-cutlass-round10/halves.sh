#!/usr/bin/env bash
# Round 10, call 1: the half-width fold (CutlassFold::under_other_half, rows co/hv/...) on the device.
# test_kernels_cutlass (every built kernel bitwise the model, the two new ones included), then
# `fp8moe bench --no-quant --cutlass-tune --cutlass-only co/hv` (every tile walk of the two new
# kernels, each checked bitwise before it is timed, next to the backend's `cutlass` row and the
# cuBLASLt loop of the same run), then the backend's plain bench.
#   results/bench/2026-12-06-cutlass-round10/halves.sh PACK OUT_DIR
set -uo pipefail
pack=$1; out=$2
mkdir -p "$out"
tar -C "$pack" -xJf "$pack/gpu-bins.tar.xz"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; echo "pack $(cat "$pack/commit")"; git log -1 --format=%H 2>/dev/null; git status --short 2>/dev/null | head -20; } >"$out/device.log" 2>&1
timeout 300 "$pack/bin/test_kernels_cutlass" >"$out/test_kernels_cutlass.log" 2>&1
echo "TEST rc=$?" >>"$out/device.log"
timeout 240 "$pack/bin/fp8moe" bench --no-quant --cutlass-tune --cutlass-only co/hv --warmup 1 --runs 5 >"$out/tune_hv.log" 2>&1
echo "TUNE rc=$?" >>"$out/device.log"
date -u >>"$out/device.log"
