#!/usr/bin/env bash
# Nsight Compute profiles of the cuda-cutlass kernels inside `fp8moe bench` (run on the GPU machine,
# after scripts/pack_gpu.sh's folder is unpacked). Each profile is one CUTLASS launch picked by
# its index among the bench's CUTLASS launches (--launch-skip), printed as text (the sections that
# name a limit: speed of light, compute pipes, memory, warp stalls, occupancy, launch).
#   scripts/gpu_profile.sh BIN_DIR RESULTS_DIR NAME:SKIP [NAME:SKIP ...]
# The bench makes 34 launches per timed row (1 check, 3 warm-up, 30 timed); see the README of the
# results/bench/ folder that quotes a profile for the skips it used.
set -uo pipefail
bin=$1
res=$2
shift 2
mkdir -p "$res"
sections=(SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis WarpStateStats SchedulerStats Occupancy LaunchStats)
args=()
for s in "${sections[@]}"; do args+=(--section "$s"); done
ncu --version >"$res/ncu_version.log" 2>&1
for spec in "$@"; do
  name=${spec%%:*}
  skip=${spec#*:}
  echo "== $(date -u +%FT%TZ) $name: CUTLASS launch $skip of fp8moe bench --no-quant" >"$res/ncu_$name.log"
  timeout 300 ncu --clock-control none --kill 1 -k regex:device_kernel --launch-skip "$skip" --launch-count 1 \
    "${args[@]}" "$bin/fp8moe" bench --no-quant >>"$res/ncu_$name.log" 2>&1
  echo "rc=$?" >>"$res/ncu_$name.log"
done
