// cuda-cutlass wgrad: per-row scales on both operands, 128-token blocks (cutlass_gemm.cuh), ping-pong schedule, bf16 output.
#include "kernels/cutlass_gemm.cuh"

namespace fp8moe::kernels {

void cutlass_act_act_pingpong(OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s,
                             cudaStream_t stream, const std::string& what) {
  if (out != OutDtype::bf16) fail(what, ": the ping-pong CUTLASS kernels are built for bf16 output only; use the cooperative schedule");
  cutlass_impl::run<cutlass_impl::Config<1, cutlass::bfloat16_t, true>>(groups, s, stream, what);
}

}  // namespace fp8moe::kernels
