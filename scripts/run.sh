#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, and run the default sweep
# (scenarios/default.ini, compiled in): every placement scenario's SQNR for fwd, dgrad and wgrad
# as a table on stdout and in results/runs/default.h5. Arguments are passed to `fp8moe sweep`
# (e.g. scripts/run.sh scenarios/torchao.ini).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
FP8MOE_TARGETS=fp8moe scripts/build.sh  # the CLI only: the tests are scripts/test.sh's
exec build/bin/fp8moe sweep --force "$@"
