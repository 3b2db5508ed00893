// The cuBLASLt block-scaled grouped passes (kernels/cublaslt_grouped.hpp, through the
// cuda-cublaslt backend so that token padding is the backend's): bitwise against reference/'s
// hopper-tc:cublas given the split-K count of each call (every output, bf16 and fp32, every pass,
// the shapes where cuBLASLt splits K included; the split counts seen are printed), and against
// hp64 at torchao's op-level floors; the per-tensor mode (fp8moe-bench-kernels' baseline) against
// a CPU product of the decoded codes. Label gpu: exits 77 without a device.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/cublaslt_grouped.hpp"
#include "kernels/quantize.hpp"
#include "reference/metrics.hpp"
#include "sim/backend/backend.hpp"
#include "support/test_support.hpp"
#include "tests/kernels/grouped_cases.hpp"

namespace {

using namespace fp8moe;

std::string fmt_int(std::int64_t v) { return std::to_string(v); }

using Case = test::GroupedCase;
using test::balanced_offs;
using test::run_grouped_pass;

GemmOptions lt_options(bool pad, OutDtype out) {
  GemmOptions opt;
  opt.mode = Mode::hopper_tc;
  opt.promotion = Promotion::cublas;
  opt.out = out;
  opt.pad = pad;
  return opt;
}

// E random in 1..5, N and K multiples of 128, expert sizes multiples of 128 with empty ones.
Case random_case(std::mt19937_64& rng) { return test::random_grouped_case(rng); }

const std::vector<Case> kTorchao{{"torchao E=2 [256,512]", 256, 256, {256, 512}, false},
                                 {"torchao E=3 [129,384,500] padded", 256, 256, {129, 384, 500}, true}};

// Runs one pass on cuBLASLt, then the model (the CPU reference, or cuda-simt's hopper-tc kernel,
// bitwise the CPU's, where the CPU would be slow) with the split counts cuBLASLt chose; returns
// the bitwise-equal fraction and prints one log line with the splits.
double check_bitwise(sim::Backend& lt, sim::Backend& cpu, Pass p, const Case& c, std::uint64_t seed, OutDtype out,
                     std::map<int, int>& seen) {
  GemmOptions opt = lt_options(c.pad, out);
  const TensorD got = run_grouped_pass(lt, p, c, seed, opt);
  opt.split_k = lt.last_split_k();
  std::string splits;
  for (const std::int32_t k : opt.split_k) {
    splits += fmt_int(k) + " ";
    ++seen[k];
  }
  const TensorD want = run_grouped_pass(cpu, p, c, seed, opt);
  REQUIRE(want.shape == got.shape);
  const Metrics m = compare(want.data, got.data);
  std::printf("cublaslt vs hopper-tc:cublas (%s) | %-34s | %-5s | %-4s | M=%-5d N=%-5lld K=%-5lld | splits %-12s| "
              "bitwise-equal %.6f | %.2f dB\n",
              cpu.name().c_str(), c.name, pass_name(p), out_dtype_name(out), c.offs.back(), static_cast<long long>(c.N),
              static_cast<long long>(c.K), splits.c_str(), m.bitwise_equal_frac, m.sqnr_db);
  CHECK(m.nonfinite == 0);
  CHECK(m.bitwise_equal_frac == 1.0);  // NaN fails
  bool split = false;
  for (const std::int32_t k : opt.split_k) split = split || k > 1;
  if (split) {
    std::printf("  cuBLASLt ran: %s\n", lt.last_algorithms().c_str());
    // The run rule measured: the model with runs cut in units of 1, 2 and 4 blocks.
    std::printf("  split-run unit candidates (%s %s, K blocks per expert:", pass_name(p), out_dtype_name(out));
    std::int32_t s0 = 0;
    for (const std::int32_t e : c.offs) {
      std::printf(" %d", p == Pass::wgrad ? (e - s0) / 128 : static_cast<int>((p == Pass::fwd ? c.K : c.N) / 128));
      s0 = e;
    }
    std::printf("):");
    for (int unit : {1, 2, 4}) {
      GemmOptions o = opt;
      o.split_unit = unit;
      const Metrics mu = compare(run_grouped_pass(cpu, p, c, seed, o).data, got.data);
      std::printf(" unit %d -> %.6f", unit, mu.bitwise_equal_frac);
    }
    std::printf("\n");
  }
  return m.bitwise_equal_frac;
}

void print_seen(const std::map<int, int>& seen) {
  std::printf("split-K counts seen (numSplitsK: expert calls):");
  for (const auto& [k, n] : seen) std::printf(" %d: %d", k, n);
  std::printf("\n");
}

TEST_CASE("cuBLASLt grouped passes equal reference hopper-tc:cublas bitwise, every output") {
  const std::uint64_t base = test::seed_for(601);
  CAPTURE(base);
  auto lt = sim::make_backend("cuda-cublaslt");
  auto cpu = sim::make_backend("reference");
  std::mt19937_64 rng(base);
  std::vector<Case> cases = kTorchao;
  for (int i = 0; i < 4; ++i) cases.push_back(random_case(rng));
  // Ragged, unpadded fwd/dgrad with an empty expert (wgrad needs whole 128-token groups).
  cases.push_back({"ragged E=4 [100,100,357,1000]", 384, 512, {100, 100, 357, 1000}, false});
  // K = 384, 640, 768: the 128x128 scale pitch roundup(K/128, 4) that torch 2.11 gets wrong
  cases.push_back({"pitch trap K=384", 256, 384, {128, 256}, false});
  cases.push_back({"pitch trap K=640", 128, 640, {256}, false});
  cases.push_back({"pitch trap K=768", 384, 768, {128, 384}, false});
  std::map<int, int> seen;
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
        CAPTURE(shape_str(std::vector<std::int64_t>(c.offs.begin(), c.offs.end())));
        CAPTURE(seed);
        check_bitwise(*lt, *cpu, p, c, seed, out, seen);
      }
    }
  }
  print_seen(seen);
}

TEST_CASE("cuBLASLt split-K (small M, long K: wgrad with long token groups) equals hopper-tc:cublas bitwise") {
  // fp8moe gives cuBLASLt a 32 MiB workspace, and with it the heuristic splits K for few rows and a
  // long contraction (reference/SPEC.md 15.3's measurement: 32 x 512 x 16384, 64 x 7168 x 16384). wgrad contracts
  // along tokens: long token groups with small N, K are its split candidates.
  const std::uint64_t base = test::seed_for(603);
  CAPTURE(base);
  auto lt = sim::make_backend("cuda-cublaslt");
  auto cpu = sim::make_backend("reference");
  auto simt = sim::make_backend("cuda-simt");
  std::map<int, int> seen;
  std::uint64_t n = 0;
  // On the CPU model itself: a split fwd with an empty expert, a split dgrad, a wgrad.
  for (const auto& [c, p] : {std::pair{Case{"fwd E=3 split (CPU model)", 512, 16384, {32, 32, 96}, false}, Pass::fwd},
                             std::pair{Case{"dgrad split (CPU model)", 8192, 512, {32}, false}, Pass::dgrad},
                             std::pair{Case{"wgrad long groups (CPU model)", 128, 128, {8192, 16384}, false}, Pass::wgrad}}) {
    for (OutDtype out : {OutDtype::bf16, OutDtype::fp32}) {
      const std::uint64_t seed = base + n++;
      CAPTURE(c.name);
      CAPTURE(seed);
      check_bitwise(*lt, *cpu, p, c, seed, out, seen);
    }
  }
  std::vector<std::pair<Case, Pass>> cases;
  for (std::int64_t M : {16, 32, 64}) {
    for (std::int64_t K : {8192, 16384}) {
      for (std::int64_t N : {512, 2048, 7168}) {
        cases.push_back({Case{"fwd split hunt", N, K, {static_cast<std::int32_t>(M)}, false}, Pass::fwd});
      }
      cases.push_back({Case{"dgrad split hunt", K, 512, {static_cast<std::int32_t>(M)}, false}, Pass::dgrad});
    }
  }
  // Token counts whose block counts make ceil(KB/S) odd for S = 3, 4 or 6 (8576 = 67 blocks,
  // 12416 = 97, 17152 = 134): there units of 1, 2 and 4 cut different runs.
  for (std::int32_t Me : {8576, 12416, 17152}) {
    cases.push_back({Case{"wgrad unit probe", 128, 128, {Me}, false}, Pass::wgrad});
  }
  for (std::int64_t N : {128, 256, 512}) {
    for (std::int32_t Me : {8192, 16384, 32768}) {
      cases.push_back({Case{"wgrad split hunt", N, 128, {Me}, false}, Pass::wgrad});
      cases.push_back({Case{"wgrad split hunt", N, 256, {Me / 2, Me}, false}, Pass::wgrad});
    }
  }
  for (const auto& [c, p] : cases) {
    for (OutDtype out : {OutDtype::bf16, OutDtype::fp32}) {
      const std::uint64_t seed = base + n++;
      CAPTURE(c.name);
      CAPTURE(std::string(pass_name(p)));
      CAPTURE(c.N);
      CAPTURE(c.K);
      CAPTURE(shape_str(std::vector<std::int64_t>(c.offs.begin(), c.offs.end())));
      CAPTURE(seed);
      check_bitwise(*lt, *simt, p, c, seed, out, seen);
    }
  }
  print_seen(seen);
}

// Expert sizes proportional to 1/(e+1)^1.1 (the zipf routing of scenarios/production.ini).
std::vector<std::int32_t> zipf_offs(int E, std::int64_t tokens) {
  std::vector<double> w(static_cast<std::size_t>(E));
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += w[static_cast<std::size_t>(e)] = std::pow(e + 1.0, -1.1);
  std::vector<std::int32_t> offs;
  double acc = 0;
  for (int e = 0; e < E; ++e) {
    acc += w[static_cast<std::size_t>(e)];
    offs.push_back(static_cast<std::int32_t>(std::llround(static_cast<double>(tokens) * acc / sum)));
  }
  offs.back() = static_cast<std::int32_t>(tokens);
  return offs;
}


TEST_CASE("production and bench shapes: cuBLASLt equals the hopper-tc:cublas model on the GPU bitwise") {
  // The model here is cuda-simt's hopper-tc kernel (bitwise the CPU model: test_kernels_simt_gemm)
  // given each call's split count: the CPU would take hours at these shapes.
  const std::uint64_t base = test::seed_for(604);
  CAPTURE(base);
  auto lt = sim::make_backend("cuda-cublaslt");
  auto simt = sim::make_backend("cuda-simt");
  using Big = test::GroupedShape;
  const std::vector<Big> shapes{
      // fp8moe bench's shapes (E, rows per expert, N, K)
      {{"bench (8,4096,4096,7168)", 4096, 7168, balanced_offs(8, 4096), false}, Pass::fwd, OutDtype::bf16},
      {{"bench (8,4096,7168,2048)", 7168, 2048, balanced_offs(8, 4096), false}, Pass::fwd, OutDtype::bf16},
      {{"bench (4,8192,4096,7168)", 4096, 7168, balanced_offs(4, 8192), false}, Pass::fwd, OutDtype::bf16},
      {{"bench (4,8192,4096,7168)", 4096, 7168, balanced_offs(4, 8192), false}, Pass::fwd, OutDtype::fp32},
      {{"bench (4,8192,4096,7168)", 4096, 7168, balanced_offs(4, 8192), false}, Pass::dgrad, OutDtype::bf16},
      {{"bench (4,8192,4096,7168)", 4096, 7168, balanced_offs(4, 8192), false}, Pass::wgrad, OutDtype::fp32},
      {{"bench (16,2048,5120,8192)", 5120, 8192, balanced_offs(16, 2048), false}, Pass::fwd, OutDtype::bf16},
      // scenarios/production.ini, one per model (zipf:1.1 routing, padded groups)
      {{"DeepSeek-V3 E=8 T=32768 4096x7168", 4096, 7168, zipf_offs(8, 32768), true}, Pass::fwd, OutDtype::bf16},
      {{"DeepSeek-V3 E=8 T=32768 4096x7168", 4096, 7168, zipf_offs(8, 32768), true}, Pass::wgrad, OutDtype::fp32},
      {{"DeepSeek-V3 w2 E=8 T=32768 7168x2048", 7168, 2048, zipf_offs(8, 32768), true}, Pass::dgrad, OutDtype::bf16},
      {{"Qwen3-MoE E=16 T=32768 3072x4096", 3072, 4096, zipf_offs(16, 32768), true}, Pass::fwd, OutDtype::bf16},
      {{"Mixtral E=8 T=16384 14336x4096", 14336, 4096, zipf_offs(8, 16384), true}, Pass::fwd, OutDtype::bf16},
  };
  std::map<int, int> seen;
  std::uint64_t n = 0;
  for (const Big& b : shapes) {
    const std::uint64_t seed = base + n++;
    CAPTURE(b.c.name);
    CAPTURE(std::string(pass_name(b.pass)));
    CAPTURE(seed);
    GemmOptions opt = lt_options(b.c.pad, b.out);
    const TensorD got = run_grouped_pass(*lt, b.pass, b.c, seed, opt);
    opt.split_k = lt->last_split_k();
    std::string splits;
    for (const std::int32_t k : opt.split_k) {
      splits += fmt_int(k) + " ";
      ++seen[k];
    }
    const TensorD want = run_grouped_pass(*simt, b.pass, b.c, seed, opt);
    REQUIRE(want.shape == got.shape);
    const Metrics m = compare(want.data, got.data);
    std::printf("cublaslt vs hopper-tc:cublas (GPU model) | %-38s | %-5s | %-4s | splits %s| %lld outputs | bitwise-equal "
                "%.6f | %.2f dB\n",
                b.c.name, pass_name(b.pass), out_dtype_name(b.out), splits.c_str(), static_cast<long long>(got.numel()),
                m.bitwise_equal_frac, m.sqnr_db);
    CHECK(m.nonfinite == 0);
    CHECK(m.bitwise_equal_frac == 1.0);
  }
  print_seen(seen);
}

TEST_CASE("cuBLASLt grouped passes vs hp64 meet the torchao op-level floors (SPEC.md 9.1)") {
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
        // Normal data: the floors' own (reference/SPEC.md 9.1).
        const TensorD truth = run_grouped_pass(*cpu, p, c, seed, hp, Dist::normal);
        const TensorD got = run_grouped_pass(*lt, p, c, seed, lt_options(c.pad, OutDtype::bf16), Dist::normal);
        const double db = sqnr_db(truth.data, got.data);
        const double floor = p == Pass::fwd ? 27.0 : 26.0;
        std::printf("cublaslt vs hp64 | %-34s | %-5s | %.2f dB (floor %.0f)\n", c.name, pass_name(p), db, floor);
        CHECK(db >= floor);
      }
    }
  }
}

// sum_k a(r, k) * b(c, k) over the decoded codes, in double: out(r, c) for a (R, ld, at a0) and
// b (C, ld, at b0), both K-contiguous with K elements from column k0.
std::vector<double> code_product(const std::vector<std::uint8_t>& a, std::int64_t a0, std::int64_t R,
                                 const std::vector<std::uint8_t>& b, std::int64_t b0, std::int64_t C, std::int64_t ld,
                                 std::int64_t K) {
  std::vector<double> out(static_cast<std::size_t>(R * C));
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        acc += static_cast<double>(fp8_decode(a[static_cast<std::size_t>(a0 + r * ld + k)], Fp8Format::e4m3)) *
               fp8_decode(b[static_cast<std::size_t>(b0 + c * ld + k)], Fp8Format::e4m3);
      }
      out[static_cast<std::size_t>(r * C + c)] = acc;
    }
  }
  return out;
}

TEST_CASE("cuBLASLt per-tensor mode (the bench baseline) is the product of the codes, block scales ignored") {
  const std::uint64_t seed = test::seed_for(603);
  CAPTURE(seed);
  const std::int64_t N = 256, K = 384;
  const std::vector<std::int32_t> offs{256, 256, 640};  // expert 1 empty
  const std::int64_t M = offs.back(), E = static_cast<std::int64_t>(offs.size());
  GemmOptions opt = lt_options(false, OutDtype::fp32);
  const auto upload = [](const TensorF& t) { return kernels::DeviceBuffer<float>(t.data); };
  const kernels::DeviceBuffer<float> a = upload(test::random_tensor({M, K}, seed, kTensorA, Dist::normal));
  const kernels::DeviceBuffer<float> w = upload(test::random_tensor({E, N, K}, seed, kTensorW, Dist::normal));
  const kernels::DeviceBuffer<float> g = upload(test::random_tensor({M, N}, seed, kTensorGradOut, Dist::normal));
  using kernels::Recipe;
  const auto q = [&](Recipe r, const kernels::DeviceBuffer<float>& x, std::vector<std::int64_t> shape) {
    const bool kg = r == Recipe::kgrouped_lhs;
    return kernels::quantize<float>(r, x.get(), shape, kg ? std::span<const std::int32_t>(offs) : std::span<const std::int32_t>{},
                                    opt.quant);
  };
  kernels::CublasLtGrouped lt;
  const auto check = [&](const char* pass, const std::vector<double>& want, const kernels::DeviceBuffer<float>& got_d) {
    CAPTURE(pass);
    const std::vector<float> got_f = got_d.download();
    const std::vector<double> got(got_f.begin(), got_f.end());
    const Metrics m = compare(want, got);
    std::printf("cublaslt per-tensor vs the codes' product | %-5s | %.2f dB\n", pass, m.sqnr_db);
    CHECK(m.nonfinite == 0);
    CHECK(m.sqnr_db >= 35.0);
  };
  {  // fwd: out (M,N), expert e's rows against W_e
    const auto aq = q(Recipe::act_lhs, a, {M, K}), wq = q(Recipe::weight_fwd, w, {E, N, K});
    kernels::DeviceBuffer<float> out(static_cast<std::size_t>(M * N));
    lt.fwd(aq, wq, offs, opt, out.get(), nullptr, kernels::LtScaling::per_tensor);
    const auto ac = aq.codes.download(), wc = wq.codes.download();
    std::vector<double> want;
    for (std::int64_t e = 0, s = 0; e < E; s = offs[static_cast<std::size_t>(e)], ++e) {
      const auto part = code_product(ac, s * K, offs[static_cast<std::size_t>(e)] - s, wc, e * N * K, N, K, K);
      want.insert(want.end(), part.begin(), part.end());
    }
    check("fwd", want, out);
  }
  {  // dgrad: dA (M,K) against W_e^T (K,N)
    const auto gq = q(Recipe::act_lhs, g, {M, N}), wq = q(Recipe::weight_dgrad, w, {E, N, K});
    kernels::DeviceBuffer<float> out(static_cast<std::size_t>(M * K));
    lt.dgrad(gq, wq, offs, opt, out.get(), nullptr, kernels::LtScaling::per_tensor);
    const auto gc = gq.codes.download(), wc = wq.codes.download();
    std::vector<double> want;
    for (std::int64_t e = 0, s = 0; e < E; s = offs[static_cast<std::size_t>(e)], ++e) {
      const auto part = code_product(gc, s * N, offs[static_cast<std::size_t>(e)] - s, wc, e * K * N, K, N, N);
      want.insert(want.end(), part.begin(), part.end());
    }
    check("dgrad", want, out);
  }
  {  // wgrad: dW_e (N,K) = dOut^T (N, tokens of e) . A^T (K, tokens of e)^T; the empty expert's is 0
    const auto gq = q(Recipe::kgrouped_lhs, g, {M, N}), aq = q(Recipe::kgrouped_lhs, a, {M, K});
    kernels::DeviceBuffer<float> out(static_cast<std::size_t>(E * N * K));
    lt.wgrad(gq, aq, offs, opt, out.get(), nullptr, kernels::LtScaling::per_tensor);
    const auto gc = gq.codes.download(), ac = aq.codes.download();
    std::vector<double> want;
    for (std::int64_t e = 0, s = 0; e < E; s = offs[static_cast<std::size_t>(e)], ++e) {
      const std::int64_t Me = offs[static_cast<std::size_t>(e)] - s;
      // rows n of dOut^T and k of A^T, each with stride M, the expert's tokens from column s
      const auto part = code_product(gc, s, N, ac, s, K, M, Me);
      want.insert(want.end(), part.begin(), part.end());
    }
    check("wgrad", want, out);
  }
}

TEST_CASE("cuda-cublaslt rejects what cuBLASLt block scaling cannot compute, with the reason") {
  GemmOptions opt = lt_options(false, OutDtype::bf16);
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).empty());
  opt.quant.format = Fp8Format::e5m2;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("e5m2") != std::string::npos);
  opt = lt_options(false, OutDtype::bf16);
  opt.promotion = Promotion::deepgemm;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("hopper-tc:cublas") != std::string::npos);
  opt = lt_options(false, OutDtype::bf16);
  opt.mode = Mode::promote_fp32;  // not cuBLASLt's arithmetic: refused, naming the model that is
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("use mode hopper-tc:cublas") != std::string::npos);
  auto lt = sim::make_backend("cuda-cublaslt");
  const TensorF A({128, 256}, 1.0f), W({1, 128, 256}, 1.0f);
  const std::vector<std::int32_t> offs{128};
  CHECK_THROWS_WITH_AS(lt->fwd(A, W, offs, opt), doctest::Contains("hopper-tc:cublas"), Error);
  opt = lt_options(false, OutDtype::bf16);
  opt.quant.block = 64;  // the model refuses it too, with the fix
  CHECK(sim::backend_unsupported("reference", opt).find("not block 64") != std::string::npos);
}

}  // namespace
