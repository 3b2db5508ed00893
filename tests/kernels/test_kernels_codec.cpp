// The device fast path of quantize_element (hardware cvt.rn.satfinite after the clamp) gives the
// integer encoder's codes for all 2^32 fp32 inputs, e4m3 and e5m2 (reference/scale.hpp relies on
// it). Label gpu: exits 77 without a device.
#include <doctest/doctest.h>

#include <initializer_list>

#include "kernels/codec_check.hpp"

using namespace fp8moe;

TEST_CASE("device quantize_element equals the integer encoder for all 2^32 fp32 inputs") {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    CAPTURE(f == Fp8Format::e4m3 ? "e4m3" : "e5m2");
    const kernels::CodecCheck r = kernels::check_quantize_element_codec(f);
    CAPTURE(r.first_bits);
    CHECK(r.mismatches == 0);
  }
}
