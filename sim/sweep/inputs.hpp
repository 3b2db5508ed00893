#pragma once
// User tensors as a case's inputs (issue 18 item 1: `fp8moe run --inputs`, the scenario key
// `inputs`, `fp8moe gemm --inputs`). One HDF5 layout, written by h5py from PyTorch or by fp8moe
// itself, in the root group or in GROUP of "FILE.h5:GROUP":
//   op level:    A (M,K), W (E,N,K), grad_out (M,N): those the pass reads (fwd A and W, dgrad
//                grad_out and W, wgrad grad_out and A); a missing grad_out is generated from the seed
//   layer level: x (M,D), w1 (E,H,D), w3 (E,H,D), w2 (E,D,H), grad_y (M,D) (optional, likewise)
//   both:        offs (E) int32 cumulative token ends, a dataset or an attribute of the group
// float32, float16, or bf16 stored as uint16 with the attribute dtype="bfloat16". The tensors are
// the global (single-device) ones: every rank takes its slice by the placements, as DTensor does.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/gemm.hpp"
#include "reference/tensor.hpp"
#include "sim/spec/case_spec.hpp"

namespace fp8moe::sim {

// What the expansion needs without reading the data: the offsets and the dims each level's
// datasets fix (absent: the file has no such dataset).
struct InputsShape {
  std::vector<std::int32_t> offs;
  std::int64_t experts = 0, tokens = 0;
  std::optional<std::int64_t> n, k;          // from W (E,N,K), else N from grad_out and K from A
  std::optional<std::int64_t> dim, hidden;   // from w1 (E,H,D)
  bool a = false, w = false, grad_out = false;
  bool layer = false;                        // x, w1, w3 and w2
  // Why the op-level pass p cannot run on these tensors (empty when it can).
  std::string op_missing(Pass p) const;
};
InputsShape read_inputs_shape(const std::string& spec);

// The op- or layer-level tensors of `spec`, checked against each other and the offsets (errors
// name the file, the dataset and the expected shape). Non-finite values are counted and refused
// (naming the dataset, the count and the first index) unless allow_nonfinite.
std::shared_ptr<const GivenTensors> load_inputs(const std::string& spec, const std::string& level,
                                                bool allow_nonfinite);

// The datasets of `names` that "FILE.h5[:GROUP]" holds, as float32 (fp64 datasets rounded), in
// `names` order; an error when it holds none of them.
std::vector<std::pair<std::string, TensorF>> read_named(const std::string& spec, const std::vector<std::string>& names);

// PREFIX_codes (uint8) and PREFIX_scales (float32) of "FILE.h5[:GROUP]" when both are there.
struct GivenQuantization {
  TensorU8 codes;
  TensorF scales;
};
std::optional<GivenQuantization> read_quantization(const std::string& spec, const std::string& prefix);

// The file part of "FILE.h5[:GROUP]".
std::string inputs_file(const std::string& spec);

}  // namespace fp8moe::sim
