#pragma once
// What the CUTLASS translation units share with their dispatcher: the launch functions' name and
// type, one per line of kernels/cutlass_kernels.def (CMake generates the units;
// kernels/cutlass_gemm.cuh's FP8MOE_CUTLASS_DEFINE defines each one; kernels/cutlass_grouped.cpp
// declares them from the .def and dispatches to them, so that a unit does not depend on the .def
// and a new line compiles only its own unit). Internal to kernels/.
#include <cuda_runtime.h>

#include <span>
#include <string>

#include "kernels/cutlass_gemm.hpp"

// A .def line's function name: cutlass_gemm_<scales>_<schedule>_<fold>_<cluster>_n<tile_n>_<sass>.
#define FP8MOE_CUTLASS_FN(kind, schedule, fold, cluster, tile_n, sass) \
  cutlass_gemm_##kind##_##schedule##_##fold##_##cluster##_n##tile_n##_##sass
// A .def line's `outputs` column: whether fp32 output is built besides bf16.
#define FP8MOE_CUTLASS_FP32_bf16 false
#define FP8MOE_CUTLASS_FP32_bf16_fp32 true

namespace fp8moe::kernels {

using CutlassLaunch = void (*)(const CutlassKernel& k, OutDtype out, std::span<const CutlassGroup> groups,
                               CutlassScratch& s, cudaStream_t stream, const std::string& what);

}  // namespace fp8moe::kernels
