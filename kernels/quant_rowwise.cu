// 1 x B groups of consecutive elements (the act lhs 1x128 recipe): a warp quantizes a group at a
// time, each lane loading B/32 consecutive elements as one vector, so a warp reads the group in one
// coalesced pass; it loads kUnroll groups before computing so that their loads overlap.
// Measured on the H200 (fp32 in, 16384 x 7168): ~0.39 ms, compute-bound on the shared integer
// codec (fp8_encode): the hardware cvt.rn.satfinite on the clamped value gave the same codes
// for all 2^32 inputs (NaN sign aside) in half the time, but is a second codec (DESIGN.md 2).
#include "kernels/quant_device.cuh"
#include "kernels/quantize.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256;
// Groups in flight per warp: 32 bytes per lane for fp32 (2 x 4 floats); bf16 loads half as many
// bytes per group, so twice the groups (measured 45% of the copy with 2 on the H200).
template <class T>
constexpr int kUnroll = sizeof(T) == 2 ? 4 : 2;

// x (groups, B) -> codes (groups, B), scales (groups)
template <class T, int B, Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    quant_rowwise_kernel(const T* __restrict__ x, std::int64_t groups, std::uint8_t* __restrict__ codes,
                         float* __restrict__ scales, bool pow2) {
  static_assert(B % 32 == 0 && B / 32 <= 8, "a lane holds B/32 <= 8 elements");
  constexpr int V = B / 32;
  const int lane = threadIdx.x & 31;
  // kUnroll consecutive groups per warp and iteration: their loads are in flight together.
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * (kThreads / 32) * kUnroll<T>;
  for (std::int64_t g0 = (static_cast<std::int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5)) * kUnroll<T>;
       g0 < groups; g0 += step) {
    float v[kUnroll<T>][V];
#pragma unroll
    for (int u = 0; u < kUnroll<T>; ++u) {
      if (g0 + u < groups) dev::load_vec<T, V>(x + (g0 + u) * B + lane * V, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll<T>; ++u) {
      if (g0 + u >= groups) break;  // uniform across the warp
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < V; ++j) amax = amax_update(amax, v[u][j]);
      amax = dev::warp_amax(amax);
      const BlockScale bs = block_scale(amax, F, pow2);
      std::uint8_t q[V];
#pragma unroll
      for (int j = 0; j < V; ++j) q[j] = quantize_element(v[u][j], bs.scale, F);
      dev::store_vec<V>(codes + (g0 + u) * B + lane * V, q);
      if (lane == 0) scales[g0 + u] = bs.s_inv;
    }
  }
}

template <class T, int B>
void launch(const T* x, std::int64_t groups, std::uint8_t* codes, float* scales, const QuantOptions& opt,
            cudaStream_t stream) {
  const std::int64_t per_block = kThreads / 32 * kUnroll<T>, want = (groups + per_block - 1) / per_block;
  const int blocks = static_cast<int>(want < 65536 ? want : 65536);
  // The format is a template argument so that fp8_spec() folds into constants in the codec.
  if (opt.format == Fp8Format::e4m3) {
    quant_rowwise_kernel<T, B, Fp8Format::e4m3><<<blocks, kThreads, 0, stream>>>(x, groups, codes, scales, opt.pow2_scales);
  } else {
    quant_rowwise_kernel<T, B, Fp8Format::e5m2><<<blocks, kThreads, 0, stream>>>(x, groups, codes, scales, opt.pow2_scales);
  }
  FP8MOE_CUDA_CHECK_LAUNCH("quant_rowwise_kernel", "groups=", groups, " B=", B);
}

}  // namespace

template <class T>
void launch_quant_rowwise(const T* x, std::int64_t groups, std::uint8_t* codes, float* scales, const QuantOptions& opt,
                          cudaStream_t stream) {
  if (groups == 0) return;
  switch (opt.block) {
    case 64: return launch<T, 64>(x, groups, codes, scales, opt, stream);
    case 128: return launch<T, 128>(x, groups, codes, scales, opt, stream);
    case 256: return launch<T, 256>(x, groups, codes, scales, opt, stream);
    default: fail("quant_rowwise: block ", opt.block, " is not supported: use 64, 128 or 256");
  }
}

template void launch_quant_rowwise<float>(const float*, std::int64_t, std::uint8_t*, float*, const QuantOptions&,
                                          cudaStream_t);
template void launch_quant_rowwise<Bf16Bits>(const Bf16Bits*, std::int64_t, std::uint8_t*, float*,
                                             const QuantOptions&, cudaStream_t);

}  // namespace fp8moe::kernels
