#pragma once
// Checked size arithmetic (issue 16 defect 3): every product or sum of sizes that decides an
// allocation, a loop bound or an int32 offset goes through these, in 64 bits, against an explicit
// limit. A value past the limit (or past int64) throws fp8moe::Error naming the quantity, the
// operands and the limit, instead of wrapping into a small or negative size that later segfaults,
// runs as a different case or allocates until bad_alloc.
//   const std::int64_t rows = checked_add(tokens, checked_mul(E, B, "experts x block"), "padded rows", kInt32Max);
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "reference/error.hpp"

namespace fp8moe {

inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

// ceil(a / b) for a >= 0, b > 0 (blocks covering a extent): the one definition.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// `value` when lo <= value <= hi; otherwise an Error naming WHAT, the value and the bound.
inline std::int64_t check_range(std::int64_t value, std::int64_t lo, std::int64_t hi, std::string_view what) {
  if (value > hi) fail(what, " = ", value, " exceeds the limit ", hi);
  if (value < lo) fail(what, " = ", value, " is below the minimum ", lo);
  return value;
}

// a * b for non-negative sizes, refused when it exceeds `limit` (or int64).
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what, std::int64_t limit = kInt64Max) {
  std::int64_t r = 0;
  if (a < 0 || b < 0) fail(what, ": a negative size (", a, " x ", b, ")");
  if (__builtin_mul_overflow(a, b, &r)) fail(what, " = ", a, " x ", b, " is beyond 64 bits (limit ", limit, ")");
  if (r > limit) fail(what, " = ", a, " x ", b, " = ", r, " exceeds the limit ", limit);
  return r;
}

// a + b for non-negative sizes, refused when it exceeds `limit` (or int64).
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what, std::int64_t limit = kInt64Max) {
  std::int64_t r = 0;
  if (a < 0 || b < 0) fail(what, ": a negative size (", a, " + ", b, ")");
  if (__builtin_add_overflow(a, b, &r)) fail(what, " = ", a, " + ", b, " is beyond 64 bits (limit ", limit, ")");
  if (r > limit) fail(what, " = ", a, " + ", b, " = ", r, " exceeds the limit ", limit);
  return r;
}

// Bytes as "12.3 GiB" (or "512 B", "3.0 MiB"), for messages that name an estimate.
inline std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  if (u == 0) return cat(bytes, " B");
  const long tenths = static_cast<long>(v * 10 + 0.5);
  return cat(tenths / 10, ".", tenths % 10, " ", units[u]);
}

}  // namespace fp8moe
