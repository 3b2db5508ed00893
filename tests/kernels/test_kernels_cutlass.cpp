// The CUTLASS grouped passes (kernels/cutlass_grouped.hpp, through the cuda-cutlass backend):
// bitwise against reference/'s hopper-tc:cublas on every output (bf16 and fp32, every pass, ragged
// and empty experts, unpadded ragged fwd/dgrad), at torchao's op-level floors against hp64, and
// which promotion family each pass follows (hopper-tc:deepgemm is printed alongside: fwd/dgrad
// must equal it too, wgrad tells the two act x act promotions apart). Large shapes are held against
// cuda-simt's hopper-tc kernel (bitwise the CPU model: test_kernels_simt_gemm). Label gpu: exits 77
// without a device. Built only where CUTLASS was found.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cutlass_grouped.hpp"
#include "kernels/quantize.hpp"
#include "kernels/simt_gemm.hpp"
#include "kernels/datagen.hpp"
#include "reference/metrics.hpp"
#include "sim/backend/backend.hpp"
#include "support/test_support.hpp"
#include "tests/kernels/grouped_cases.hpp"

namespace {

using namespace fp8moe;

using Case = test::GroupedCase;
using test::balanced_offs;
using test::run_grouped_pass;

GemmOptions tc_options(bool pad, OutDtype out, Promotion pr = Promotion::cublas) {
  GemmOptions opt;
  opt.mode = Mode::hopper_tc;
  opt.promotion = pr;
  opt.out = out;
  opt.pad = pad;
  return opt;
}

// Runs one pass on CUTLASS and on the model backend under hopper-tc:cublas and hopper-tc:deepgemm;
// prints one line; requires the cublas model bitwise (and deepgemm too for fwd/dgrad, where the
// two promotions are the same formula).
void check_bitwise(sim::Backend& cut, sim::Backend& model, Pass p, const Case& c, std::uint64_t seed, OutDtype out) {
  const TensorD got = run_grouped_pass(cut, p, c, seed, tc_options(c.pad, out));
  const TensorD want = run_grouped_pass(model, p, c, seed, tc_options(c.pad, out));
  const TensorD dg = run_grouped_pass(model, p, c, seed, tc_options(c.pad, out, Promotion::deepgemm));
  REQUIRE(want.shape == got.shape);
  const Metrics m = compare(want.data, got.data), md = compare(dg.data, got.data);
  std::printf("cutlass vs hopper-tc (%s) | %-30s | %-5s | %-4s | M=%-6d N=%-5lld K=%-5lld | bitwise cublas %.6f deepgemm %.6f "
              "| %.2f dB | %s\n",
              model.name().c_str(), c.name, pass_name(p), out_dtype_name(out), c.offs.back(), static_cast<long long>(c.N),
              static_cast<long long>(c.K), m.bitwise_equal_frac, md.bitwise_equal_frac, m.sqnr_db, cut.last_algorithms().c_str());
  CHECK(m.nonfinite == 0);
  CHECK(m.bitwise_equal_frac == 1.0);  // NaN fails
  if (p != Pass::wgrad) CHECK(md.bitwise_equal_frac == 1.0);
}

Case random_case(std::mt19937_64& rng) { return test::random_grouped_case(rng); }

// Outputs whose bits differ from the model's, and outputs that are not finite.
struct Differ {
  std::int64_t bits = 0, nonfinite = 0;
};
template <class T>
Differ count_differ(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  Differ d;
  for (std::size_t i = 0; i < got.size(); ++i) {
    d.bits += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
    d.nonfinite += !std::isfinite(got[i]);
  }
  return d;
}

// bf16 output bits as their values, in the model's element type (double or float).
template <class T>
std::vector<T> bf16_values(const std::vector<std::uint16_t>& bits) {
  std::vector<T> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = bf16_to_f32(bits[i]);
  return v;
}

TEST_CASE("CUTLASS grouped passes equal reference hopper-tc:cublas bitwise, every output") {
  const std::uint64_t base = test::seed_for(621);
  CAPTURE(base);
  auto cut = sim::make_backend("cuda-cutlass");
  auto cpu = sim::make_backend("reference");
  std::mt19937_64 rng(base);
  std::vector<Case> cases{{"torchao E=2 [256,512]", 256, 256, {256, 512}, false},
                          {"torchao E=3 [129,384,500] padded", 256, 256, {129, 384, 500}, true}};
  for (int i = 0; i < 5; ++i) cases.push_back(random_case(rng));
  // Ragged, unpadded fwd/dgrad with an empty expert and single rows (TMA bounds them; no padding).
  cases.push_back({"ragged E=5 [1,100,100,357,1000]", 384, 512, {1, 100, 100, 357, 1000}, false});
  cases.push_back({"K=384 N=640", 640, 384, {128, 256}, false});
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
        check_bitwise(*cut, *cpu, p, c, seed, out);
      }
    }
  }
}

TEST_CASE("production and bench shapes: CUTLASS equals the hopper-tc:cublas model on the GPU bitwise") {
  const std::uint64_t base = test::seed_for(622);
  CAPTURE(base);
  auto cut = sim::make_backend("cuda-cutlass");
  auto simt = sim::make_backend("cuda-simt");
  using Big = test::GroupedShape;
  // (fp32 wgrad at (4,8192,4096,7168): the fp32-output case below, per fold.)
  const std::vector<Big> shapes{
      {{"bench (4,8192,4096,7168)", 4096, 7168, balanced_offs(4, 8192), false}, Pass::fwd, OutDtype::bf16},
      {{"bench (8,4096,7168,2048)", 7168, 2048, balanced_offs(8, 4096), false}, Pass::dgrad, OutDtype::bf16},
      {{"bench (4,8192,4096,7168)", 4096, 7168, balanced_offs(4, 8192), false}, Pass::wgrad, OutDtype::bf16},
      {{"deepseek-v3-like E=8 ragged", 2048, 7168, {3000, 3000, 5200, 9000, 9100, 12000, 15000, 16384}, false}, Pass::fwd,
       OutDtype::bf16},
  };
  std::uint64_t n = 0;
  for (const Big& b : shapes) {
    const std::uint64_t seed = base + n++;
    CAPTURE(b.c.name);
    CAPTURE(std::string(pass_name(b.pass)));
    CAPTURE(seed);
    check_bitwise(*cut, *simt, b.pass, b.c, seed, b.out);
  }
}

TEST_CASE("CUTLASS at torchao's op-level floors against the bf16 reference") {
  const std::uint64_t seed = test::seed_for(623);
  CAPTURE(seed);
  auto cut = sim::make_backend("cuda-cutlass");
  auto cpu = sim::make_backend("reference");
  const Case c{"torchao E=2 [256,512]", 256, 256, {256, 512}, false};
  GemmOptions bf;
  bf.mode = Mode::bf16;
  for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
    // Normal data: the floors hold for it (reference/SPEC.md 9.1); on outlier channels wgrad fell to
    // 24.9 dB for one seed, bitwise the CPU model (round 10).
    const Metrics m = compare(run_grouped_pass(*cpu, p, c, seed, bf, Dist::normal).data,
                              run_grouped_pass(*cut, p, c, seed, tc_options(false, OutDtype::bf16), Dist::normal).data);
    std::printf("cutlass %s vs bf16: %.2f dB\n", pass_name(p), m.sqnr_db);
    CHECK(m.nonfinite == 0);
    CHECK(m.sqnr_db >= (p == Pass::fwd ? 27.0 : 26.0));  // reference/SPEC.md 9.1's torchao op floors
  }
}

TEST_CASE("every CUTLASS kernel configuration equals the hopper-tc:cublas model bitwise") {
  // Schedules (cooperative 128x128, ping-pong 64x128), mainloops (CUTLASS's fold after each wgmma,
  // fp8moe's under the next one or after its own), tile widths (128; 160 and 192, which straddle
  // two 128-wide weight blocks in fwd/dgrad: at N = 384 the block boundary falls 128, 96 or 64
  // columns into a 160-wide tile, 128 or 64 into a 192-wide one) and tile walks: the arithmetic
  // per output element must not depend on any of them. k-block counts 1 to 5 (odd and even: fp8moe's mainloop pairs its partials) and
  // an empty expert; the model is the CPU reference on the same codes.
  const std::uint64_t seed = test::seed_for(624);
  CAPTURE(seed);
  const std::vector<std::int32_t> offs{128, 128, 640, 1024};  // tokens per expert 128, 0, 512, 384
  const std::int64_t M = offs.back(), N = 384, K = 640, E = static_cast<std::int64_t>(offs.size());
  const auto up = [](const TensorF& t) { return kernels::DeviceBuffer<float>(t.data); };
  const kernels::DeviceBuffer<float> a = up(test::random_tensor({M, K}, seed, kTensorA, Dist::normal));
  const kernels::DeviceBuffer<float> w = up(test::random_tensor({E, N, K}, seed, kTensorW, Dist::normal));
  const kernels::DeviceBuffer<float> g = up(test::random_tensor({M, N}, seed, kTensorGradOut, Dist::normal));
  GemmOptions opt = tc_options(false, OutDtype::bf16);
  const QuantOptions& q = opt.quant;
  using kernels::quantize;
  const auto a_q = quantize<float>(Recipe::act_lhs, a.get(), {M, K}, {}, q);
  const auto w_q = quantize<float>(Recipe::weight_fwd, w.get(), {E, N, K}, {}, q);
  const auto g_q = quantize<float>(Recipe::act_lhs, g.get(), {M, N}, {}, q);
  const auto wt_q = quantize<float>(Recipe::weight_dgrad, w.get(), {E, N, K}, {}, q);
  const auto gt_q = quantize<float>(Recipe::kgrouped_lhs, g.get(), {M, N}, offs, q);
  const auto at_q = quantize<float>(Recipe::kgrouped_lhs, a.get(), {M, K}, offs, q);
  using kernels::CutlassKernel;
  using kernels::CutlassSchedule;
  using kernels::ScaleKind;
  // Every built kernel (kernels/cutlass_kernels.def) in three tile walks.
  std::vector<std::pair<ScaleKind, CutlassKernel>> configs;
  for (const kernels::CutlassBuiltKernel& b : kernels::cutlass_built_kernels()) {
    for (const auto& [r, w] : {std::pair{kernels::CutlassRaster::along_m, 1}, std::pair{kernels::CutlassRaster::along_n, 2},
                               std::pair{kernels::CutlassRaster::along_m, 8}}) {
      CutlassKernel k = b.kernel;
      k.raster = r;
      k.swizzle = w;
      configs.emplace_back(b.kind, k);
    }
  }
  REQUIRE(configs.size() >= 3 * 16);
  kernels::CutlassGrouped cut;
  // Each configuration twice on the same buffers: the second launch reruns the first's CUTLASS
  // object (CutlassScratch) and must write the same bits.
  const auto each = [&](const char* pass, OutDtype out, const TensorD& want,
                        const std::function<void(void*)>& call) {
    CAPTURE(pass);
    CAPTURE(std::string(out_dtype_name(out)));
    const auto n = want.data.size();
    const ScaleKind kind = std::string(pass) == "wgrad" ? ScaleKind::act_act : ScaleKind::act_weight;
    const auto run_once = [&](kernels::DeviceBuffer<std::uint16_t>& x16, kernels::DeviceBuffer<float>& x32) {
      if (out == OutDtype::bf16) {
        x16.fill_sentinel();
        call(x16.get());
        return bf16_values<double>(x16.download());
      }
      x32.fill_sentinel();
      call(x32.get());
      const std::vector<float> h = x32.download();
      return std::vector<double>(h.begin(), h.end());
    };
    for (const auto& [kk, k] : configs) {
      if (kk != kind || !kernels::cutlass_built(kind, k, out)) continue;
      cut.set_kernel(k);
      kernels::DeviceBuffer<std::uint16_t> x16(n);
      kernels::DeviceBuffer<float> x32(n);
      const Differ d = count_differ(run_once(x16, x32), want.data);
      const std::int64_t reused = cut.reused_launches();
      // Reuse the heap the launch freed (small blocks filled with 0xFF), so that a rerun reading
      // host memory the first launch no longer owns reads garbage (it once read its freed host
      // problem shapes and sized the grid from them: "Error Internal" in the CLI, not here).
      std::vector<std::vector<std::uint8_t>> churn;
      for (int i = 0; i < 256; ++i) churn.emplace_back(static_cast<std::size_t>(8 + (i % 64) * 8), std::uint8_t{0xFF});
      const Differ again = count_differ(run_once(x16, x32), want.data);
      std::printf("cutlass config vs hopper-tc:cublas | %-5s | %-4s | %lld of %zu outputs differ (rerun %lld) | %s\n", pass,
                  out_dtype_name(out), static_cast<long long>(d.bits), n, static_cast<long long>(again.bits),
                  cut.last_config().c_str());
      CAPTURE(cut.last_config());
      CHECK(d.bits == 0);
      CHECK(d.nonfinite == 0);
      CHECK(again.bits == 0);
      CHECK(cut.reused_launches() == reused + 1);
    }
  };
  for (OutDtype out : {OutDtype::bf16, OutDtype::fp32}) {
    opt.out = out;
    each("fwd", out, grouped_fwd_q(a_q.to_host(), w_q.to_host(), offs, opt),
         [&](void* o) { cut.fwd(a_q, w_q, offs, opt, o); });
    each("dgrad", out, grouped_dgrad_q(g_q.to_host(), wt_q.to_host(), offs, opt),
         [&](void* o) { cut.dgrad(g_q, wt_q, offs, opt, o); });
    each("wgrad", out, grouped_wgrad_q(gt_q.to_host(), at_q.to_host(), offs, opt),
         [&](void* o) { cut.wgrad(gt_q, at_q, offs, opt, o); });
  }
  // Configurations outside the built ones are refused, naming the fix.
  opt.out = OutDtype::fp32;
  kernels::DeviceBuffer<float> f(static_cast<std::size_t>(M * N));
  cut.set_kernel(CutlassKernel{CutlassSchedule::pingpong});
  CHECK_THROWS_WITH_AS(cut.fwd(a_q, w_q, offs, opt, f.get()), doctest::Contains("is not built for fp32 output"), Error);
  cut.set_kernel(CutlassKernel{CutlassSchedule::cooperative, kernels::CutlassFold::under_next_mma, kernels::CutlassRaster::along_m,
                               1, kernels::CutlassCluster::m2n1});
  CHECK_THROWS_WITH_AS(cut.fwd(a_q, w_q, offs, opt, f.get()), doctest::Contains("cluster 2x1x1"), Error);
  cut.set_kernel(CutlassKernel{CutlassSchedule::cooperative, kernels::CutlassFold::after_mma,
                               kernels::CutlassRaster::along_m, 3});
  CHECK_THROWS_WITH_AS(cut.fwd(a_q, w_q, offs, opt, f.get()), doctest::Contains("1, 2, 4 or 8"), Error);
  // A 192-wide tile only with fp8moe's one-partial mainloop, bf16 output; the message lists what is built.
  cut.set_kernel(CutlassKernel{CutlassSchedule::cooperative, kernels::CutlassFold::after_mma_own,
                               kernels::CutlassRaster::along_m, 1, kernels::CutlassCluster::m1n2, 192});
  CHECK_THROWS_WITH_AS(cut.fwd(a_q, w_q, offs, opt, f.get()), doctest::Contains("tile 128x192x128"), Error);
  opt.out = OutDtype::bf16;
  kernels::DeviceBuffer<std::uint16_t> h(static_cast<std::size_t>(M * N));
  cut.set_kernel(CutlassKernel{CutlassSchedule::cooperative, kernels::CutlassFold::under_next_mma,
                               kernels::CutlassRaster::along_m, 1, kernels::CutlassCluster::m1n2, 192});
  CHECK_THROWS_WITH_AS(cut.fwd(a_q, w_q, offs, opt, h.get()), doctest::Contains("co/f1/n192 (bf16)"), Error);
  // A rerun through the argument cache repeats the weight scales again (each fwd tile whose width
  // is not a multiple of 128): new scale values under the same pointers must reach the kernel.
  auto w2_q = quantize<float>(Recipe::weight_fwd, w.get(), {E, N, K}, {}, q);
  int wide = 0;
  for (const kernels::CutlassBuiltKernel& b : kernels::cutlass_built_kernels()) {
    if (!kernels::cutlass_straddles(b.kind, b.kernel.tile_n)) continue;
    ++wide;
    cut.set_kernel(b.kernel);
    cut.fwd(a_q, w2_q, offs, opt, h.get());
    std::vector<float> halved = w2_q.scales.download();
    for (float& v : halved) v *= 0.5f;
    w2_q.scales.upload(halved);
    const std::int64_t reused = cut.reused_launches();
    h.fill_sentinel();
    cut.fwd(a_q, w2_q, offs, opt, h.get());
    CAPTURE(cut.last_config());
    CHECK(cut.reused_launches() == reused + 1);
    const std::vector<double> got = bf16_values<double>(h.download());
    const Differ d = count_differ(got, grouped_fwd_q(a_q.to_host(), w2_q.to_host(), offs, opt).data);
    std::printf("cutlass fwd rerun with halved weight scales, same pointers | %lld of %zu outputs differ from the model | %s\n",
                static_cast<long long>(d.bits), got.size(), cut.last_config().c_str());
    CHECK(d.bits == 0);
    CHECK(d.nonfinite == 0);
  }
  if (wide == 0) std::printf("cutlass: no act_weight kernel with a tile width not a multiple of 128 built; no cached rerun checked\n");
}

TEST_CASE("production size: every built kernel equals the model bitwise") {
  // (E, rows per expert, N, K) = (4, 8192, 4096, 7168): wgrad under every kernel built for act_act
  // scales, fwd under every one built for act_weight (the 160- and 192-wide tiles' last column of
  // tiles is partial: 4096 = 25 x 160 + 96 = 21 x 192 + 64), bf16 and fp32 output where built,
  // cluster as built, walk along M in bands of 2; against cuda-simt's hopper-tc:cublas kernels
  // (bitwise the CPU model: test_kernels_simt_gemm). fp8moe's fold under the next wgmma with fp32 output differed from the
  // model on a few wgrad outputs here (kernels/cutlass_gemm.cuh; SPEC 15.5), which small shapes did
  // not show: it is not built.
  const std::uint64_t seed = test::seed_for(625);
  CAPTURE(seed);
  const std::vector<std::int32_t> offs = balanced_offs(4, 8192);
  const std::int64_t M = offs.back(), N = 4096, K = 7168, E = 4;
  GemmOptions opt = tc_options(false, OutDtype::fp32);
  using kernels::quantize;
  kernels::DeviceQuantized gt_q, at_q, ar_q, a_q, w_q;
  {
    const auto g = kernels::generate_device({M, N}, Dist::normal, seed, kTensorGradOut);
    const auto a = kernels::generate_device({M, K}, Dist::normal, seed, kTensorA);
    const auto w = kernels::generate_device({E, N, K}, Dist::normal, seed, kTensorW);
    gt_q = quantize<float>(Recipe::kgrouped_lhs, g.get(), {M, N}, offs, opt.quant);
    at_q = quantize<float>(Recipe::kgrouped_lhs, a.get(), {M, K}, offs, opt.quant);
    ar_q = quantize<float>(Recipe::kgrouped_rhs, a.get(), {M, K}, offs, opt.quant);
    a_q = quantize<float>(Recipe::act_lhs, a.get(), {M, K}, {}, opt.quant);
    w_q = quantize<float>(Recipe::weight_fwd, w.get(), {E, N, K}, {}, opt.quant);
  }
  kernels::CutlassGrouped cut;
  const auto check_all = [&](Pass pass, auto zero) {
    using T = decltype(zero);  // float, or std::uint16_t for bf16 bits
    opt.out = std::is_same_v<T, float> ? OutDtype::fp32 : OutDtype::bf16;
    CAPTURE(std::string(pass_name(pass)));
    CAPTURE(std::string(out_dtype_name(opt.out)));
    const auto n = static_cast<std::size_t>(pass == Pass::wgrad ? E * N * K : M * N);
    const auto call = [&](auto* out) {
      if (pass == Pass::wgrad) {
        cut.wgrad(gt_q, at_q, offs, opt, out);
      } else {
        cut.fwd(a_q, w_q, offs, opt, out);
      }
    };
    kernels::DeviceBuffer<float> model(n);  // the output type's values (bf16-rounded for bf16)
    kernels::DeviceBuffer<T> got(n);
    model.fill_sentinel();
    if (pass == Pass::wgrad) {
      kernels::simt_grouped_wgrad(gt_q, ar_q, offs, opt, model.get());
    } else {
      kernels::simt_grouped_fwd(a_q, w_q, offs, opt, model.get());
    }
    const std::vector<float> want = model.download();
    const kernels::ScaleKind kind = pass == Pass::wgrad ? kernels::ScaleKind::act_act : kernels::ScaleKind::act_weight;
    int ran = 0;
    for (const kernels::CutlassBuiltKernel& b : kernels::cutlass_built_kernels()) {
      if (b.kind != kind || (opt.out == OutDtype::fp32 && !b.fp32)) continue;
      kernels::CutlassKernel k = b.kernel;
      k.raster = kernels::CutlassRaster::along_m;
      k.swizzle = 2;
      cut.set_kernel(k);
      got.fill_sentinel();
      call(got.get());
      ++ran;
      Differ d;
      if constexpr (std::is_same_v<T, float>) {
        d = count_differ(got.download(), want);
      } else {
        d = count_differ(bf16_values<float>(got.download()), want);
      }
      std::printf("cutlass %s %s (4,8192,4096,7168) vs simt hopper-tc:cublas | %lld of %zu outputs differ | %s\n",
                  out_dtype_name(opt.out), pass_name(pass), static_cast<long long>(d.bits), n, cut.last_config().c_str());
      CAPTURE(cut.last_config());
      CHECK(d.bits == 0);
      CHECK(d.nonfinite == 0);
    }
    std::printf("cutlass %s %s (4,8192,4096,7168): %d built kernels checked\n", out_dtype_name(opt.out), pass_name(pass), ran);
    CHECK(ran >= 1);
  };
  for (Pass pass : {Pass::wgrad, Pass::fwd}) {
    check_all(pass, float{});
    check_all(pass, std::uint16_t{});
  }
}

TEST_CASE("cuda-cutlass refuses what it cannot compute, with the reason") {
  GemmOptions opt = tc_options(false, OutDtype::bf16);
  CHECK(sim::backend_unsupported("cuda-cutlass", opt).empty());
  opt.quant.format = Fp8Format::e5m2;
  CHECK(sim::backend_unsupported("cuda-cutlass", opt).find("e5m2") != std::string::npos);
  opt = tc_options(false, OutDtype::fp64);
  CHECK(sim::backend_unsupported("cuda-cutlass", opt).find("fp64") != std::string::npos);
  opt = tc_options(false, OutDtype::bf16);
  opt.mode = Mode::promote_fp32;
  CHECK(sim::backend_unsupported("cuda-cutlass", opt).find("use mode hopper-tc:cublas") != std::string::npos);
  opt = tc_options(false, OutDtype::bf16);
  opt.quant.block = 64;
  CHECK_FALSE(sim::backend_unsupported("cuda-cutlass", opt).empty());
  auto cut = sim::make_backend("cuda-cutlass");
  const TensorF A({128, 256}, 1.0f), W({1, 128, 256}, 1.0f);
  const std::vector<std::int32_t> offs{128};
  opt.mode = Mode::promote_fp32;
  opt.quant.block = 128;
  CHECK_THROWS_WITH_AS(cut->fwd(A, W, offs, opt), doctest::Contains("hopper-tc:cublas"), Error);
}

}  // namespace
