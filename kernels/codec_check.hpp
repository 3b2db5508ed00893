#pragma once
// Exhaustive device checks of the quantizers' device fast paths (reference/scale.hpp), each
// evaluated on the GPU against the integer or double formula also evaluated on the GPU:
//   - quantize_element (hardware cvt after the clamp) against fp8_encode(torch) of the clamped
//     value, for all 2^32 fp32 bit patterns;
//   - quantize_pair (paired satfinite cvt, no clamp) against the same, for all 2^32 inputs in
//     byte 0 and a scrambled partner in byte 1, NaN codes counting as equal;
//   - block_scale's fp32 division against block_scale_f64, for every amax bit pattern in
//     [0, 2^31) (all non-negative floats, Inf and the positive NaNs), pow2 on or off.
#include <cstdint>

#include "reference/formats.hpp"

namespace fp8moe::kernels {

struct CodecCheck {
  std::uint64_t mismatches = 0;
  std::uint32_t first_bits = 0;  // the first (lowest) mismatching input, when any
};

CodecCheck check_quantize_element_codec(Fp8Format f);
CodecCheck check_quantize_pair_codec(Fp8Format f);
CodecCheck check_block_scale_device(Fp8Format f, bool pow2);

}  // namespace fp8moe::kernels
