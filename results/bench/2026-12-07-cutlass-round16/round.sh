#!/usr/bin/env bash
# Round 16 (issue 19), one device call (at most 8 files come back; every step bounded so the whole
# fits the call's 600 s):
#   results/bench/2026-12-07-cutlass-round16/round.sh build-gpu "$OUT"
# 1. The direct-store epilogue (schedule cooperative_direct, rows cd/...): `gpu_round.sh cutlass cd/`
#    = fp8moe bench --no-quant --cutlass-only cd/ (each row checked bitwise before it is timed, beside
#    the backend's rows and the cuBLASLt loop of the same run; c/tune.log), then test_kernels_cutlass
#    (every built kernel bitwise the model; c/tests.log).
# 2. fp8moe-fold-probe: the unfolded ceiling and the side-FFMA rows, now checked bit for bit (probe.log).
# 3. K scaling at (4, 8192, 4096, K), K = 1792, 7168, 28672: time(K) = a K + b; b (per-tile work that
#    does not grow with K: the epilogue, the pipeline's fill, the launch) over time(7168) is what
#    they cost at the anchor shape, for the backend's kernel and the direct-store one (kscale.log).
# 4. ncu warp-state sampling of the backend's fwd kernel at the anchor (launch 2: the timed call).
set -uo pipefail
pack=$1
out=$2
bin=$pack/bin
mkdir -p "$out"
smi() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader; }
scripts/gpu_round.sh "$pack" "$out/c" cutlass cd/
{
  echo "== $(date -u +%FT%TZ) smi: $(smi)"
  timeout 30 "$bin/fp8moe-fold-probe" --blocks 5 --runs 1; echo "rc=$?"
  timeout 60 "$bin/fp8moe-fold-probe" --layout swizzled; echo "rc=$?"
  echo "== $(date -u +%FT%TZ) smi: $(smi)"
} >"$out/probe.log" 2>&1
echo "probe done"
{
  echo "== $(date -u +%FT%TZ) smi: $(smi)"
  echo "== fp8moe bench --no-quant --shape 4,8192,4096,{1792,7168,28672} --cutlass-only cd/f1/N1 --warmup 2 --runs 10"
  timeout 150 "$bin/fp8moe" bench --no-quant --shape 4,8192,4096,1792 --shape 4,8192,4096,7168 --shape 4,8192,4096,28672 \
    --cutlass-only cd/f1/N1 --warmup 2 --runs 10
  echo "rc=$?"
  echo "== $(date -u +%FT%TZ) smi: $(smi)"
} >"$out/kscale.log" 2>&1
echo "kscale done"
timeout 100 ncu --clock-control none --kernel-name-base mangled -k regex:FoldMainloop --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --kill 1 -o "$out/fwd" \
  "$bin/fp8moe" bench --no-quant --shape 4,8192,4096,7168 --warmup 0 --runs 1 >"$out/ncu-run.log" 2>&1
echo "ncu rc=$?"
{
  ncu -i "$out/fwd.ncu-rep" --page details
  echo "## the profiled bench's console"
  cat "$out/ncu-run.log"
} >"$out/fwd-details.txt" 2>&1
ncu -i "$out/fwd.ncu-rep" --page source --csv --print-source sass >"$out/fwd_sass.csv" 2>&1
python3 scripts/ncu_stalls.py "$out/fwd_sass.csv" >"$out/fwd_stalls.md" 2>&1
echo "stalls rc=$?"
xz -9 "$out/fwd_sass.csv"
rm -f "$out/fwd.ncu-rep" "$out/ncu-run.log"
ls -la "$out" "$out/c"
