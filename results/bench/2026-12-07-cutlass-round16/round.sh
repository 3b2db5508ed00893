#!/usr/bin/env bash
# Round 16 (issue 19), one device call: where the backend's fwd kernel loses its last 20 %.
#   results/bench/2026-12-07-cutlass-round16/round.sh build-gpu "$OUT"
# 1. fp8moe-fold-probe (gpu_round.sh probe): the unfolded ceiling and the side-FFMA rows, now
#    checked bit for bit, then test_kernels_wgmma.
# 2. K scaling at (4, 8192, 4096, K), K = 1792 .. 28672: time(K) = a K + b; b (per-tile work that
#    does not grow with K: the epilogue, the prologue's pipeline fill, the launch) over time(7168)
#    is what the epilogue and fill cost at the anchor shape.
# 3. ncu warp-state sampling of the backend's fwd kernel at the anchor (launch 2: the timed call).
set -uo pipefail
pack=$1
out=$2
bin=$pack/bin
mkdir -p "$out"
scripts/gpu_round.sh "$pack" "$out/probe" probe
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv >"$out/smi-before.txt"
ks=()
for k in 1792 3584 7168 14336 28672; do ks+=(--shape "4,8192,4096,$k"); done
echo "== $(date -u +%FT%TZ) fp8moe bench --no-quant ${ks[*]} --warmup 2 --runs 10"
timeout 300 "$bin/fp8moe" bench --no-quant "${ks[@]}" --warmup 2 --runs 10 >"$out/kscale.log" 2>&1
echo "kscale rc=$?"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv >>"$out/smi-before.txt"
echo "== $(date -u +%FT%TZ) ncu SourceCounters, fwd anchor"
timeout 200 ncu --clock-control none --kernel-name-base mangled -k regex:FoldMainloop --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --kill 1 -o "$out/fwd" \
  "$bin/fp8moe" bench --no-quant --shape 4,8192,4096,7168 --warmup 0 --runs 1 >"$out/ncu-run.log" 2>&1
echo "ncu rc=$?"
ncu -i "$out/fwd.ncu-rep" --page details >"$out/fwd-details.txt" 2>&1
ncu -i "$out/fwd.ncu-rep" --page source --csv --print-source sass >"$out/fwd_sass.csv" 2>&1
python3 scripts/ncu_stalls.py "$out/fwd_sass.csv" >"$out/fwd_stalls.md" 2>&1
echo "stalls rc=$?"
xz -9 "$out/fwd_sass.csv"
rm -f "$out/fwd.ncu-rep"
# The device tool returns 8 files at most: the small ones go into two.
{ echo "## nvidia-smi before and after the K-scaling bench"; cat "$out/smi-before.txt"; } >>"$out/kscale.log"
{ echo "## the profiled bench's console"; cat "$out/ncu-run.log"; } >>"$out/fwd-details.txt"
rm -f "$out/smi-before.txt" "$out/ncu-run.log"
ls -la "$out" "$out/probe"
