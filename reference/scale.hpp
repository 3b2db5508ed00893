#pragma once
// The blockwise scale formula, bit-exact with torchao's blockwise FP8 kernels (DESIGN.md 3.2),
// host+device. For a scaling group G of x:
//   amax  = max |x| over G as fp32, NaN-propagating; amax = max(amax, 1e-12f)
//   scale = (float)(fp8_max / (double)amax)           (pow2: rounded down to a power of two)
//   code  = fp8_rne(clamp(fl32(x * scale), -fp8_max, fp8_max))
//   s_inv = fl32(1.0f / scale)                          the stored scale
#include "reference/formats.hpp"

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif

namespace fp8moe {

inline constexpr float kAmaxFloor = 1e-12f;

// max(|x|, acc) that propagates NaN like torch.amax: once NaN, stays NaN.
FP8MOE_HD float amax_update(float acc, float x) {
  const float a = f32_from_bits(f32_bits(x) & 0x7fffffffu);
  if (a != a || acc != acc) return a != a ? a : acc;
  return a > acc ? a : acc;
}

struct BlockScale {
  float scale;  // quantize multiplier
  float s_inv;  // stored (dequantize) scale
};

FP8MOE_HD BlockScale block_scale(float amax, Fp8Format f, bool pow2) {
  // torch.clamp(min=1e-12) keeps NaN; Inf stays Inf (scale 0, codes NaN or garbage: reported).
  if (!(amax != amax) && amax < kAmaxFloor) amax = kAmaxFloor;
  float scale = static_cast<float>(static_cast<double>(fp8_max(f)) / static_cast<double>(amax));
  if (pow2 && scale == scale && scale > 0.0f && f32_bits(scale) < 0x7f800000u) {
    // TransformerEngine: round the multiplier down to a power of two, so s_inv is exact.
    scale = f32_from_bits(f32_bits(scale) & 0xff800000u);
  }
  return BlockScale{scale, 1.0f / scale};
}

// Quantize one element with its group's multiplier. The clamp before the cast makes the cast's
// overflow policy irrelevant for finite values; NaN propagates through the clamp as in torch.
FP8MOE_HD std::uint8_t quantize_element(float x, float scale, Fp8Format f) {
  const float m = fp8_max(f);
  float y = x * scale;
  if (y > m) y = m;
  if (y < -m) y = -m;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  // Device fast path: on the clamped value the hardware cvt.rn.satfinite gives exactly
  // fp8_encode(torch)'s codes for every non-NaN fp32 (all 2^32 inputs compared on the GPU by
  // tests/kernels/test_kernels_codec.cpp); NaN keeps the integer path so its sign matches the CPU.
  // The integer encoder costs the quantizers half their bandwidth (measured, results/bench/).
  if (y == y) return __nv_cvt_float_to_fp8(y, __NV_SATFINITE, f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
#endif
  return fp8_encode(y, f, Overflow::torch);
}

}  // namespace fp8moe
