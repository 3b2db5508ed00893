#pragma once
// The engine's one description of a case (issue 17 item 1): what the op runner
// (sim/runner/op_runner.hpp) and the layer plans (sim/plans/layer_plan.hpp) execute. A scenario
// case (sim/sweep/case.hpp) is this plus its identity in a sweep; `fp8moe run` and `fp8moe sweep`
// build it through the same expansion, and tests may build it directly.
//
// A vocabulary header: it depends on reference/ and on the placement values only, so every layer
// of sim/ above the mesh can include it without pulling in communicators or plans.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/datagen.hpp"
#include "reference/gemm.hpp"
#include "reference/reduce.hpp"
#include "reference/tensor.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {

// The dtype in which FSDP2 all-gathers the parameters (reference/SPEC.md 11): bf16, or fp8 codes
// and scales with the passes run on the gathered fp8 weight.
enum class GatherDtype : std::uint8_t { bf16, fp8 };
const char* gather_dtype_name(GatherDtype g);
GatherDtype parse_gather_dtype(const std::string& s);  // "bf16" | "fp8"

// GEMM sizes of one op: E experts, M tokens, N output features of fwd, K its contracted dim.
struct OpShape {
  std::int64_t E = 1, M = 0, N = 0, K = 0;
};

// A case's inputs when the user gives them (the scenario key `inputs`) instead of generating them
// from the seed: global tensors in single-device layout. Op level A (M,K), W (E,N,K), grad_out
// (M,N); layer level x (M,D), w1, w3 (E,H,D), w2 (E,D,H), grad_y (M,D). An empty grad_out or
// grad_y is generated from the seed as it would be otherwise.
struct GivenTensors {
  std::vector<std::int32_t> offs;  // (E), as the file gives them
  TensorF A, W, grad_out;
  TensorF x, w1, w3, w2, grad_y;
};

struct CaseSpec {
  std::string mesh = "1";          // canonical Mesh::str(), "dp=2,tp=2"
  // op level: one grouped pass with explicit operand placements (sim/rules/sharding.hpp)
  Pass pass = Pass::fwd;
  Placements lhs, rhs;             // one per mesh dim
  // layer level: the SwiGLU expert block under a plan (single, dp, fsdp, tp, ep, fsdp+tp, dp+ep)
  std::string plan = "single";
  // shape: E experts, M routed tokens; op N, K; layer D (dim), H (hidden)
  int experts = 2;
  std::int64_t tokens = 256, n = 256, k = 256, dim = 256, hidden = 256;
  // (E) cumulative token ends, offs[E-1] = M, Replicate. Empty: make_offsets(tokens, experts,
  // routing, seed) (layer level; the op runner needs them given).
  std::vector<std::int32_t> offs;
  Routing routing;
  Dist dist = Dist::normal;
  std::uint64_t seed = 0;
  GemmOptions gemm;                // mode, promotion, output dtype, quant options, token-group padding
  ReduceOptions reduce;            // how Partial outputs (and Partial inputs) are reduced
  GatherDtype fsdp_gather = GatherDtype::bf16;
  bool fp8_dispatch = false;       // EP: x sent as 1x128 codes + scales, dequantized to bf16 on arrival
  float lr = 0;                    // layer level: one SGD step when > 0
  std::string backend = "reference";
  std::string inputs;                        // "FILE.h5[:GROUP]" the tensors came from; empty: generated
  std::shared_ptr<const GivenTensors> given;  // loaded from `inputs` by the application (null: generated)

  OpShape op_shape() const { return OpShape{experts, tokens, n, k}; }
  void set_op_shape(const OpShape& s) {
    experts = static_cast<int>(s.E);
    tokens = s.M;
    n = s.N;
    k = s.K;
  }
};

}  // namespace fp8moe::sim
