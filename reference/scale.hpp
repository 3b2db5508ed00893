#pragma once
// The blockwise scale formula, bit-exact with torchao's blockwise FP8 kernels (reference/SPEC.md 3.1),
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

FP8MOE_HD float pow2_floor_scale(float scale, bool pow2) {
  if (pow2 && scale == scale && scale > 0.0f && f32_bits(scale) < 0x7f800000u) {
    // TransformerEngine: round the multiplier down to a power of two, so s_inv is exact.
    scale = f32_from_bits(f32_bits(scale) & 0xff800000u);
  }
  return scale;
}

// The formula as written above, in double: the host's block_scale, and the device check's oracle.
FP8MOE_HD BlockScale block_scale_f64(float amax, Fp8Format f, bool pow2) {
  // torch.clamp(min=1e-12) keeps NaN; Inf stays Inf (scale 0, codes NaN or garbage: reported).
  if (!(amax != amax) && amax < kAmaxFloor) amax = kAmaxFloor;
  const float scale =
      pow2_floor_scale(static_cast<float>(static_cast<double>(fp8_max(f)) / static_cast<double>(amax)), pow2);
  return BlockScale{scale, 1.0f / scale};
}

FP8MOE_HD BlockScale block_scale(float amax, Fp8Format f, bool pow2) {
#if defined(__CUDA_ARCH__)
  // Device: one correctly rounded fp32 division instead of a double one. The quotient of two
  // floats rounded to double and then to float equals the quotient rounded to float once
  // (double rounding is innocuous for division when 53 >= 2*24 + 2, Figueroa 1995), and
  // 448 / FLT_MAX and 57344 / 1e-12 are normal floats, so no underflow breaks it. Checked on the
  // GPU against block_scale_f64 for every positive float amax, both formats, pow2 on and off
  // (tests/kernels/test_kernels_codec.cpp).
  if (!(amax != amax) && amax < kAmaxFloor) amax = kAmaxFloor;
  const float scale = pow2_floor_scale(__fdiv_rn(fp8_max(f), amax), pow2);
  return BlockScale{scale, __frcp_rn(scale)};
#else
  return block_scale_f64(amax, f, pow2);
#endif
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

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// Device: quantize_element of two elements with one paired cvt.rn.satfinite and no clamp
// (saturation to +-max is what the clamp does; the two can differ only for NaN, which the
// satfinite cvt turns into the positive NaN code). Byte 0 is `lo`'s code, byte 1 `hi`'s. For
// every fp32 input the code equals quantize_element's, or both are NaN codes of f (checked on
// the GPU over all 2^32 inputs in both byte positions, tests/kernels/test_kernels_codec.cpp).
// The quantizers compare NaN codes as equal (SPEC.md 3.3: a non-finite block is reported;
// x86 and the GPU propagate NaN signs differently anyway).
template <Fp8Format F>
__device__ __forceinline__ std::uint16_t quantize_pair(float lo, float lo_scale, float hi, float hi_scale) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo * lo_scale, hi * hi_scale), __NV_SATFINITE,
                                  F == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
}
#endif

}  // namespace fp8moe
