#pragma once
// `fp8moe check` (issue 18 item 2): which arithmetic did a kernel or a framework compute? Every
// model (hp64, bf16, exact, torchao-emulated, promote-fp32 and hopper-tc in both promotion
// families) runs on the user's inputs, under the case's placement or plan (single device
// otherwise), and each output tensor the user supplied is compared with every model's: the
// bitwise-equal fraction, the largest distance in units in the last place of the output dtype, the
// SQNR, the model it equals bit for bit, and a reading in plain words.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/tensor.hpp"
#include "scenarios/scenario.hpp"

namespace fp8moe::sim {

// The models `check` computes by default, in the order they are tried for a verdict.
const std::vector<std::string>& check_models();

struct ModelMatch {
  std::string model;
  double bitwise_frac = 0;     // elements equal bit for bit (NaN equal to NaN)
  double max_ulp = 0;          // largest distance in ULPs of the output dtype
  double sqnr_db = 0;          // of the user's tensor against this model's
  std::int64_t mismatches = 0;
  // The first mismatching element: its coordinates, the model's value and the user's.
  std::vector<std::int64_t> first;
  double model_value = 0, user_value = 0;
  // Where the mismatches are, by 128x128 output tile (op level: tile of rows x cols of the 2-D
  // output, or (e, rows, cols) of a 3-D one): "block (e=1, rows 256-383, cols 128-255)" when one.
  std::string where;
};

struct TensorCheck {
  std::string tensor;             // out, grad_A, grad_W / y, dx, dw1, dw2, dw3
  std::vector<std::int64_t> shape;
  std::string dtype;              // bf16 when every value is a bf16 value, else fp32
  std::vector<ModelMatch> models; // in check_models() order
  std::vector<std::string> equal; // the models it equals bit for bit
  std::string reading;            // the verdict in words
  // Op level, when the outputs hold q/<pass>/{lhs,rhs}_{codes,scales} in fp8moe's layouts: each
  // operand's quantization against fp8moe's, bit for bit ("lhs A (1x128): codes equal, scales equal").
  std::vector<std::string> quantization;
};

struct CheckReport {
  std::string case_key;           // the case the models ran (the key of the last model run)
  std::vector<TensorCheck> tensors;
};

// Runs `models` (labels as scenario files write them) on the one case the flag values expand to
// (the key `inputs` must be among them) and compares with the tensors of `outputs`
// ("FILE.h5[:GROUP]"): op level out/grad_A/grad_W, layer level y/dx/dw1/dw2/dw3 (those present;
// at least one). Errors (fp8moe::Error) name the file, the tensor and the shape expected.
CheckReport run_check(const std::vector<scenarios::FlagValue>& flags, const std::vector<std::string>& models,
                      const std::string& outputs);

// --expect: "MODE" holds when every tensor equals MODE bit for bit; "MODE:DB" when every tensor's
// SQNR against MODE is at least DB. Returns why it does not hold (empty when it does).
std::string check_expectation(const CheckReport& r, const std::string& expect);

}  // namespace fp8moe::sim
