#!/usr/bin/env bash
# One round on a GPU machine with the folder scripts/pack_gpu.sh made: unpack, check that the
# binaries load (ldd), run every GPU test binary, a cuda-simt / cuda-cublaslt `fp8moe run`, and
# the kernel bench (table + HDF5). Few files come back from the device tool, so the logs are
# RESULTS_DIR/device.log, tests.log, runs.log, bench.log and bench-kernels.h5.
#   scripts/gpu_round.sh PACK_DIR RESULTS_DIR [bench|tests|all=all]
# Exit status: the number of steps that failed.
set -uo pipefail
pack=$1
res=$2
what=${3:-all}
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
  "$bin/fp8moe" info
} >"$res/device.log" 2>&1
if [[ $what == all || $what == tests ]]; then
  for t in test_kernels_codec test_kernels_layout test_kernels_quantize test_kernels_datagen test_kernels_simt_gemm \
           test_kernels_hp64 test_kernels_cublaslt test_cuda_backend test_cuda_fake_comm; do
    step tests "$bin/$t"
  done
  for be in reference cuda-simt cuda-cublaslt; do
    step runs "$bin/fp8moe" run --level op --mesh tp=2 --pass fwd --lhs R --rhs 'S(1)' -E 3 --offs 129,384,500 \
      --backend "$be"
    step runs "$bin/fp8moe" run --level layer --mesh tp=2 --plan tp --backend "$be"
  done
fi
if [[ $what == all || $what == bench ]]; then
  step bench "$bin/fp8moe-bench-kernels" --h5 "$res/bench-kernels.h5"
fi
exit "$failed"
