// The cuBLASLt block-scaled grouped passes (kernels/cublaslt_grouped.hpp, through the
// cuda-cublaslt backend so that token padding is the backend's): against reference/'s
// promote-fp32/cublas (the bitwise-equal fraction is printed; SQNR >= 35 dB, DESIGN.md 3.8 "a
// tensor-core kernel vs the emulated path") and against hp64 at torchao's op-level floors.
// Label gpu: exits 77 without a device.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "reference/metrics.hpp"
#include "sim/backend/backend.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;

struct Case {
  const char* name;
  std::int64_t N, K;
  std::vector<std::int32_t> offs;
  bool pad;
};

TensorD run_pass(sim::Backend& be, Pass p, const Case& c, std::uint64_t seed, const GemmOptions& opt) {
  const std::int64_t M = c.offs.back(), E = static_cast<std::int64_t>(c.offs.size());
  const Dist dist = static_cast<Dist>(seed % 4);
  switch (p) {
    case Pass::fwd:
      return be.fwd(test::random_tensor({M, c.K}, seed, kTensorA, dist), test::random_tensor({E, c.N, c.K}, seed, kTensorW, dist),
                    c.offs, opt);
    case Pass::dgrad:
      return be.dgrad(test::random_tensor({M, c.N}, seed, kTensorGradOut, dist),
                      test::random_tensor({E, c.N, c.K}, seed, kTensorW, dist), c.offs, opt);
    case Pass::wgrad:
      return be.wgrad(test::random_tensor({M, c.N}, seed, kTensorGradOut, dist),
                      test::random_tensor({M, c.K}, seed, kTensorA, dist), c.offs, opt);
  }
  return {};
}

GemmOptions lt_options(bool pad, OutDtype out) {
  GemmOptions opt;
  opt.mode = Mode::promote_fp32;
  opt.promotion = Promotion::cublas;
  opt.out = out;
  opt.pad = pad;
  return opt;
}

// E random in 1..5, N and K multiples of 128, expert sizes multiples of 128 with empty ones.
Case random_case(std::mt19937_64& rng) {
  Case c{"random", 128 * static_cast<std::int64_t>(1 + rng() % 6), 128 * static_cast<std::int64_t>(1 + rng() % 6), {}, false};
  const int E = 1 + static_cast<int>(rng() % 5);
  std::int32_t end = 0;
  for (int e = 0; e < E; ++e) {
    end += rng() % 4 == 0 ? 0 : 128 * static_cast<std::int32_t>(1 + rng() % 4);
    c.offs.push_back(end);
  }
  if (end == 0) c.offs.back() = 128;
  return c;
}

const std::vector<Case> kTorchao{{"torchao E=2 [256,512]", 256, 256, {256, 512}, false},
                                 {"torchao E=3 [129,384,500] padded", 256, 256, {129, 384, 500}, true}};

TEST_CASE("cuBLASLt grouped passes vs reference promote-fp32/cublas: >= 35 dB, bitwise-equal fraction printed") {
  const std::uint64_t base = test::seed_for(601);
  CAPTURE(base);
  auto lt = sim::make_backend("cuda-cublaslt");
  auto cpu = sim::make_backend("reference");
  std::mt19937_64 rng(base);
  std::vector<Case> cases = kTorchao;
  for (int i = 0; i < 4; ++i) cases.push_back(random_case(rng));
  // Ragged, unpadded fwd/dgrad with an empty expert (wgrad needs whole 128-token groups).
  cases.push_back({"ragged E=4 [100,100,357,1000]", 384, 512, {100, 100, 357, 1000}, false});
  std::uint64_t n = 0;
  for (const Case& c : cases) {
    for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
      const bool ragged = std::string(c.name).rfind("ragged", 0) == 0;
      if (ragged && p == Pass::wgrad) continue;
      for (OutDtype out : {OutDtype::bf16, OutDtype::fp32}) {
        const std::uint64_t seed = base + n++;
        CAPTURE(c.name);
        CAPTURE(std::string(pass_name(p)));
        CAPTURE(std::string(out_dtype_name(out)));
        CAPTURE(c.N);
        CAPTURE(c.K);
        CAPTURE(shape_str(std::vector<std::int64_t>(c.offs.begin(), c.offs.end())));
        CAPTURE(seed);
        const GemmOptions opt = lt_options(c.pad, out);
        const TensorD want = run_pass(*cpu, p, c, seed, opt);
        const TensorD got = run_pass(*lt, p, c, seed, opt);
        REQUIRE(want.shape == got.shape);
        const Metrics m = compare(want.data, got.data);
        std::printf("cublaslt vs promote-fp32/cublas | %-34s | %-5s | %-4s | N=%-4lld K=%-4lld | bitwise-equal %.4f | %.2f dB\n",
                    c.name, pass_name(p), out_dtype_name(out), static_cast<long long>(c.N),
                    static_cast<long long>(c.K), m.bitwise_equal_frac, m.sqnr_db);
        CHECK(m.nonfinite == 0);
        CHECK(m.sqnr_db >= 35.0);  // NaN fails
      }
    }
  }
}

TEST_CASE("cuBLASLt grouped passes vs hp64 meet the torchao op-level floors (DESIGN.md 3.8)") {
  const std::uint64_t base = test::seed_for(602);
  CAPTURE(base);
  auto lt = sim::make_backend("cuda-cublaslt");
  auto cpu = sim::make_backend("reference");
  std::uint64_t n = 0;
  for (int rep = 0; rep < 3; ++rep) {
    for (const Case& c : kTorchao) {
      for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
        const std::uint64_t seed = base + n++;
        CAPTURE(c.name);
        CAPTURE(std::string(pass_name(p)));
        CAPTURE(seed);
        GemmOptions hp = lt_options(c.pad, OutDtype::bf16);
        hp.mode = Mode::hp64;
        hp.out = OutDtype::fp64;
        const TensorD truth = run_pass(*cpu, p, c, seed, hp);
        const TensorD got = run_pass(*lt, p, c, seed, lt_options(c.pad, OutDtype::bf16));
        const double db = sqnr_db(truth.data, got.data);
        const double floor = p == Pass::fwd ? 27.0 : 26.0;
        std::printf("cublaslt vs hp64 | %-34s | %-5s | %.2f dB (floor %.0f)\n", c.name, pass_name(p), db, floor);
        CHECK(db >= floor);
      }
    }
  }
}

TEST_CASE("cuda-cublaslt rejects what cuBLASLt block scaling cannot compute, with the reason") {
  GemmOptions opt = lt_options(false, OutDtype::bf16);
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).empty());
  opt.quant.format = Fp8Format::e5m2;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("e5m2") != std::string::npos);
  opt = lt_options(false, OutDtype::bf16);
  opt.promotion = Promotion::deepgemm;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("cublas") != std::string::npos);
  auto lt = sim::make_backend("cuda-cublaslt");
  const TensorF A({128, 256}, 1.0f), W({1, 128, 256}, 1.0f);
  const std::vector<std::int32_t> offs{128};
  CHECK_THROWS_WITH_AS(lt->fwd(A, W, offs, opt), doctest::Contains("promotion cublas"), Error);
}

}  // namespace
