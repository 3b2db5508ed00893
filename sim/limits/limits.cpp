#include "sim/limits/limits.hpp"

#include <algorithm>
#include <fstream>

namespace fp8moe::sim {

std::int64_t host_memory_estimate(const CaseSize& s) {
  // Floats of the inputs and intermediates, held by every rank (shards are at most whole
  // tensors) and by the three runs (plan, single device, hp64), outputs as doubles; the token
  // dim padded by 128 rows per expert. The factors 6 = 4 bytes x 1.5 (quantized copies).
  const auto mul = [](std::int64_t a, std::int64_t b) { return checked_mul(a, b, "the memory estimate"); };
  const auto add = [](std::int64_t a, std::int64_t b) { return checked_add(a, b, "the memory estimate"); };
  const std::int64_t M = add(s.tokens, mul(s.experts, 128));
  if (!s.layer) {
    const std::int64_t weights = mul(mul(s.experts, s.n), s.k);
    const std::int64_t in = add(mul(M, add(s.k, s.n)), weights);
    const std::int64_t out = s.pass == Pass::wgrad ? weights : mul(M, s.pass == Pass::fwd ? s.n : s.k);
    return add(mul(mul(6, in), add(s.world, 3)), mul(mul(8, out), add(s.world, 4)));
  }
  const std::int64_t MD = mul(M, s.dim), MH = mul(M, s.hidden), EHD = mul(mul(s.experts, s.hidden), s.dim);
  const std::int64_t tensors = add(add(mul(4, MD), mul(6, EHD)), mul(8, MH));
  return mul(mul(6, tensors), add(s.world, 3));
}

std::int64_t gemm_memory_estimate(std::int64_t experts, std::int64_t tokens, std::int64_t n, std::int64_t k,
                                  std::int64_t block, std::int64_t kept_outputs) {
  const auto mul = [](std::int64_t a, std::int64_t b) { return checked_mul(a, b, "the memory estimate"); };
  const auto add = [](std::int64_t a, std::int64_t b) { return checked_add(a, b, "the memory estimate"); };
  const std::int64_t M = add(tokens, mul(experts, block));  // padded rows
  const std::int64_t weights = mul(mul(experts, n), k);
  const std::int64_t in = add(add(mul(M, k), mul(M, n)), weights);
  const std::int64_t out = std::max({mul(tokens, n), mul(tokens, k), weights});
  // 12 = 4 bytes x 3 (the input, its padded copy, its codes and scales); 8 = fp64 outputs.
  return add(mul(12, in), mul(mul(8, out), add(3, kept_outputs)));
}

void check_token_offsets(std::int64_t tokens, std::int64_t experts, std::int64_t block, bool padded) {
  if (tokens > kMaxTokens) {
    fail("tokens = ", tokens, " exceeds the limit ", kMaxTokens, " of int32 token offsets (reference/SPEC.md 5.1)");
  }
  check_range(tokens, 0, kMaxTokens, "tokens");
  check_range(experts, 1, kMaxExperts, "experts");
  if (padded) {
    checked_add(tokens, checked_mul(experts, block, "experts x block"),
                "the padded token rows, tokens + experts x block (int32 offsets),", kMaxTokens);
  }
}

std::int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return -1;
}

void require_host_memory(std::int64_t need, const std::string& what, const std::string& fix) {
  const std::int64_t avail = available_memory();
  if (avail > 0 && need > avail) {
    fail(what, " needs about ", format_bytes(need), " (estimate) but this machine has ", format_bytes(avail),
         " available: ", fix);
  }
}

}  // namespace fp8moe::sim
