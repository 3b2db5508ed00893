// The GPU hp64 reference (kernels/hp64_gemm.hpp) against reference/'s hp64 (Eigen fp64) on random
// shapes with empty and ragged experts, all three passes. fp64 sums in another order differ by
// fp64 roundings only: >= 250 dB (the lowest SQNR seen is printed). Label gpu: exits 77 without a
// device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/check.hpp"
#include "kernels/hp64_gemm.hpp"
#include "reference/gemm.hpp"
#include "reference/metrics.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;

TEST_CASE("GPU hp64 grouped passes agree with the CPU hp64 to fp64 rounding (>= 250 dB)") {
  const std::uint64_t base = test::seed_for(611);
  CAPTURE(base);
  std::mt19937_64 rng(base);
  GemmOptions hp;
  hp.mode = Mode::hp64;
  hp.out = OutDtype::fp64;
  double lowest = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 12; ++rep) {
    const std::uint64_t seed = base + static_cast<std::uint64_t>(rep);
    const int E = 1 + static_cast<int>(rng() % 4);
    const std::int64_t N = 1 + static_cast<std::int64_t>(rng() % 400), K = 1 + static_cast<std::int64_t>(rng() % 400);
    std::vector<std::int32_t> offs;
    std::int32_t end = 0;
    for (int e = 0; e < E; ++e) {
      end += rng() % 4 == 0 ? 0 : static_cast<std::int32_t>(1 + rng() % 300);
      offs.push_back(end);
    }
    const std::int64_t M = end;
    const Dist dist = static_cast<Dist>(seed % 4);
    CAPTURE(seed);
    CAPTURE(E);
    CAPTURE(N);
    CAPTURE(K);
    CAPTURE(shape_str(std::vector<std::int64_t>(offs.begin(), offs.end())));
    const TensorF A = test::random_tensor({M, K}, seed, kTensorA, dist);
    const TensorF W = test::random_tensor({E, N, K}, seed, kTensorW, dist);
    const TensorF G = test::random_tensor({M, N}, seed, kTensorGradOut, dist);
    const kernels::DeviceBuffer<float> dA(A.data), dW(W.data), dG(G.data);
    for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
      CAPTURE(std::string(pass_name(p)));
      TensorD want;
      kernels::DeviceBuffer<double> out;
      if (p == Pass::fwd) {
        want = grouped_fwd(A, W, offs, hp);
        out = kernels::DeviceBuffer<double>(want.numel());
        kernels::hp64_grouped_fwd(dA.get(), dW.get(), M, N, K, offs, out.get());
      } else if (p == Pass::dgrad) {
        want = grouped_dgrad(G, W, offs, hp);
        out = kernels::DeviceBuffer<double>(want.numel());
        kernels::hp64_grouped_dgrad(dG.get(), dW.get(), M, N, K, offs, out.get());
      } else {
        want = grouped_wgrad(G, A, offs, hp);
        out = kernels::DeviceBuffer<double>(want.numel());
        kernels::hp64_grouped_wgrad(dG.get(), dA.get(), M, N, K, offs, out.get());
      }
      const std::vector<double> got = out.download();
      const Metrics m = compare(want.data, got);
      CHECK(m.nonfinite == 0);
      CHECK(m.sqnr_db >= 250.0);  // NaN fails; +inf when equal
      lowest = std::min(lowest, m.sqnr_db);
    }
  }
  std::printf("GPU hp64 vs CPU hp64: lowest SQNR over 36 passes %.1f dB\n", lowest);
}

}  // namespace
