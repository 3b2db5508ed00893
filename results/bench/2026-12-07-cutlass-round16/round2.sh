#!/usr/bin/env bash
# Round 16, second call (issue 19): ncu warp-state sampling of two more kernels at the anchor
# (4, 8192, 4096, 7168), each its timed launch, read with scripts/ncu_stalls.py:
#   hvfwd: the half-width fold (co/hv/N1, act_weight) in fwd: the second launch (the timed one) of
#          FoldMainloop<..., ScaleKind act_weight, kHalves true> (mangled ...ScaleKindE0ELb1E...);
#   wgrad: the backend's wgrad kernel (hv, act_act): the second launch of ...ScaleKindE1E....
# Where the mangled pattern matches nothing, the launch is counted instead: hvfwd launch 4 of any
# FoldMainloop (fwd's backend check, timed, re-init, then co/hv/N1's check and timed call), wgrad
# launch 11. The details page names the profiled kernel's template arguments.
#   results/bench/2026-12-07-cutlass-round16/round2.sh build-gpu "$OUT"
set -uo pipefail
pack=$1
out=$2
bin=$pack/bin
mkdir -p "$out"
tar -C "$pack" -xJf "$pack/gpu-bins.tar.xz"
{ echo "# pack commit $(cat "$pack/commit")"; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv; } >"$out/device.log"
profile() {  # name regex skip
  timeout 90 ncu --clock-control none --kernel-name-base mangled -k "regex:$2" --launch-skip "$3" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis --kill 1 \
    -o "$out/$1" "$bin/fp8moe" bench --no-quant --shape 4,8192,4096,7168 --cutlass-only co/hv/N1 --warmup 0 --runs 1 \
    >"$out/$1-run.log" 2>&1
  echo "$1 ncu ($2, skip $3) rc=$?"
}
for job in "wgrad:FoldMainloop.*ScaleKindE1E:11" "hvfwd:FoldMainloop.*ScaleKindE0ELb1E:4"; do
  IFS=: read -r name regex skip <<<"$job"
  profile "$name" "$regex" 1
  [[ -f $out/$name.ncu-rep ]] || profile "$name" FoldMainloop "$skip"
  {
    ncu -i "$out/$name.ncu-rep" --page details
    echo "## the profiled bench's console (tail)"
    tail -40 "$out/$name-run.log"
  } >"$out/$name-details.txt" 2>&1
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.csv" 2>&1
  python3 scripts/ncu_stalls.py "$out/$name.csv" >"$out/${name}_stalls.md" 2>&1
  echo "$name stalls rc=$?"
  xz -9 "$out/$name.csv"
  rm -f "$out/$name.ncu-rep" "$out/$name-run.log"
done
ls -la "$out"
