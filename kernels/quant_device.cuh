#pragma once
// Device helpers shared by the quantization kernels (device code only; launchers live in the .cu
// files next to each kernel). The formula itself is reference/scale.hpp's (block_scale,
// quantize_pair), never re-derived here.
//
// Every kernel moves its input as 16-byte vectors of raw bits (uint4: 8 bf16 or 4 fp32) and
// takes the amax as an integer maximum of "keys": the magnitude bits of each element (bf16: the
// low 15 bits of its 16, fp32: the low 31 of its 32). Non-negative floats order like their bits,
// so for non-NaN input the largest key is the bits of max |x|, exactly amax_update's result
// (max is exact: the order of the reduction cannot change it); a NaN's key exceeds +Inf's, so a
// block with a NaN gets a NaN amax (its payload may differ from the CPU's, which reference/SPEC.md 3.3
// allows: a non-finite block is reported).
#include <cstdint>

#include "reference/scale.hpp"

namespace fp8moe::kernels::dev {

// Elements of T in one 16-byte vector.
template <class T>
inline constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));

__device__ __forceinline__ uint4 load16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// Element j of a raw vector as fp32 (bf16 widens exactly: its bits are the high half).
template <class T>
__device__ __forceinline__ float elem(const uint4& v, int j) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w[j]);
  } else {
    const std::uint32_t x = w[j >> 1];
    return __uint_as_float((j & 1) ? (x & 0xffff0000u) : (x << 16));
  }
}

// Two 16-bit lanes' unsigned max (one VIMNMX on sm_90).
__device__ __forceinline__ std::uint32_t max_u16x2(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  std::uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return __vmaxu2(a, b);
#endif
}

// The largest key of a vector, as an fp32 magnitude's bits (bf16 keys move to the high half).
template <class T>
__device__ __forceinline__ std::uint32_t vec_amax_bits(const uint4& v) {
  if constexpr (sizeof(T) == 4) {
    return max(max(v.x & 0x7fffffffu, v.y & 0x7fffffffu), max(v.z & 0x7fffffffu, v.w & 0x7fffffffu));
  } else {
    const std::uint32_t m = max_u16x2(max_u16x2(v.x & 0x7fff7fffu, v.y & 0x7fff7fffu),
                                      max_u16x2(v.z & 0x7fff7fffu, v.w & 0x7fff7fffu));
    return max(m << 16, m & 0xffff0000u);
  }
}

// Element j's key as fp32 magnitude bits.
template <class T>
__device__ __forceinline__ std::uint32_t elem_amax_bits(const uint4& v, int j) {
  return __float_as_uint(elem<T>(v, j)) & 0x7fffffffu;
}

// Elements [c0, c0 + V) of a row whose valid columns end at `limit`, as a raw vector: one 16-byte
// load when the whole vector is valid and aligned (kAligned: the row length is a multiple of V),
// else element by element with zeros past the end (|0| changes no amax).
template <class T, bool kAligned>
__device__ __forceinline__ uint4 load_row_vec(const T* row, std::int64_t c0, std::int64_t limit) {
  constexpr int V = kVecElems<T>;
  if (kAligned) return c0 < limit ? load16(row + c0) : make_uint4(0, 0, 0, 0);
  std::uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (c0 + j < limit) {
      if constexpr (sizeof(T) == 4) {
        w[j] = __float_as_uint(row[c0 + j]);
      } else {
        w[j >> 1] |= static_cast<std::uint32_t>(row[c0 + j]) << (16 * (j & 1));
      }
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Codes of a vector's elements with one multiplier each (adjacent elements paired in one cvt),
// packed little-endian: bf16 8 codes in a uint2, fp32 4 codes in .x.
template <class T, Fp8Format F>
__device__ __forceinline__ uint2 quantize_vec(const uint4& v, const float (&mult)[kVecElems<T>]) {
  constexpr int V = kVecElems<T>;
  std::uint32_t out[2] = {0, 0};
#pragma unroll
  for (int j = 0; j < V; j += 2) {
    const std::uint32_t p = quantize_pair<F>(elem<T>(v, j), mult[j], elem<T>(v, j + 1), mult[j + 1]);
    out[j >> 2] |= p << (16 * ((j >> 1) & 1));
  }
  return make_uint2(out[0], out[1]);
}

template <class T, Fp8Format F>
__device__ __forceinline__ uint2 quantize_vec(const uint4& v, float mult) {
  float m[kVecElems<T>];
#pragma unroll
  for (int j = 0; j < kVecElems<T>; ++j) m[j] = mult;
  return quantize_vec<T, F>(v, m);
}

// Stores the V codes quantize_vec packed (8 bytes for bf16, 4 for fp32); p is V-aligned.
template <class T>
__device__ __forceinline__ void store_codes(std::uint8_t* p, const uint2& q) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<std::uint32_t*>(p) = q.x;
  } else {
    *reinterpret_cast<uint2*>(p) = q;
  }
}

// The same codes byte by byte, those at or past `limit` columns from p dropped.
template <class T>
__device__ __forceinline__ void store_codes_partial(std::uint8_t* p, const uint2& q, std::int64_t limit) {
#pragma unroll
  for (int j = 0; j < kVecElems<T>; ++j) {
    if (j < limit) p[j] = static_cast<std::uint8_t>((j < 4 ? q.x : q.y) >> (8 * (j & 3)));
  }
}

}  // namespace fp8moe::kernels::dev
