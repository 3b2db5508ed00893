// cuda-cutlass fwd and dgrad: per-row A scales, one scale per 128x128 B tile (cutlass_gemm.cuh): cooperative schedule, fp8moe's mainloop (the fold under the next wgmma), cluster 1x2x1, bf16 output.
// One translation unit per configuration so that the build compiles them in parallel.
#include "kernels/cutlass_gemm.cuh"

namespace fp8moe::kernels {

void cutlass_gemm_act_weight_cooperative_overlap(const CutlassKernel& k, OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s,
                                                 cudaStream_t stream, const std::string& what) {
  cutlass_impl::launch<128, false, true, false>(k, out, groups, s, stream, what);
}

}  // namespace fp8moe::kernels
