#pragma once
// HDF5 input and output of `fp8moe gemm` (--inputs / --save). A file written by PyTorch with
// h5py and one written by fp8moe read the same way, the op-level layout of sim/sweep/inputs.hpp:
//   root (or GROUP): float32 datasets A (M,K), W (E,N,K), grad_out (M,N); int32 offs (E) as a
//   dataset or as an attribute of the group. bf16 stored as uint16 with attribute
//   dtype="bfloat16" and float16 are accepted too.
//   --save adds one group per mode label (e.g. "promote-fp32:deepgemm") holding out (M,N),
//   grad_A (M,K) and grad_W (E,N,K) for the passes that ran, plus attributes naming the options.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/tensor.hpp"
#include "results/output_file.hpp"

namespace fp8moe::cli {

struct GemmData {
  TensorF A;         // (M,K)
  TensorF W;         // (E,N,K)
  TensorF grad_out;  // (M,N)
  std::vector<std::int32_t> offs;  // (E)
};

struct ModeOutputs {
  std::string label;             // group name, e.g. "hp64", "promote-fp32:cublas"
  bool fp64 = false;             // store as float64 (hp64 / fp64 output) instead of float32
  std::optional<TensorD> out;     // (M,N)
  std::optional<TensorD> grad_A;  // (M,K)
  std::optional<TensorD> grad_W;  // (E,N,K)
};

// "FILE.h5" or "FILE.h5:GROUP". Validates ranks and shapes against each other and the offsets;
// errors name the file, the dataset and the expected shape.
GemmData load_gemm_inputs(const std::string& spec);

// The file part of "FILE.h5[:GROUP]" (what the --save path must not be).
std::string inputs_file(const std::string& spec);

// Writes inputs and outputs to `out` (checked and locked by the caller before the run) atomically:
// built in out.tmp() and published on success, so a failed or interrupted write never leaves a
// half-written result under its path.
void save_gemm_run(results::OutputFile& out, const GemmData& data, const std::vector<ModeOutputs>& outputs,
                   const std::vector<std::pair<std::string, std::string>>& attrs);

}  // namespace fp8moe::cli
