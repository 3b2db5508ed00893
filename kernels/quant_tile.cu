// B x B tiles of a grouped weight w (E,N,K) (the 128x128 recipes): the column-block kernel of
// quant_colblock.cuh with a block per tile and one scale for the tile; codes (E,N,K) in place for
// fwd, or (E,K,N) for the dgrad orientation. N and K are multiples of B (quant_layout checks).
#include "kernels/quant_colblock.cuh"
#include "kernels/quantize.hpp"

namespace fp8moe::kernels {
namespace {

template <class T, bool kTranspose>
void launch_b(const T* w, std::int64_t E, std::int64_t N, std::int64_t K, const QuantLayout& out, std::uint8_t* codes,
              float* scales, const QuantOptions& opt, cudaStream_t stream) {
  using colblock::Amax;
  const bool p2 = opt.pow2_scales;
  dispatch_block("quant_tile: ", opt.block, [&](auto b) {
    colblock::launch<T, decltype(b)::value, Amax::tile, kTranspose>(w, E, N, K, out, codes, scales, p2, opt.format, stream, "quant_tile");
  });
}

}  // namespace

template <class T>
void launch_quant_tile(const T* w, std::int64_t E, std::int64_t N, std::int64_t K, bool transpose,
                       const QuantLayout& out, std::uint8_t* codes, float* scales, const QuantOptions& opt,
                       cudaStream_t stream) {
  if (E == 0 || N == 0 || K == 0) return;
  if (transpose) {
    launch_b<T, true>(w, E, N, K, out, codes, scales, opt, stream);
  } else {
    launch_b<T, false>(w, E, N, K, out, codes, scales, opt, stream);
  }
}

template void launch_quant_tile<float>(const float*, std::int64_t, std::int64_t, std::int64_t, bool, const QuantLayout&,
                                       std::uint8_t*, float*, const QuantOptions&, cudaStream_t);
template void launch_quant_tile<Bf16Bits>(const Bf16Bits*, std::int64_t, std::int64_t, std::int64_t, bool,
                                          const QuantLayout&, std::uint8_t*, float*, const QuantOptions&, cudaStream_t);

}  // namespace fp8moe::kernels
