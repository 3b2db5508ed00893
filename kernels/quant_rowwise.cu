// 1 x B groups of consecutive elements (the act lhs 1x128 recipe). Every lane moves 16-byte
// vectors (8 bf16 or 4 fp32); a group is kLanes lanes (B/8 or B/4, at most 32) and a warp
// quantizes 32/kLanes groups per step, kSteps steps' loads in flight before any is used (64 bytes
// per lane). amax is the integer max of magnitude bits (quant_device.cuh) reduced with
// shuffles (or one redux when a group is the whole warp), the scale is block_scale's device path
// (one fp32 division), codes come two at a time from quantize_pair's satfinite cvt.
// Measured on the H200 (results/bench/2026-12-04-h200-gpu-round3): 98.5% (bf16) and 99.5% (fp32)
// of a device copy; the previous version (4 bytes per lane, amax_update on floats, a double
// division and a scalar cvt per element) was instruction-bound at 47% and 74% (2026-12-03-h200-gpu-round2).
#include "kernels/quant_device.cuh"
#include "kernels/quantize.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

template <class T, int B>
struct RowCfg {
  static constexpr int V = dev::kVecElems<T>;
  static constexpr int kLanes = B / V < 32 ? B / V : 32;  // lanes per group
  static constexpr int kVecs = B / (V * kLanes);          // vectors per lane and group (fp32 B=256: 2)
  static constexpr int kGroupsPerWarp = 32 / kLanes;      // groups per step
  static constexpr int kSteps = 4 / kVecs;                // steps in flight
  static constexpr int kGroupsPerIter = kGroupsPerWarp * kSteps;
  static_assert(B % V == 0 && kLanes * V * kVecs == B && kSteps >= 1, "block size");
};

// x (groups, B) -> codes (groups, B), scales (groups)
template <class T, int B, Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    quant_rowwise_kernel(const T* __restrict__ x, std::int64_t groups, std::uint8_t* __restrict__ codes,
                         float* __restrict__ scales, bool pow2) {
  using C = RowCfg<T, B>;
  constexpr int V = C::V;
  const int lane = threadIdx.x & 31, sub = lane % C::kLanes, gw = lane / C::kLanes;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kWarps * C::kGroupsPerIter;
  for (std::int64_t g0 = (static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * C::kGroupsPerIter;
       g0 < groups; g0 += step) {  // g0 is uniform across the warp: every lane reaches the shuffles
    uint4 raw[C::kSteps][C::kVecs];
#pragma unroll
    for (int s = 0; s < C::kSteps; ++s) {
      const std::int64_t g = g0 + s * C::kGroupsPerWarp + gw;
#pragma unroll
      for (int v = 0; v < C::kVecs; ++v) {
        raw[s][v] = g < groups ? dev::load16(x + g * B + (v * C::kLanes + sub) * V) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int s = 0; s < C::kSteps; ++s) {
      const std::int64_t g = g0 + s * C::kGroupsPerWarp + gw;
      std::uint32_t a = dev::vec_amax_bits<T>(raw[s][0]);
#pragma unroll
      for (int v = 1; v < C::kVecs; ++v) a = max(a, dev::vec_amax_bits<T>(raw[s][v]));
      if constexpr (C::kLanes == 32) {
        a = __reduce_max_sync(0xffffffffu, a);
      } else {
#pragma unroll
        for (int o = C::kLanes / 2; o > 0; o >>= 1) a = max(a, __shfl_xor_sync(0xffffffffu, a, o));
      }
      const BlockScale bs = block_scale(__uint_as_float(a), F, pow2);
      if (g < groups) {
#pragma unroll
        for (int v = 0; v < C::kVecs; ++v) {
          dev::store_codes<T>(codes + g * B + (v * C::kLanes + sub) * V, dev::quantize_vec<T, F>(raw[s][v], bs.scale));
        }
        if (sub == 0) scales[g] = bs.s_inv;
      }
    }
  }
}

template <class T, int B>
void launch(const T* x, std::int64_t groups, std::uint8_t* codes, float* scales, const QuantOptions& opt,
            cudaStream_t stream) {
  const std::int64_t per_block = kWarps * RowCfg<T, B>::kGroupsPerIter, want = (groups + per_block - 1) / per_block;
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
  dispatch_block("quant_rowwise: ", opt.block,
                 [&](auto b) { launch<T, decltype(b)::value>(x, groups, codes, scales, opt, stream); });
}

template void launch_quant_rowwise<float>(const float*, std::int64_t, std::uint8_t*, float*, const QuantOptions&,
                                          cudaStream_t);
template void launch_quant_rowwise<Bf16Bits>(const Bf16Bits*, std::int64_t, std::uint8_t*, float*,
                                             const QuantOptions&, cudaStream_t);

}  // namespace fp8moe::kernels
