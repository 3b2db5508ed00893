// cuda-cutlass fwd and dgrad: per-row A scales, one scale per 128x128 B tile (cutlass_gemm.cuh), ping-pong schedule, bf16 output.
#include "kernels/cutlass_gemm.cuh"

namespace fp8moe::kernels {

void cutlass_act_weight_pingpong(OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s,
                                cudaStream_t stream, const std::string& what) {
  if (out != OutDtype::bf16) fail(what, ": the ping-pong CUTLASS kernels are built for bf16 output only; use the cooperative schedule");
  cutlass_impl::run<cutlass_impl::Config<128, cutlass::bfloat16_t, true>>(groups, s, stream, what);
}

}  // namespace fp8moe::kernels
