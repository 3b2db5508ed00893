#include "reference/groups.hpp"

#include <algorithm>

namespace fp8moe {

void check_offsets(std::span<const std::int32_t> offs, std::int64_t M) {
  if (offs.empty()) fail("offsets are empty: give one cumulative end offset per expert (E >= 1)");
  // Shape of the list first (negative, decreasing), then its fit to the input.
  std::int32_t prev = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    if (offs[e] < 0) fail("offs[", e, "] = ", offs[e], " is negative: offsets are cumulative token counts");
    if (offs[e] < prev) {
      fail("offsets must not decrease: offs[", e, "] = ", offs[e], " < offs[", e - 1, "] = ", prev,
           " (give cumulative end offsets, not group sizes)");
    }
    prev = offs[e];
  }
  for (std::size_t e = 0; e < offs.size(); ++e) {
    if (offs[e] > M) fail("offs[", e, "] = ", offs[e], " exceeds the ", M, " tokens of the input");
  }
  if (prev != M) fail("the last offset is ", prev, " but there are ", M, " tokens: offs[E-1] must equal M");
}

bool groups_need_padding(std::span<const std::int32_t> offs, int block) {
  for (std::int32_t s : group_sizes(offs)) {
    if (s % block != 0) return true;
  }
  return false;
}

std::vector<std::int32_t> group_sizes(std::span<const std::int32_t> offs) {
  std::vector<std::int32_t> s(offs.size());
  std::int32_t prev = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    s[e] = offs[e] - prev;
    prev = offs[e];
  }
  return s;
}

PaddedGroups pad_groups(std::span<const std::int32_t> offs, int block) {
  PaddedGroups p;
  p.sizes = group_sizes(offs);
  const std::int64_t E = static_cast<std::int64_t>(offs.size());
  const std::int64_t tokens = offs.empty() ? 0 : offs.back();
  std::int32_t end = 0;
  for (std::int32_t s : p.sizes) {
    const std::int32_t padded = (s + block - 1) / block * block;
    p.padded_starts.push_back(end);
    end += padded;
    p.padded_ends.push_back(end);
  }
  p.rows = (tokens + E * block + block - 1) / block * block;
  p.row_expert.assign(static_cast<std::size_t>(p.rows), -1);
  for (std::size_t e = 0; e < p.sizes.size(); ++e) {
    std::fill_n(p.row_expert.begin() + p.padded_starts[e], p.sizes[e], static_cast<std::int32_t>(e));
  }
  return p;
}

TensorF pad_rows(const TensorF& x, std::span<const std::int32_t> offs, const PaddedGroups& p) {
  const std::int64_t C = x.dim(1);
  TensorF out({p.rows, C}, 0.0f);
  std::int64_t start = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    const std::int64_t n = offs[e] - start;
    std::copy_n(x.ptr() + start * C, n * C, out.ptr() + p.padded_starts[e] * C);
    start = offs[e];
  }
  return out;
}

}  // namespace fp8moe
