#pragma once
// Bitwise comparisons for the GPU suites: the number of differing elements and the first one, so a
// failure names the element (STYLE.md: seeds and context printed on failure).
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "reference/formats.hpp"

namespace fp8moe::test {

struct Diff {
  std::int64_t count = 0;
  std::int64_t first = -1;
  std::string first_desc;
  bool ok() const { return count == 0; }
};

inline bool is_nan_f(float x) { return x != x; }

// Equal bits, or both NaN (a NaN's sign and payload differ between x86 and the GPU).
inline Diff compare_floats(const std::vector<float>& want, const std::vector<float>& got) {
  Diff d;
  if (want.size() != got.size()) {
    d.count = -1;
    d.first_desc = "sizes differ: " + std::to_string(want.size()) + " vs " + std::to_string(got.size());
    return d;
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool same = f32_bits(want[i]) == f32_bits(got[i]) || (is_nan_f(want[i]) && is_nan_f(got[i]));
    if (!same && d.count++ == 0) {
      d.first = static_cast<std::int64_t>(i);
      std::ostringstream os;
      os.precision(9);
      os << "element " << i << ": cpu " << want[i] << " (0x" << std::hex << f32_bits(want[i]) << ") gpu " << std::dec
         << got[i] << " (0x" << std::hex << f32_bits(got[i]) << ")";
      d.first_desc = os.str();
    }
  }
  return d;
}

// Equal codes, or both NaN codes of `f` (sign may differ, see compare_floats).
inline Diff compare_codes(const std::vector<std::uint8_t>& want, const std::vector<std::uint8_t>& got, Fp8Format f) {
  Diff d;
  if (want.size() != got.size()) {
    d.count = -1;
    d.first_desc = "sizes differ: " + std::to_string(want.size()) + " vs " + std::to_string(got.size());
    return d;
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool same = want[i] == got[i] || (fp8_is_nan(want[i], f) && fp8_is_nan(got[i], f));
    if (!same && d.count++ == 0) {
      d.first = static_cast<std::int64_t>(i);
      std::ostringstream os;
      os << "element " << i << ": cpu 0x" << std::hex << int(want[i]) << " gpu 0x" << int(got[i]);
      d.first_desc = os.str();
    }
  }
  return d;
}

}  // namespace fp8moe::test
