#pragma once
// Size and work limits of every command (issue 16 defects 3 and 4), in one place. Each command
// checks these before it allocates or loops over a size: a value past a limit is one message
// naming the value, the limit and the fix (exit 2), never a wrapped int, a hang or bad_alloc.
// The arithmetic is reference/checked.hpp's (64 bits, explicit limit).
#include <cstdint>
#include <string>

#include "reference/checked.hpp"
#include "reference/gemm.hpp"

namespace fp8moe::sim {

// Ranks of one mesh. The fake mesh holds every rank in one process and `run`/`list` walk the
// ranks, so a world far past any launch (a 65536-GPU job) is a typo, refused before any loop.
inline constexpr std::int64_t kMaxWorld = 65536;
// Dims of one mesh: op-level `lhs/rhs = all` enumerates (rank + 1)^ndim placements per operand,
// 12^ndim pairs per pass; 3 dims (1728 pairs: dp, tp and ep at once) is more than any plan uses,
// and 4 dims already take half a minute to list on a 256-rank mesh.
inline constexpr int kMaxMeshDims = 3;
// Experts of one case: offsets and per-expert loops are sized by E before any memory estimate
// can see them (DeepSeek-V3 has 256 routed experts).
inline constexpr std::int64_t kMaxExperts = 65536;
// Tokens, and the padded token rows tokens + E * block: offs are int32 (reference/SPEC.md 5.1).
inline constexpr std::int64_t kMaxTokens = kInt32Max;
// Expanded cases of all files together (torchao.ini expands to a few hundred).
inline constexpr std::int64_t kMaxCases = 1'000'000;

// What the host memory estimate of a case needs to know.
struct CaseSize {
  bool layer = false;    // op level otherwise
  Pass pass = Pass::fwd;  // op level
  std::int64_t world = 1, experts = 1, tokens = 0;
  std::int64_t n = 0, k = 0;          // op level
  std::int64_t dim = 0, hidden = 0;   // layer level
};

// A rough upper bound of the host bytes a case holds at once (inputs, every rank's shards, three
// sets of outputs), in checked 64-bit arithmetic: a product beyond 64 bits throws naming it.
std::int64_t host_memory_estimate(const CaseSize& s);

// `fp8moe gemm` on one device: A (M,K), W (E,N,K), grad_out (M,N) in fp32 with their padded and
// quantized working copies, per pass the hp64 and bf16 references and one mode's output in fp64,
// and `kept_outputs` more outputs (--save keeps every mode's). Checked like host_memory_estimate.
std::int64_t gemm_memory_estimate(std::int64_t experts, std::int64_t tokens, std::int64_t n, std::int64_t k,
                                  std::int64_t block, std::int64_t kept_outputs);

// Token offsets of `tokens` tokens over `experts` experts, padded to `block` when `padded`: both
// the offsets and the padded rows (tokens + experts * block) must fit int32. Throws naming them.
void check_token_offsets(std::int64_t tokens, std::int64_t experts, std::int64_t block, bool padded);

// The memory the machine can give a case (MemAvailable of /proc/meminfo), in bytes; -1 unknown.
std::int64_t available_memory();

// Throws "WHAT needs about X GiB but this machine has Y GiB available: FIX" when `need` exceeds
// the available memory (nothing when the machine does not say).
void require_host_memory(std::int64_t need, const std::string& what, const std::string& fix);

}  // namespace fp8moe::sim
