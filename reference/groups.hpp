#pragma once
// Token groups: int32 cumulative end offsets per expert (offs[E-1] = tokens), their validation,
// and token-group padding (reference/SPEC.md 5, torchao moe_training utils):
//   sizes = diff(offs); padded sizes = ceil(size/B)*B (0 stays 0); padded ends = cumsum;
//   starts = ends - padded sizes; the zero-filled buffer has ceil((tokens + E*B)/B)*B rows;
//   row -> expert marks pad rows -1. Example: offs [129,384,500] -> padded ends [256,512,640],
//   starts [0,256,512], 896 rows.
#include <cstdint>
#include <span>
#include <vector>

#include "reference/tensor.hpp"

namespace fp8moe {

// Throws an Error naming the offending offset when offs decrease, are negative, or do not end at M.
void check_offsets(std::span<const std::int32_t> offs, std::int64_t M);

std::vector<std::int32_t> group_sizes(std::span<const std::int32_t> offs);

// True when some expert's token count is not a multiple of `block`: the K-grouped wgrad
// quantizers then need token-group padding (what `pad = auto` resolves to).
bool groups_need_padding(std::span<const std::int32_t> offs, int block);

struct PaddedGroups {
  std::vector<std::int32_t> sizes;          // (E) real tokens per expert
  std::vector<std::int32_t> padded_starts;  // (E) first row of expert e in the padded buffer
  std::vector<std::int32_t> padded_ends;    // (E) cumulative padded ends: the padded buffer's offs
  std::int64_t rows = 0;                    // rows of the zero-filled buffer
  std::vector<std::int32_t> row_expert;     // (rows) expert of each padded row, -1 for pad rows
};

PaddedGroups pad_groups(std::span<const std::int32_t> offs, int block);

// (M, C) -> (rows, C): expert e's rows copied to padded_starts[e], the rest zero.
TensorF pad_rows(const TensorF& x, std::span<const std::int32_t> offs, const PaddedGroups& p);
// (rows, C) -> (M, C): the inverse, dropping pad rows.
template <class T>
Tensor<T> unpad_rows(const Tensor<T>& x, std::span<const std::int32_t> offs, const PaddedGroups& p) {
  const std::int64_t C = x.dim(1);
  const std::int64_t M = offs.empty() ? 0 : offs.back();
  Tensor<T> out({M, C});
  std::int64_t start = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    for (std::int64_t r = 0; r < offs[e] - start; ++r) {
      for (std::int64_t c = 0; c < C; ++c) out(start + r, c) = x(p.padded_starts[e] + r, c);
    }
    start = offs[e];
  }
  return out;
}

}  // namespace fp8moe
