#pragma once
// The layout of one quantized operand as a value (reference/SPEC.md 4; CuTe's idea of a blockwise
// scale layout as a layout, not as index arithmetic at each use): codes (E, R, C) row-major, or
// (R, C) when not batched; blocks of block_rows x block_cols codes; one stored scale per block,
// scales (E, ceil(R / block_rows), ceil(C / block_cols)) row-major. The CPU and GPU quantizers
// take their shapes from quant_layout() (reference/quantize.hpp, the one recipe -> layout
// mapping), and code and scale indices come from here, on the host and on the device.
#include <cstdint>
#include <vector>

#include "reference/hd.hpp"

namespace fp8moe {

struct QuantLayout {
  bool batched = false;  // 3-D codes (E, R, C)
  std::int64_t batch = 1, rows = 0, cols = 0;
  int block_rows = 1, block_cols = 1;

  FP8MOE_HD std::int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  FP8MOE_HD std::int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  // The code of element (e, r, c), and the index of its block's scale.
  FP8MOE_HD std::int64_t code_index(std::int64_t e, std::int64_t r, std::int64_t c) const {
    return (e * rows + r) * cols + c;
  }
  FP8MOE_HD std::int64_t scale_index(std::int64_t e, std::int64_t r, std::int64_t c) const {
    return (e * scale_rows() + r / block_rows) * scale_cols() + c / block_cols;
  }
  std::int64_t code_count() const { return batch * rows * cols; }
  std::int64_t scale_count() const { return batch * scale_rows() * scale_cols(); }
  std::vector<std::int64_t> code_shape() const {
    return batched ? std::vector<std::int64_t>{batch, rows, cols} : std::vector<std::int64_t>{rows, cols};
  }
  std::vector<std::int64_t> scale_shape() const {
    return batched ? std::vector<std::int64_t>{batch, scale_rows(), scale_cols()}
                   : std::vector<std::int64_t>{scale_rows(), scale_cols()};
  }
  std::int64_t code_dim(std::size_t i) const { return code_shape().at(i); }
  bool operator==(const QuantLayout&) const = default;
};

}  // namespace fp8moe
