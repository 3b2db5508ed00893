#pragma once
// Rounding an exact integer block partial to fp32, host+device: the one rounding of promote-fp32
// (reference/SPEC.md 7.4), used by the CPU scalar path (reference/block_gemm.cpp) and the simt kernel
// (kernels/simt_gemm.cu): round |p| to 24 significant bits (RNE), then scale by 2^-shift, which is
// exact because every partial of an e4m3/e5m2 block (|p| >= 1 unit) stays a normal fp32.
#include <cstdint>

#include "reference/hd.hpp"

namespace fp8moe {

// 2^e as fp32 for -126 <= e <= 127.
FP8MOE_HD float pow2f(int e) { return f32_from_bits(static_cast<std::uint32_t>(e + 127) << 23); }

// fl32(p * 2^-shift), RNE, for |p| < 2^100 and shift <= 32.
FP8MOE_HD float i128_to_f32_scaled(__int128 p, int shift) {
  if (p == 0) return 0.0f;
  const bool neg = p < 0;
  unsigned __int128 m = neg ? static_cast<unsigned __int128>(-p) : static_cast<unsigned __int128>(p);
  int msb = 127;
  while (((m >> msb) & 1) == 0) --msb;
  float f;
  int e = -shift;
  if (msb <= 23) {
    f = static_cast<float>(static_cast<std::uint32_t>(m));  // exact
  } else {
    const int drop = msb - 23;
    unsigned __int128 q = m >> drop;
    const unsigned __int128 rem = m & ((static_cast<unsigned __int128>(1) << drop) - 1);
    const unsigned __int128 half = static_cast<unsigned __int128>(1) << (drop - 1);
    if (rem > half || (rem == half && (q & 1))) q += 1;
    f = static_cast<float>(static_cast<std::uint32_t>(q));  // q <= 2^24: exact
    e += drop;
  }
  f = f * pow2f(e);  // power-of-two scaling of a normal result: exact
  return neg ? -f : f;
}

}  // namespace fp8moe
