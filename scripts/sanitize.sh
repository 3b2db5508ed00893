#!/usr/bin/env bash
# The CPU suites under AddressSanitizer + UndefinedBehaviorSanitizer (issue 16): a separate build
# in build-asan (gcc, -O1, CUDA and MPI off, -fno-sanitize-recover=all so any report fails its
# test), then ctest on the suites below. The CLI suites run the sanitized fp8moe as a subprocess,
# so the command line is covered too.
#   scripts/sanitize.sh [extra ctest arguments]
# Suites: the CPU suites except the exhaustive codec sweep (2^32 values per format: an hour under
# ASan; test_formats and the fuzzers cover the codec), test_cli_sweep (dozens of sweeps: its cases
# ran 6-10 minutes each under ASan on 2 busy cores; the sweep engine runs here through test_cli_run,
# test_cli_limits and the fuzzers) and the GPU, MPI and notebook suites (no device, no MPI in this
# build, Python). -O1 keeps the job within CI's budget on 2 cores: from an empty build-asan it took
# 544 s here (about 6.6 min to build, 149 s of tests at -j2; load average about 3.5).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${FP8MOE_ASAN_DIR:-build-asan}
jobs=${FP8MOE_JOBS:-$(nproc)}
suites=(test_formats test_groups test_metrics test_datagen test_quantize test_gemm test_tensor_core test_block_gemm_tc test_h5 test_heap_guard
        test_mesh test_rules test_op_scenarios test_layer_plans
        test_cli_quantize test_cli_gemm test_cli_run test_cli_limits)

san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
mkdir -p "$dir"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Asan -DCMAKE_CXX_FLAGS_ASAN="-O1 -g -march=x86-64-v3 $san" \
  -DCMAKE_C_FLAGS_ASAN="-O1 -g $san" -DCMAKE_EXE_LINKER_FLAGS_ASAN="$san" \
  -DFP8MOE_ENABLE_CUDA=OFF -DFP8MOE_ENABLE_MPI=OFF >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 2; }
cmake --build "$dir" -j "$jobs" --target fp8moe "${suites[@]}" >&2

# halt_on_error: the first report ends the process with a non-zero status, which fails the test.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
regex="^($(IFS='|'; echo "${suites[*]}")):"  # ctest names are SUITE:CASE
ctest --test-dir "$dir" --output-on-failure -j "$jobs" -R "$regex" "$@"
