#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz under ASan+UBSan, each for a bounded time (issue 16):
#   fuzz_scenario  the scenario parser and expander (`fp8moe list`), seeds scenarios/*.ini
#   fuzz_results   the result-file reader (`report`, `sweep --resume`), seeds results/baselines/*.h5
#   fuzz_rules     the sharding-rule table parser and verifier (`rules verify`), seeds scenarios/rules/*.json
# Built by clang in build-fuzz (the main build stays gcc). A crash, a sanitizer report, a leak,
# an out-of-memory or an input slower than 10 s fails the script; the input is saved under
# build-fuzz/artifacts/ and its path printed (reproduce: build-fuzz/bin/TARGET PATH). The corpus
# grows in build-fuzz/corpus/TARGET between runs.
#   scripts/fuzz.sh [SECONDS per target = 60] [TARGET...= all three]
# Leaks inside libhdf5's own error paths are suppressed (tests/fuzz/lsan.supp says why).
# Prints one line per target: executions, corpus size, result. From an empty build-fuzz, 60 s per
# target took 160 s here (load average about 3.5), the build most of it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_scenario fuzz_results fuzz_rules)
dir=${FP8MOE_FUZZ_DIR:-build-fuzz}
jobs=${FP8MOE_JOBS:-$(nproc)}
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs clang)" >&2; exit 2; }

san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
mkdir -p "$dir"
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Fuzz \
  -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" -DCMAKE_CXX_FLAGS_FUZZ="-O1 -g -march=x86-64-v3" \
  -DCMAKE_C_FLAGS_FUZZ="-O1 -g" -DFP8MOE_ENABLE_CUDA=OFF -DFP8MOE_ENABLE_MPI=OFF -DFP8MOE_BUILD_TESTS=OFF \
  -DFP8MOE_BUILD_FUZZERS=ON >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 2; }
cmake --build "$dir" -j "$jobs" --target "${targets[@]}" >&2

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for target in "${targets[@]}"; do
  case $target in
    fuzz_scenario) seeds=(scenarios/*.ini) ;;
    fuzz_results) seeds=(results/baselines/*.h5) ;;
    fuzz_rules) seeds=(scenarios/rules/*.json) ;;
  esac
  corpus=$dir/corpus/$target seed_dir=$dir/seeds/$target art=$dir/artifacts/$target
  mkdir -p "$corpus" "$seed_dir" "$art"
  cp "${seeds[@]}" "$seed_dir/"
  # A one-case result file too (138 KB against the baseline's 609 KB: many more executions a
  # second), written by the main build's fp8moe when there is one (.ci/run builds it first).
  if [[ $target == fuzz_results && -x build/bin/fp8moe ]]; then
    printf '[scenario.tiny]\nlevel = op\nmesh = 1\npass = fwd\nmode = hp64\noffs = 128,256\nn = 128\nk = 128\n' \
      >"$seed_dir/tiny.ini"
    build/bin/fp8moe sweep "$seed_dir/tiny.ini" --out "$seed_dir/tiny.h5" --force -q >/dev/null && rm "$seed_dir/tiny.ini"
  fi
  log=$dir/$target.log
  rc=0
  # -timeout: an input slower than 10 s is a hang; -rss_limit_mb: past 4 GB is an out-of-memory.
  "$dir/bin/$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$art/" "$corpus" "$seed_dir" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  units=$(find "$corpus" -type f | wc -l)
  if ((rc != 0)); then
    failed=$((failed + 1))
    saved=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "fuzz: $target FAILED (rc=$rc) after ${execs:-?} executions: input saved as ${saved:-(none, see $log)}; log $log"
    grep -E "^==[0-9]+==ERROR|runtime error|SUMMARY|ALARM|out-of-memory|deadly signal" "$log" | head -5 | sed 's/^/fuzz:   /'
  else
    echo "fuzz: $target ok: ${execs:-?} executions in ${secs}s, corpus $units inputs"
  fi
done
exit "$failed"
