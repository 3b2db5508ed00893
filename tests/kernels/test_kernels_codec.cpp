// The device fast paths of reference/scale.hpp, exhaustively on the GPU: quantize_element's
// hardware cvt.rn.satfinite after the clamp and quantize_pair's paired cvt without it give the
// integer encoder's codes for all 2^32 fp32 inputs, e4m3 and e5m2 (the pair: NaN codes may differ
// in sign); block_scale's fp32 division equals the double formula for every non-negative amax
// bit pattern, pow2 on and off. Label gpu: exits 77 without a device.
#include <doctest/doctest.h>

#include <initializer_list>

#include "kernels/codec_check.hpp"

using namespace fp8moe;

namespace {
const char* fmt_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }
}  // namespace

TEST_CASE("device quantize_element equals the integer encoder for all 2^32 fp32 inputs") {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    CAPTURE(fmt_name(f));
    const kernels::CodecCheck r = kernels::check_quantize_element_codec(f);
    CAPTURE(r.first_bits);
    CHECK(r.mismatches == 0);
  }
}

TEST_CASE("device quantize_pair equals the integer encoder in both bytes for all 2^32 fp32 inputs") {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    CAPTURE(fmt_name(f));
    const kernels::CodecCheck r = kernels::check_quantize_pair_codec(f);
    CAPTURE(r.first_bits);
    CHECK(r.mismatches == 0);
  }
}

TEST_CASE("device block_scale (fp32 division) equals block_scale_f64 for every amax >= 0, Inf and NaN") {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (bool pow2 : {false, true}) {
      CAPTURE(fmt_name(f));
      CAPTURE(pow2);
      const kernels::CodecCheck r = kernels::check_block_scale_device(f, pow2);
      CAPTURE(r.first_bits);
      CHECK(r.mismatches == 0);
    }
  }
}
