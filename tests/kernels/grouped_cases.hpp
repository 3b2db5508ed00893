#pragma once
// Grouped-GEMM test cases shared by the tensor-core backend suites (test_kernels_cublaslt,
// test_kernels_cutlass): a case (N, K, token groups, padding), one pass of it on a backend with
// keyed random data, random cases with empty experts, balanced token groups.
#include <cstdint>
#include <random>
#include <vector>

#include "sim/backend/backend.hpp"
#include "support/test_support.hpp"

namespace fp8moe::test {

struct GroupedCase {
  const char* name;
  std::int64_t N, K;
  std::vector<std::int32_t> offs;
  bool pad;
};

// One pass of case c on backend be: A (M,K), W (E,N,K), dOut (M,N) drawn from `seed` and `dist`.
inline TensorD run_grouped_pass(sim::Backend& be, Pass p, const GroupedCase& c, std::uint64_t seed, const GemmOptions& opt,
                                Dist dist) {
  const std::int64_t M = c.offs.back(), E = static_cast<std::int64_t>(c.offs.size());
  switch (p) {
    case Pass::fwd:
      return be.fwd(random_tensor({M, c.K}, seed, kTensorA, dist), random_tensor({E, c.N, c.K}, seed, kTensorW, dist), c.offs,
                    opt);
    case Pass::dgrad:
      return be.dgrad(random_tensor({M, c.N}, seed, kTensorGradOut, dist), random_tensor({E, c.N, c.K}, seed, kTensorW, dist),
                      c.offs, opt);
    case Pass::wgrad:
      return be.wgrad(random_tensor({M, c.N}, seed, kTensorGradOut, dist), random_tensor({M, c.K}, seed, kTensorA, dist),
                      c.offs, opt);
  }
  return {};
}

// The same with the distribution cycling with the seed (normal, uniform, Student-t, outlier
// channels), for the bitwise checks, which hold on any data. torchao's SQNR floors hold for normal
// data only (reference/SPEC.md 9.1: outlier channels fall below them on some seeds), so the floor
// checks pass Dist::normal to the overload above.
inline TensorD run_grouped_pass(sim::Backend& be, Pass p, const GroupedCase& c, std::uint64_t seed, const GemmOptions& opt) {
  return run_grouped_pass(be, p, c, seed, opt, static_cast<Dist>(seed % 4));
}

// E random in 1..5, N and K multiples of 128, expert sizes multiples of 128 with empty ones.
inline GroupedCase random_grouped_case(std::mt19937_64& rng) {
  GroupedCase c{"random", 128 * static_cast<std::int64_t>(1 + rng() % 6), 128 * static_cast<std::int64_t>(1 + rng() % 6), {},
                false};
  const int E = 1 + static_cast<int>(rng() % 5);
  std::int32_t end = 0;
  for (int e = 0; e < E; ++e) {
    end += rng() % 4 == 0 ? 0 : 128 * static_cast<std::int32_t>(1 + rng() % 4);
    c.offs.push_back(end);
  }
  if (end == 0) c.offs.back() = 128;
  return c;
}

// A case run for one pass and output type (the production-size checks against cuda-simt's model).
struct GroupedShape {
  GroupedCase c;
  Pass pass;
  OutDtype out;
};

inline std::vector<std::int32_t> balanced_offs(int E, std::int32_t rows) {
  std::vector<std::int32_t> offs;
  for (int e = 1; e <= E; ++e) offs.push_back(e * rows);
  return offs;
}

}  // namespace fp8moe::test
