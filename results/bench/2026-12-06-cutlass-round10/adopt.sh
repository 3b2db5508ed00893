#!/usr/bin/env bash
# Round 10, call 2: the backend with the half-width fold for bf16 wgrad (cutlass_choose). The GPU
# suites of the two tensor-core backends (test_kernels_cutlass: every built kernel and the
# backend's choice bitwise the model; test_kernels_cublaslt: its floor case now on normal data);
# ci.ini on cuda-cutlass (gate + compare --identical to the CPU baseline); the bench with the
# backend's rows next to the cuBLASLt loop (the previous wgrad kernel's rows are round 10's
# halves-h100 call); the cuBLASLt suite last (the device budget may cut it).
#   results/bench/2026-12-06-cutlass-round10/adopt.sh PACK OUT_DIR
set -uo pipefail
pack=$1; out=$2
mkdir -p "$out"
tar -C "$pack" -xJf "$pack/gpu-bins.tar.xz"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; echo "pack $(cat "$pack/commit")"; } >"$out/device.log" 2>&1
timeout 180 "$pack/bin/test_kernels_cutlass" >"$out/test_kernels_cutlass.log" 2>&1
echo "TEST cutlass rc=$? $(date -u +%T)" >>"$out/device.log"
base=results/baselines/ci.h5
{
  timeout 150 "$pack/bin/fp8moe" sweep scenarios/ci.ini --backend cuda-cutlass --runtime fake-gpu --out /tmp/ci_cutlass.h5 --force -q; echo "sweep rc=$?"
  "$pack/bin/fp8moe" gate /tmp/ci_cutlass.h5 --baseline "$base"; echo "gate rc=$?"
  "$pack/bin/fp8moe" compare "$base" /tmp/ci_cutlass.h5 --identical; echo "compare rc=$?"
} >"$out/sweep.log" 2>&1
echo "SWEEP $(grep -E 'rc=' "$out/sweep.log" | tr '\n' ' ') $(date -u +%T)" >>"$out/device.log"
timeout 150 "$pack/bin/fp8moe" bench --no-quant --warmup 2 --runs 10 >"$out/bench.log" 2>&1
echo "BENCH rc=$? $(date -u +%T)" >>"$out/device.log"
timeout 120 "$pack/bin/test_kernels_cublaslt" >"$out/test_kernels_cublaslt.log" 2>&1
echo "TEST cublaslt rc=$? $(date -u +%T)" >>"$out/device.log"
