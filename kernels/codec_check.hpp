#pragma once
// Exhaustive device check of the quantizer's element codec: the device fast path of
// quantize_element (hardware cvt after the clamp) against the integer encoder fp8_encode(torch) of
// the clamped value, for all 2^32 fp32 bit patterns, both evaluated on the GPU.
#include <cstdint>

#include "reference/formats.hpp"

namespace fp8moe::kernels {

struct CodecCheck {
  std::uint64_t mismatches = 0;
  std::uint32_t first_bits = 0;  // the first (lowest) mismatching input, when any
};

CodecCheck check_quantize_element_codec(Fp8Format f);

}  // namespace fp8moe::kernels
