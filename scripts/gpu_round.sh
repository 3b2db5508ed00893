#!/usr/bin/env bash
# One round on a GPU machine with the folder scripts/pack_gpu.sh made: unpack, check that the
# binaries load (ldd), run every GPU test binary, a cuda-simt / cuda-cublaslt `fp8moe run`, the
# ci.ini sweeps on every GPU backend and mesh, and the kernel bench (`fp8moe bench`: table + HDF5).
# Few files come back from the device tool, so the logs are RESULTS_DIR/device.log, tests.log,
# runs.log, sweeps.log (+ the sweeps' .h5), bench.log, bench-kernels.h5 and sanitize.log
# (the device tool returns at most 8 files: delete the .h5 you do not need before the call ends).
# `sanitize`: compute-sanitizer's memcheck, racecheck and initcheck over every GPU test binary,
# each run bounded by a timeout (racecheck and initcheck slow kernels down by 10-100x); the log
# starts with a summary (per tool and suite: errors found, rc, seconds), then the reports.
# `cutlass FILTER`: a CUTLASS tuning round instead: `fp8moe bench --no-quant --cutlass-only FILTER`
# (the rows whose name holds FILTER, each checked bitwise before it is timed, beside the backend's
# and the cuBLASLt loop's rows of the same run; tune.log), then test_kernels_cutlass (every built
# kernel bitwise the model; tests.log).
# `probe`: fp8moe-fold-probe (the tensor pipe under the fold's schedules; probe.log), then the wgmma
# probe's suite (tests.log).
#   scripts/gpu_round.sh PACK_DIR RESULTS_DIR [bench|tests|sweeps|sanitize|probe|all=all]
#   scripts/gpu_round.sh PACK_DIR RESULTS_DIR cutlass FILTER
# Exit status: the number of steps that failed.
set -uo pipefail
pack=$1
res=$2
what=${3:-all}
filter=${4:-}
if [[ $what == cutlass && -z $filter ]]; then
  echo "gpu_round.sh: 'cutlass' wants a row filter (e.g. co/f1/M2), as fp8moe bench --cutlass-only takes" >&2
  exit 2
fi
mkdir -p "$res"
tar -C "$pack" -xJf "$pack/gpu-bins.tar.xz"
bin=$pack/bin
failed=0
step() {  # step LOG COMMAND...: appends COMMAND's output and exit status to RESULTS_DIR/LOG.log
  local log=$res/$1.log
  shift
  echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) ${*#"$bin/"}" >>"$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  echo "rc=$rc" >>"$log"
  [[ $rc == 0 ]] || failed=$((failed + 1))
  echo "${*#"$bin/"}: rc=$rc"
}
{
  echo "# commit $(cat "$pack/commit")"
  echo "# dirty files at pack time:"
  sed 's/^/#   /' "$pack/dirty"
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv
  ldd "$bin/fp8moe-bench-kernels" | grep -E 'cublas|cudart|hdf5|not found'
  ldd "$bin/fp8moe" | grep -E 'nccl|mpi|not found'
  if [[ -f $bin/fp8moe-mpi ]]; then echo "# fp8moe-mpi:"; ldd "$bin/fp8moe-mpi" | grep -E 'mpi|not found'; fi
  echo "# MPI on this machine: $(command -v mpirun || echo 'no mpirun') $(ls /usr/lib/x86_64-linux-gnu/libmpi.so* 2>/dev/null | head -1)"
  "$bin/fp8moe" info
} >"$res/device.log" 2>&1
gpu_tests=(test_kernels_codec test_kernels_layout test_kernels_quantize test_kernels_datagen test_kernels_simt_gemm
           test_kernels_hp64 test_kernels_cublaslt test_kernels_wgmma_layout test_kernels_wgmma test_cuda_backend
           test_cuda_fake_comm test_nccl_comm)
[[ -f $bin/test_kernels_cutlass ]] && gpu_tests+=(test_kernels_cutlass)  # where the build found CUTLASS
backends=(reference cuda-simt cuda-cublaslt)
[[ $("$bin/fp8moe" info 2>/dev/null) == *cuda-cutlass* ]] && backends+=(cuda-cutlass)
if [[ $what == all || $what == tests ]]; then
  for t in "${gpu_tests[@]}"; do
    step tests "$bin/$t"
  done
  for be in "${backends[@]}"; do
    step runs "$bin/fp8moe" run --level op --mesh tp=2 --pass fwd --lhs R --rhs 'S(1)' -E 3 --offs 129,384,500 \
      --backend "$be"
    step runs "$bin/fp8moe" run --level layer --mesh tp=2 --plan tp --backend "$be"
  done
fi
if [[ $what == all || $what == sweeps ]]; then
  # The CI gate set on the GPU: cuda-simt on the CPU and the GPU fake mesh, and the CPU reference
  # over NCCL (world-size-1 cases on one GPU), each bitwise against the committed CPU baseline;
  # cuda-cublaslt against the floors; then the production shapes on cuda-fastest (cuda-cutlass where built).
  base=results/baselines/ci.h5
  for run in "simt_fake:--backend cuda-simt --runtime fake" "simt_fakegpu:--backend cuda-simt --runtime fake-gpu" \
             "nccl:--runtime nccl" "simt_nccl:--backend cuda-simt --runtime nccl"; do
    name=${run%%:*}
    # shellcheck disable=SC2086
    step sweeps "$bin/fp8moe" sweep scenarios/ci.ini ${run#*:} --out "$res/ci_$name.h5" --force -q
    step sweeps "$bin/fp8moe" compare "$base" "$res/ci_$name.h5" --identical
  done
  step sweeps "$bin/fp8moe" sweep scenarios/ci.ini --backend cuda-cublaslt --runtime fake-gpu --out "$res/ci_cublaslt.h5" --force -q
  # cuBLASLt against its bit-exact model: the identity gate cublaslt_is_hopper_tc against the CPU
  # baseline's hopper-tc:cublas rows (and the floors)
  step sweeps "$bin/fp8moe" gate "$res/ci_cublaslt.h5" --baseline "$base"
  step sweeps "$bin/fp8moe" compare "$base" "$res/ci_cublaslt.h5" --identical
  if [[ " ${backends[*]} " == *" cuda-cutlass "* ]]; then
    # CUTLASS against the same model: the identity gate cutlass_is_hopper_tc
    step sweeps "$bin/fp8moe" sweep scenarios/ci.ini --backend cuda-cutlass --runtime fake-gpu --out "$res/ci_cutlass.h5" --force -q
    step sweeps "$bin/fp8moe" gate "$res/ci_cutlass.h5" --baseline "$base"
    step sweeps "$bin/fp8moe" compare "$base" "$res/ci_cutlass.h5" --identical
  fi
  # The real multi-process mesh on this host's CPUs (when the image has Open MPI and the pack has
  # fp8moe-mpi): 4 ranks, bitwise the CPU baseline, as the CI test comm.mpi_sweep checks.
  if [[ -f $bin/fp8moe-mpi ]] && command -v mpirun >/dev/null; then
    step sweeps env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_ALLOW_RUN_AS_ROOT=1 \
      OMPI_MCA_hwloc_base_binding_policy=none OMP_NUM_THREADS=1 \
      mpirun -np 4 --oversubscribe --allow-run-as-root "$bin/fp8moe" sweep scenarios/ci.ini --runtime mpi \
      --out "$res/ci_mpi.h5" --force -q
    step sweeps "$bin/fp8moe" compare "$base" "$res/ci_mpi.h5" --identical
  fi
  # One production scenario (3 cases, on the file's cuda-fastest) within a time limit: the whole file takes longer than a round.
  step sweeps timeout 240 "$bin/fp8moe" sweep scenarios/production.ini --only deepseek_v3_w2 --out "$res/production.h5" --force
fi
if [[ $what == all || $what == sanitize ]]; then
  scripts/gpu_sanitize.sh "$bin" "$res/sanitize.log" "${gpu_tests[@]}" || failed=$((failed + 1))
  echo "sanitize: $(head -1 "$res/sanitize.log")"
fi
if [[ $what == cutlass ]]; then
  step tune timeout 300 "$bin/fp8moe" bench --no-quant --cutlass-only "$filter" --warmup 1 --runs 5
  step tests timeout 200 "$bin/test_kernels_cutlass"
fi
if [[ $what == probe ]]; then
  # The fold-overlap probe (kernels/bench/fold_probe.cu): its CTest's run (5 blocks), its default
  # run, a longer one on the swizzled layout (steadier clocks), the SM clocks and power around
  # them; then the wgmma probe's suite (both share kernels/wgmma_asm.cuh).
  step probe nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
  step probe timeout 120 "$bin/fp8moe-fold-probe" --blocks 5 --runs 1
  step probe timeout 120 "$bin/fp8moe-fold-probe"
  step probe timeout 120 "$bin/fp8moe-fold-probe" --blocks 16384 --layout swizzled --runs 5
  step probe nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
  step tests timeout 300 "$bin/test_kernels_wgmma"
fi
if [[ $what == all || $what == bench ]]; then
  step bench "$bin/fp8moe" bench --h5 "$res/bench-kernels.h5" --force
fi
exit "$failed"
