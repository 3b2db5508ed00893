#!/usr/bin/env bash
# Packs what a GPU machine needs to run fp8moe's CUDA work into one folder: the CLI, the kernel
# benchmark, the fold-overlap probe and every GPU test binary, stripped and compressed (the device
# tool carries at most 64 MiB). The folder name must be git-ignored (build-*/ is).
#   scripts/pack_gpu.sh [BUILD_DIR=build] [OUT_DIR=build-gpu]
# On the GPU machine: scripts/gpu_round.sh OUT_DIR RESULTS_DIR unpacks it and runs the GPU tests,
# the bench and a cuda-simt op run, one log per step.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-build-gpu}
tests=(test_kernels_codec test_kernels_layout test_kernels_quantize test_kernels_datagen test_kernels_simt_gemm
       test_kernels_hp64 test_kernels_cublaslt test_kernels_wgmma_layout test_kernels_wgmma test_cuda_backend
       test_cuda_fake_comm test_nccl_comm)
# The CUTLASS suite where the build found CUTLASS (cuda-cutlass).
targets=$(cmake --build "$build" --target help 2>/dev/null || true)
if [[ $targets == *test_kernels_cutlass* ]]; then
  tests+=(test_kernels_cutlass)
fi
cmake --build "$build" -j "${FP8MOE_JOBS:-$(nproc)}" --target fp8moe fp8moe-bench-kernels fp8moe-fold-probe "${tests[@]}" >&2
stage=$(mktemp -d)
mkdir -p "$stage/bin"
cp "$build/bin/fp8moe" "$build/kernels/fp8moe-bench-kernels" "$build/kernels/fp8moe-fold-probe" "$stage/bin/"
# Optional: the MPI-linked CLI that `fp8moe --runtime mpi` (and --runtime nccl under mpirun) re-executes
# as; built only where Open MPI was found. The plain fp8moe runs without it.
if [[ -f $build/bin/fp8moe-mpi ]]; then cp "$build/bin/fp8moe-mpi" "$stage/bin/"; fi
# GPU suites live under tests/kernels (kernels/, the CUDA backend), tests/sim (the fake-gpu mesh) or tests/comm (NCCL).
for t in "${tests[@]}"; do
  for d in kernels sim comm; do
    if [[ -f $build/tests/$d/$t ]]; then cp "$build/tests/$d/$t" "$stage/bin/"; break; fi
  done
  [[ -f $stage/bin/$t ]] || { echo "pack_gpu: no $t under $build/tests" >&2; exit 1; }
done
strip "$stage"/bin/*
rm -rf "$out"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/gpu-bins.tar.xz" bin
git rev-parse HEAD >"$out/commit"
git status --porcelain --untracked-files=no >"$out/dirty"
rm -rf "$stage"
du -sh "$out"/* >&2
