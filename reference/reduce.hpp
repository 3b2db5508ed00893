#pragma once
// The deterministic reduction of a collective, once for every path that reduces: the fake
// communicator and the MPI and NCCL ones on the host (sim/comm/communicator.cpp reduce_chunk), and
// the GPU fake communicator's kernel (kernels/comm_reduce.cu). reference/SPEC.md 10.7.
//
// For element k of a chunk owned by ring position `owner` among n members:
//   member(s) = s                      (ascending)
//             = (owner + 1 + s) % n    (ring: the order a ring reduce-scatter adds in)
//   fp32: acc = in[member(0)][k];            acc = acc + in[member(s)][k]                 s = 1..n-1
//   bf16: acc = bf16(in[member(0)][k]);      acc = bf16(acc + bf16(in[member(s)][k]))
// Each add is one IEEE fp32 round-to-nearest add (add_rn: __fadd_rn on the device, never fused;
// the host build has -ffp-contract=off), bf16 the integer RNE of reference/formats.hpp. A NaN
// result is a NaN on both sides, its payload may differ (the GPU returns the canonical NaN).
#include <cstdint>
#include <string>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "reference/hd.hpp"
#include "reference/tensor_core.hpp"

namespace fp8moe {

enum class ReduceOrder : std::uint8_t { ascending, ring };
enum class ReduceDtype : std::uint8_t { fp32, bf16 };
struct ReduceOptions {
  ReduceOrder order = ReduceOrder::ascending;
  ReduceDtype dtype = ReduceDtype::fp32;
};

// The member added at step s (0 <= s < n) of a chunk owned by ring position `owner`.
FP8MOE_HD int reduce_member(ReduceOrder order, int owner, int n, int s) {
  return order == ReduceOrder::ascending ? s : (owner + 1 + s) % n;
}
// The running sum's start (step 0) and one step.
FP8MOE_HD float reduce_first(float x, bool bf16) { return bf16 ? round_bf16(x) : x; }
FP8MOE_HD float reduce_step(float acc, float x, bool bf16) {
  return bf16 ? round_bf16(add_rn(acc, round_bf16(x))) : add_rn(acc, x);
}

inline const char* reduce_order_name(ReduceOrder o) { return o == ReduceOrder::ascending ? "ascending" : "ring"; }
inline const char* reduce_dtype_name(ReduceDtype d) { return d == ReduceDtype::fp32 ? "fp32" : "bf16"; }
inline ReduceOrder parse_reduce_order(const std::string& s) {
  if (s == "ascending") return ReduceOrder::ascending;
  if (s == "ring") return ReduceOrder::ring;
  fail("unknown reduction order '", s, "': use ascending or ring");
}
inline ReduceDtype parse_reduce_dtype(const std::string& s) {
  if (s == "fp32") return ReduceDtype::fp32;
  if (s == "bf16") return ReduceDtype::bf16;
  fail("unknown reduce dtype '", s, "': use fp32 or bf16");
}

}  // namespace fp8moe
