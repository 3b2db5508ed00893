// B rows x 1 column groups of x (M,K) (act rhs 128x1, transposed lhs, and the K-grouped recipes,
// whose expert boundaries are multiples of B): the column-block kernel of quant_colblock.cuh with
// one scale per column of a block, codes (M,K) in place or (K,M) transposed.
#include "kernels/quant_colblock.cuh"
#include "kernels/quantize.hpp"

namespace fp8moe::kernels {
namespace {

template <class T, bool kTranspose>
void launch_b(const T* x, std::int64_t M, std::int64_t K, const QuantLayout& out, std::uint8_t* codes, float* scales,
              const QuantOptions& opt, cudaStream_t stream) {
  using colblock::Amax;
  const bool p2 = opt.pow2_scales;
  dispatch_block("quant_colwise: ", opt.block, [&](auto b) {
    colblock::launch<T, decltype(b)::value, Amax::column, kTranspose>(x, 1, M, K, out, codes, scales, p2, opt.format, stream, "quant_colwise");
  });
}

}  // namespace

template <class T>
void launch_quant_colwise(const T* x, std::int64_t M, std::int64_t K, bool transpose, const QuantLayout& out,
                          std::uint8_t* codes, float* scales, const QuantOptions& opt, cudaStream_t stream) {
  if (M == 0 || K == 0) return;
  if (transpose) {
    launch_b<T, true>(x, M, K, out, codes, scales, opt, stream);
  } else {
    launch_b<T, false>(x, M, K, out, codes, scales, opt, stream);
  }
}

template void launch_quant_colwise<float>(const float*, std::int64_t, std::int64_t, bool, const QuantLayout&,
                                          std::uint8_t*, float*, const QuantOptions&, cudaStream_t);
template void launch_quant_colwise<Bf16Bits>(const Bf16Bits*, std::int64_t, std::int64_t, bool, const QuantLayout&,
                                             std::uint8_t*, float*, const QuantOptions&, cudaStream_t);

}  // namespace fp8moe::kernels
