// The grouped simt passes: reference/grouped_plan.hpp's plan (the CPU passes' checks, expert loop
// and operand views) on device pointers, one simt_block_gemm launch per expert.
#include "kernels/simt_gemm.hpp"
#include "reference/grouped_plan.hpp"
#include "reference/groups.hpp"

namespace fp8moe::kernels {
namespace {

// A plan's GEMMs, one launch per expert that contracts something (an empty expert's dW is the
// zero the output was cleared to, as on the CPU).
void run_plan(Pass p, const DeviceQuantized& lhs, const DeviceQuantized& rhs, std::span<const std::int32_t> offs,
              const GemmOptions& opt, float* out, cudaStream_t stream) {
  const GroupedPlan plan = plan_grouped(p, operand(lhs), operand(rhs), offs, opt);
  std::int64_t n = 1;
  for (std::int64_t d : plan.out_shape) n *= d;
  if (p == Pass::wgrad && n > 0) FP8MOE_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * n, stream), "dW");
  for (const ExpertGemm& g : plan.gemms) {
    if (p == Pass::wgrad && g.kc == 0) continue;
    simt_block_gemm(g.L, g.R, g.kc, out + g.out_offset, g.ldc, opt, stream, g.splits);
  }
}

}  // namespace

DeviceQuantized upload(const Quantized& q) {
  DeviceQuantized d;
  d.codes = DeviceBuffer<std::uint8_t>(q.codes.data);
  d.scales = DeviceBuffer<float>(q.scales.data);
  d.layout = q.layout;
  d.format = q.format;
  d.recipe = q.recipe;
  return d;
}

void simt_grouped_fwd(const DeviceQuantized& A_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                      const GemmOptions& opt, float* out, cudaStream_t stream) {
  run_plan(Pass::fwd, A_q, W_q, offs, opt, out, stream);
}

void simt_grouped_dgrad(const DeviceQuantized& dOut_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt, float* out, cudaStream_t stream) {
  run_plan(Pass::dgrad, dOut_q, W_q, offs, opt, out, stream);
}

void simt_grouped_wgrad(const DeviceQuantized& dOutT_q, const DeviceQuantized& A_q,
                        std::span<const std::int32_t> offs, const GemmOptions& opt, float* out, cudaStream_t stream) {
  run_plan(Pass::wgrad, dOutT_q, A_q, offs, opt, out, stream);
}

}  // namespace fp8moe::kernels
