#!/usr/bin/env bash
# Round 8, call 1 (commit in build-gpu/commit): ci.ini on cuda-cutlass (gate + compare --identical)
# and per-instruction warp-stall sampling of the backend's fwd (128x192 one-partial) and wgrad
# (128x128 two-partial) kernels at (E, Me, N, K) = (4, 8192, 4096, 7168) under ncu.
#   results/bench/2026-12-06-cutlass-round8/stalls.sh PACK_DIR OUT_DIR
set -uo pipefail
pack=$1; out=$2; B=$pack/bin
mkdir -p "$out"
tar -C "$pack" -xJf "$pack/gpu-bins.tar.xz"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; echo "commit $(cat "$pack/commit")"; ncu --version | tail -1; } >"$out/device.log" 2>&1
base=results/baselines/ci.h5
{
  "$B/fp8moe" sweep scenarios/ci.ini --backend cuda-cutlass --runtime fake-gpu --out /tmp/ci_cutlass.h5 --force -q; echo "sweep rc=$?"
  "$B/fp8moe" gate /tmp/ci_cutlass.h5 --baseline "$base"; echo "gate rc=$?"
  "$B/fp8moe" compare "$base" /tmp/ci_cutlass.h5 --identical; echo "compare rc=$?"
} >"$out/sweep.log" 2>&1
echo "SWEEP done $(tail -1 "$out/sweep.log")" >>"$out/device.log"
# launches of the backend's kernels in `fp8moe bench --no-quant --warmup 0 --runs 1`: 3 per shape and pass,
# shapes in bench order; (4,8192,4096,7168) is the third: fwd 18-20, dgrad 21-23, wgrad 24-26.
for spec in fwd:19 wgrad:25; do
  name=${spec%%:*}; skip=${spec#*:}
  timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:FoldMainloop --launch-skip "$skip" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
    --kill 1 -o "/tmp/$name" "$B/fp8moe" bench --no-quant --warmup 0 --runs 1 >"$out/ncu_$name.log" 2>&1
  echo "ncu $name rc=$?" >>"$out/device.log"
  ncu -i "/tmp/$name.ncu-rep" --print-details all >>"$out/ncu_$name.log" 2>&1
  ncu -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass >"/tmp/${name}_sass.csv" 2>&1
  echo "source $name rc=$? $(wc -l < /tmp/${name}_sass.csv) lines" >>"$out/device.log"
  xz -9 -c "/tmp/${name}_sass.csv" >"$out/${name}_sass.csv.xz"
done
date -u >>"$out/device.log"
