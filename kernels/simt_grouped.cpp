// The grouped simt passes: the expert loops and operand views of reference/grouped.cpp's
// grouped_*_q, with device pointers, one simt_block_gemm launch per non-empty expert.
#include "kernels/simt_gemm.hpp"
#include "reference/groups.hpp"

namespace fp8moe::kernels {
namespace {

void check_opt(const GemmOptions& opt, const DeviceQuantized& a, const DeviceQuantized& b) {
  if (a.format != opt.quant.format || b.format != opt.quant.format) {
    fail("simt: operands are ", format_name(a.format), "/", format_name(b.format), " but the options say ",
         format_name(opt.quant.format));
  }
}

std::int64_t dim(const std::vector<std::int64_t>& s, std::size_t i) { return s.at(i); }

// 1x128 codes (M, C): rows [r0, r0+rows), scales (M, C/B)
BlockOperand lhs_rows(const DeviceQuantized& q, std::int64_t r0, std::int64_t rows) {
  const std::int64_t C = dim(q.layout.codes, 1), nb = dim(q.layout.scales, 1);
  return BlockOperand{q.codes.get() + r0 * C, C, 1, q.scales.get() + r0 * nb, nb, 1, 1, rows};
}

// grouped weight codes (E, R, C), 128x128 scales (E, R/B, C/B)
BlockOperand weight_expert(const DeviceQuantized& q, std::int64_t e) {
  const std::int64_t R = dim(q.layout.codes, 1), C = dim(q.layout.codes, 2);
  const std::int64_t sr = dim(q.layout.scales, 1), sc = dim(q.layout.scales, 2);
  return BlockOperand{q.codes.get() + e * R * C, C, 1, q.scales.get() + e * sr * sc, sc, 1, q.layout.block_rows, R};
}

}  // namespace

DeviceQuantized upload(const Quantized& q) {
  DeviceQuantized d;
  d.codes = DeviceBuffer<std::uint8_t>(q.codes.data);
  d.scales = DeviceBuffer<float>(q.scales.data);
  d.layout = QuantLayout{q.codes.shape, q.scales.shape, q.block_rows, q.block_cols};
  d.format = q.format;
  d.recipe = q.recipe;
  return d;
}

void simt_grouped_fwd(const DeviceQuantized& A_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                      const GemmOptions& opt, float* out, cudaStream_t stream) {
  require_recipe(A_q.recipe, Recipe::act_lhs, "fwd: A");
  require_recipe(W_q.recipe, Recipe::weight_fwd, "fwd: W");
  check_opt(opt, A_q, W_q);
  const std::int64_t M = dim(A_q.layout.codes, 0), K = dim(A_q.layout.codes, 1), N = dim(W_q.layout.codes, 1);
  if (dim(W_q.layout.codes, 2) != K) fail("fwd: A has K = ", K, " but W has K = ", dim(W_q.layout.codes, 2));
  if (dim(W_q.layout.codes, 0) != static_cast<std::int64_t>(offs.size())) {
    fail("fwd: W has ", dim(W_q.layout.codes, 0), " experts but offs has ", offs.size(), " entries");
  }
  check_offsets(offs, M);
  std::int64_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    simt_block_gemm(lhs_rows(A_q, s, offs[e] - s), weight_expert(W_q, static_cast<std::int64_t>(e)), K, out + s * N, N,
                    opt, stream, splits_of(opt, e));
    s = offs[e];
  }
}

void simt_grouped_dgrad(const DeviceQuantized& dOut_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt, float* out, cudaStream_t stream) {
  require_recipe(dOut_q.recipe, Recipe::act_lhs, "dgrad: dOut");
  require_recipe(W_q.recipe, Recipe::weight_dgrad, "dgrad: W (dgrad orientation)");
  check_opt(opt, dOut_q, W_q);
  const std::int64_t M = dim(dOut_q.layout.codes, 0), N = dim(dOut_q.layout.codes, 1), K = dim(W_q.layout.codes, 1);
  if (dim(W_q.layout.codes, 2) != N) fail("dgrad: dOut has N = ", N, " but W has N = ", dim(W_q.layout.codes, 2));
  if (dim(W_q.layout.codes, 0) != static_cast<std::int64_t>(offs.size())) {
    fail("dgrad: W has ", dim(W_q.layout.codes, 0), " experts but offs has ", offs.size(), " entries");
  }
  check_offsets(offs, M);
  std::int64_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    simt_block_gemm(lhs_rows(dOut_q, s, offs[e] - s), weight_expert(W_q, static_cast<std::int64_t>(e)), N,
                    out + s * K, K, opt, stream, splits_of(opt, e));
    s = offs[e];
  }
}

void simt_grouped_wgrad(const DeviceQuantized& dOutT_q, const DeviceQuantized& A_q,
                        std::span<const std::int32_t> offs, const GemmOptions& opt, float* out, cudaStream_t stream) {
  require_recipe(dOutT_q.recipe, Recipe::kgrouped_lhs, "wgrad: dOut^T");
  require_recipe(A_q.recipe, Recipe::kgrouped_rhs, "wgrad: A");
  check_opt(opt, dOutT_q, A_q);
  const std::int64_t N = dim(dOutT_q.layout.codes, 0), M = dim(dOutT_q.layout.codes, 1), K = dim(A_q.layout.codes, 1);
  const std::int64_t B = opt.quant.block;
  if (dim(A_q.layout.codes, 0) != M) fail("wgrad: dOut has ", M, " tokens but A has ", dim(A_q.layout.codes, 0));
  check_offsets(offs, M);
  const std::int64_t E = static_cast<std::int64_t>(offs.size());
  // An empty expert's dW is zero, as on the CPU (a zero-length contraction).
  if (E * N * K > 0) FP8MOE_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * E * N * K, stream), "dW (", E, ",", N, ",", K, ")");
  std::int64_t s = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t Me = offs[static_cast<std::size_t>(e)] - s;
    if (Me > 0) {
      // lhs: dOut^T (N, tokens of e); scales (N, M/B) from column s/B
      const BlockOperand L{dOutT_q.codes.get() + s, M, 1, dOutT_q.scales.get() + s / B, M / B, 1, 1, N};
      // rhs: A^T (K, tokens of e) read from A codes (M, K); scales (M/B, K) from row s/B
      const BlockOperand R{A_q.codes.get() + s * K, 1, K, A_q.scales.get() + (s / B) * K, 1, K, 1, K};
      simt_block_gemm(L, R, Me, out + e * N * K, K, opt, stream, splits_of(opt, static_cast<std::size_t>(e)));
    }
    s = offs[static_cast<std::size_t>(e)];
  }
}

}  // namespace fp8moe::kernels
