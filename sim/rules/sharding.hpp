#pragma once
// Sharding rules of the grouped passes and of the quantizers (reference/SPEC.md 10.3, 10.4, after PyTorch
// DTensor's op strategies and torchao's MoE blockwise-FP8 DTensor coverage). Offsets are always
// Replicate. Operands of each pass:
//
// | pass  | lhs        | rhs        | out        | contracted dim |
// |-------|------------|------------|------------|----------------|
// | fwd   | A (M,K)    | W (E,N,K)  | out (M,N)  | K              |
// | dgrad | dOut (M,N) | W (E,N,K)  | dA (M,K)   | N              |
// | wgrad | dOut (M,N) | A (M,K)    | dW (E,N,K) | M (tokens)     |
//
// Strategies, one per mesh dim (lhs, rhs -> out):
// | strategy    | fwd                | dgrad              | wgrad              |
// |-------------|--------------------|--------------------|--------------------|
// | out-feature | R, S(1) -> S(1)    | R, S(2) -> S(1)    |                    |
// | contraction | S(1), S(2) -> P    | S(1), S(1) -> P    |                    |
// | wgrad-n     |                    |                    | S(1), R -> S(1)    |
// | wgrad-k     |                    |                    | R, S(1) -> S(2)    |
// | replicate   | R, R -> R          | R, R -> R          | R, R -> R          |
// Rejected at op level: a sharded token dim M (needs per-rank routing: the dp plan) and a sharded
// expert dim of W (needs the EP plan). A Partial input, or a combination no strategy takes, is
// redistributed into the strategy whose redistribution moves the fewest bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/gemm.hpp"
#include "reference/grouped_plan.hpp"
#include "reference/quantize.hpp"
#include "sim/spec/case_spec.hpp"
#include "sim/dtensor/dtensor.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {

enum class Strategy : std::uint8_t { out_feature, contraction, wgrad_n, wgrad_k, replicate };
const char* strategy_name(Strategy s);  // "out-feature", "contraction", "wgrad-n", "wgrad-k", "replicate"

std::vector<std::int64_t> lhs_shape(Pass p, const OpShape& s);  // fwd (M,K); dgrad, wgrad (M,N)
std::vector<std::int64_t> rhs_shape(Pass p, const OpShape& s);  // fwd, dgrad (E,N,K); wgrad (M,K)
std::vector<std::int64_t> out_shape(Pass p, const OpShape& s);  // fwd (M,N); dgrad (M,K); wgrad (E,N,K)
const char* lhs_name(Pass p);  // A | dOut | dOut
const char* rhs_name(Pass p);  // W | W | A
const char* out_name(Pass p);  // out | grad_A | grad_W

// One row of the table above.
struct StrategyRow {
  Strategy strategy;
  Placement lhs, rhs, out;
};
// The rows of pass p, in the order ties between equally cheap redistributions are broken
// (sharded strategies first, replicate last).
std::vector<StrategyRow> strategy_rows(Pass p);

enum class Verdict : std::uint8_t { direct, redistribute, reject };
const char* verdict_name(Verdict v);

struct ShardingDecision {
  Verdict verdict = Verdict::reject;
  std::vector<Strategy> strategy;          // (mesh ndim), unless rejected
  Placements lhs, rhs, out;                // the placements the pass runs on, and its output's
  std::vector<RedistStep> lhs_plan, rhs_plan;  // how the inputs get there (redistribute)
  std::int64_t redist_bytes = 0;           // plan_bytes of both plans
  std::string reason;                      // why not direct: the redistribution's cause or the rejection
};
// "wgrad-n" per mesh dim: "tp:out-feature" or "dp:replicate,tp:contraction".
std::string strategy_str(const std::vector<Strategy>& s, const Mesh& mesh);
std::string str(const ShardingDecision& d, const Mesh& mesh);

// Placements lists must have one entry per mesh dim and shard only dims the operand has (else an
// Error names the operand and the placement).
ShardingDecision decide(Pass p, const OpShape& shape, const Placements& lhs, const Placements& rhs, const Mesh& mesh,
                        const ReduceOptions& reduce = {});

// ---- Quantizers -----------------------------------------------------------------------------
// A quantizer keeps its input's placement; a transposing one (1x128T, 128x128T, kgrouped-lhs)
// swaps the two dims it transposes. Quantization is not linear: a Partial input is invalid.
struct QuantizerRule {
  bool valid = true;
  std::string reason;         // why not valid
  Placements codes;           // placements of the codes (the scales follow them)
  bool block_aligned = true;  // every local block is a block of the single-device quantization
  std::string misaligned;     // the first rank and dim whose blocks moved, and why
};
// Per input dim, the block's extent along it (1: every element of that dim is its own group).
// Dims of kgrouped recipes' token dim are blocked within each expert's group.
std::vector<int> recipe_block_extent(Recipe r, int block);
QuantizerRule quantizer_rule(Recipe r, const std::vector<std::int64_t>& shape, const Placements& in, const Mesh& mesh,
                             int block);

// The recipes a quantized pass applies to its operands: fp8moe::pass_recipes (reference/grouped_plan.hpp).
using fp8moe::pass_recipes;
using fp8moe::PassRecipes;

}  // namespace fp8moe::sim
