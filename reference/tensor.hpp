#pragma once
// A row-major host tensor: a shape and a flat vector. reference/ holds everything row-major; the
// store layout of the GPU kernels is their own concern (reference/SPEC.md 4.3).
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <vector>

#include "reference/error.hpp"

namespace fp8moe {

template <class T>
struct Tensor {
  std::vector<std::int64_t> shape;
  std::vector<T> data;

  Tensor() = default;
  explicit Tensor(std::vector<std::int64_t> s, T fill = T{}) : shape(std::move(s)), data(count(shape), fill) {}

  static std::size_t count(const std::vector<std::int64_t>& s) {
    std::int64_t n = 1;
    for (auto d : s) {
      if (d < 0) fail("tensor dimension ", d, " is negative");
      n *= d;
    }
    return static_cast<std::size_t>(n);
  }
  int rank() const { return static_cast<int>(shape.size()); }
  std::int64_t dim(int i) const { return shape.at(static_cast<std::size_t>(i)); }
  std::size_t numel() const { return data.size(); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }

  // 2-D (r, c) and 3-D (e, r, c) element access.
  T& operator()(std::int64_t r, std::int64_t c) { return data[static_cast<std::size_t>(r * shape[1] + c)]; }
  const T& operator()(std::int64_t r, std::int64_t c) const {
    return data[static_cast<std::size_t>(r * shape[1] + c)];
  }
  T& operator()(std::int64_t e, std::int64_t r, std::int64_t c) {
    return data[static_cast<std::size_t>((e * shape[1] + r) * shape[2] + c)];
  }
  const T& operator()(std::int64_t e, std::int64_t r, std::int64_t c) const {
    return data[static_cast<std::size_t>((e * shape[1] + r) * shape[2] + c)];
  }
};

using TensorF = Tensor<float>;
using TensorD = Tensor<double>;
using TensorU8 = Tensor<std::uint8_t>;

// The same values in double (exact: every float is a double).
inline TensorD to_double(const TensorF& t) {
  TensorD d;
  d.shape = t.shape;
  d.data.assign(t.data.begin(), t.data.end());
  return d;
}

inline std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + ")";
}

}  // namespace fp8moe
