#!/usr/bin/env bash
# Regenerates notebooks/figures/overview.png, the README's figure: a real sweep of the built-in
# default scenario (scenarios/default.ini), overview.ipynb executed on it, one heatmap copied.
#   notebooks/make_figures.sh [OUT_DIR]        (default build/notebooks; needs build/bin/fp8moe)
# FP8MOE_BIN, SCENARIO (a scenario file; empty: the default) and FIGURE (the overview PNG's
# name) override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FP8MOE_BIN:-build/bin/fp8moe}
scenario=${SCENARIO:-}
figure=${FIGURE:-overview_sqnr_op_reference_torchao-emulated}
out=${1:-build/notebooks}
# The first python3 that has the notebooks' packages (a pyenv python3 on PATH may lack them).
py=
for p in "$(command -v python3 || true)" /usr/bin/python3; do
  if [[ -n $p ]] && "$p" -c "import h5py, pandas, matplotlib, nbclient, ipykernel" 2>/dev/null; then py=$p; break; fi
done
[[ -n $py ]] || { echo "make_figures: no python3 with the notebooks' packages: run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out/figures.h5"
"$bin" sweep ${scenario:+"$scenario"} --out "$out/figures.h5"
"$py" notebooks/run_notebooks.py --run "$out/figures.h5" --out "$out" --only overview
mkdir -p notebooks/figures
cp "$out/figures/$figure.png" notebooks/figures/overview.png
echo "make_figures: notebooks/figures/overview.png from ${scenario:-the default scenario} ($out/overview.ipynb)"
