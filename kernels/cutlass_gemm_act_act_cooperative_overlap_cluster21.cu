// cuda-cutlass wgrad: per-row scales on A and B (cutlass_gemm.cuh): cooperative schedule, fp8moe's mainloop (the fold under the next wgmma), cluster 2x1x1 (B multicast), bf16 output.
// One translation unit per configuration so that the build compiles them in parallel.
#include "kernels/cutlass_gemm.cuh"

namespace fp8moe::kernels {

void cutlass_gemm_act_act_cooperative_overlap_cluster21(const CutlassKernel& k, OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s,
                                                        cudaStream_t stream, const std::string& what) {
  cutlass_impl::launch<1, false, true, false, 2>(k, out, groups, s, stream, what);
}

}  // namespace fp8moe::kernels
