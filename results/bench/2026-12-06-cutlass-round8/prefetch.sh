#!/usr/bin/env bash
# Round 8, call 2 (not run: no machine started): prefetch-attempt.diff's kernels
# (build-gpu, packed with the diff applied) against the submitted ones (build-old) on the same
# machine: test_kernels_cutlass (every built kernel bitwise), then `fp8moe bench --no-quant` with
# the backend's kernels of both builds (each row next to the cuBLASLt loop); then ci.ini on
# cuda-cutlass with the new build (gate + compare --identical to the CPU baseline).
#   results/bench/2026-12-06-cutlass-round8/prefetch.sh NEW_PACK OLD_PACK OUT_DIR
set -uo pipefail
new=$1; old=$2; out=$3
mkdir -p "$out"
for p in "$new" "$old"; do tar -C "$p" -xJf "$p/gpu-bins.tar.xz"; done
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; echo "new $(cat "$new/commit")"; echo "old $(cat "$old/commit")"; } >"$out/device.log" 2>&1
timeout 240 "$new/bin/test_kernels_cutlass" >"$out/test_kernels_cutlass.log" 2>&1
echo "TEST rc=$?" >>"$out/device.log"
for who in new old; do
  d=${!who}
  timeout 150 "$d/bin/fp8moe" bench --no-quant --warmup 2 --runs 10 >"$out/bench_$who.log" 2>&1
  echo "BENCH $who rc=$?" >>"$out/device.log"
done
base=results/baselines/ci.h5
{
  timeout 120 "$new/bin/fp8moe" sweep scenarios/ci.ini --backend cuda-cutlass --runtime fake-gpu --out /tmp/ci_cutlass.h5 --force -q; echo "sweep rc=$?"
  "$new/bin/fp8moe" gate /tmp/ci_cutlass.h5 --baseline "$base"; echo "gate rc=$?"
  "$new/bin/fp8moe" compare "$base" /tmp/ci_cutlass.h5 --identical; echo "compare rc=$?"
} >"$out/sweep.log" 2>&1
echo "SWEEP $(tail -1 "$out/sweep.log")" >>"$out/device.log"
date -u >>"$out/device.log"
