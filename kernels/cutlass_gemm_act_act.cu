// cuda-cutlass wgrad: per-row scales on both operands, 128-token blocks (cutlass_gemm.cuh), cooperative schedule.
#include "kernels/cutlass_gemm.cuh"

namespace fp8moe::kernels {

void cutlass_act_act(OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s, cudaStream_t stream,
                    const std::string& what) {
  if (out == OutDtype::bf16) {
    cutlass_impl::run<cutlass_impl::Config<1, cutlass::bfloat16_t>>(groups, s, stream, what);
  } else {
    cutlass_impl::run<cutlass_impl::Config<1, float>>(groups, s, stream, what);
  }
}

}  // namespace fp8moe::kernels
