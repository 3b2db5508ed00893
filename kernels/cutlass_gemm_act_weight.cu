// cuda-cutlass fwd and dgrad: per-row A scales, one scale per 128x128 B tile (cutlass_gemm.cuh), cooperative schedule.
#include "kernels/cutlass_gemm.cuh"

namespace fp8moe::kernels {

void cutlass_act_weight(OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s, cudaStream_t stream,
                       const std::string& what) {
  if (out == OutDtype::bf16) {
    cutlass_impl::run<cutlass_impl::Config<128, cutlass::bfloat16_t>>(groups, s, stream, what);
  } else {
    cutlass_impl::run<cutlass_impl::Config<128, float>>(groups, s, stream, what);
  }
}

}  // namespace fp8moe::kernels
