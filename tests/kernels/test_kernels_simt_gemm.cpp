// The simt grouped GEMM (kernels/simt_gemm.hpp) against reference/'s promote-fp32 and hopper-tc
// grouped_*_q: bitwise, all three passes, both promotion families, bf16 and fp32 output, e4m3 and
// e5m2, blocks 64/128/256, cuBLASLt's split-K runs, random shapes with empty and ragged experts.
// Label gpu: exits 77 without a device.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "gpu_compare.hpp"
#include "kernels/simt_gemm.hpp"
#include "reference/gemm.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;

// Expert sizes: some empty, ragged (any count) unless `multiple` (wgrad needs multiples of B).
std::vector<std::int32_t> random_offs(std::mt19937_64& rng, int E, int B, bool multiple, int kmul = 3) {
  std::vector<std::int32_t> offs;
  std::int32_t end = 0;
  for (int e = 0; e < E; ++e) {
    const int kind = static_cast<int>(rng() % 4);
    std::int32_t n = 0;
    if (kind != 0) n = multiple ? B * static_cast<std::int32_t>(1 + rng() % kmul) : static_cast<std::int32_t>(1 + rng() % 300);
    end += n;
    offs.push_back(end);
  }
  return offs;
}

std::vector<float> as_floats(const TensorD& t) {
  std::vector<float> f(t.numel());
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(t.data[i]);  // exact: bf16/fp32 values
  return f;
}

// One pass on CPU-quantized operands, both sides; bitwise comparison. long_k: contractions of up
// to 40 blocks (split-K runs need several), the other dims small.
void check_pass(Pass pass, std::uint64_t seed, const GemmOptions& opt, bool long_k = false) {
  std::mt19937_64 rng(seed);
  const int B = opt.quant.block;
  const int E = 1 + static_cast<int>(rng() % 4);
  const int kmul = long_k ? 40 : 3;
  const bool n_long = long_k && pass == Pass::dgrad, k_long = long_k && pass == Pass::fwd;
  const std::int64_t N = B * static_cast<std::int64_t>(1 + rng() % (n_long ? kmul : 3));
  const std::int64_t K = B * static_cast<std::int64_t>(1 + rng() % (k_long ? kmul : 3));
  const std::vector<std::int32_t> offs = random_offs(rng, E, B, pass == Pass::wgrad, long_k ? kmul : 3);
  const std::int64_t M = offs.back();
  CAPTURE(std::string(pass_name(pass)));
  CAPTURE(mode_label(opt.mode, opt.promotion));
  CAPTURE(std::string(out_dtype_name(opt.out)));
  CAPTURE(std::string(format_name(opt.quant.format)));
  CAPTURE(B);
  CAPTURE(E);
  CAPTURE(N);
  CAPTURE(K);
  CAPTURE(shape_str(std::vector<std::int64_t>(offs.begin(), offs.end())));
  const Dist dist = static_cast<Dist>(seed % 4);
  TensorD want;
  std::vector<float> got;
  if (pass == Pass::fwd) {
    const Quantized a = quantize_act_lhs(test::random_tensor({M, K}, seed, kTensorA, dist), opt.quant);
    const Quantized w =
        quantize_grouped_weight(test::random_tensor({E, N, K}, seed, kTensorW, dist), WeightOrientation::fwd, opt.quant);
    want = grouped_fwd_q(a, w, offs, opt);
    kernels::DeviceBuffer<float> out(static_cast<std::size_t>(M * N));
    kernels::simt_grouped_fwd(kernels::upload(a), kernels::upload(w), offs, opt, out.get());
    got = out.download();
  } else if (pass == Pass::dgrad) {
    const Quantized g = quantize_act_lhs(test::random_tensor({M, N}, seed, kTensorGradOut, dist), opt.quant);
    const Quantized w = quantize_grouped_weight(test::random_tensor({E, N, K}, seed, kTensorW, dist),
                                                WeightOrientation::dgrad, opt.quant);
    want = grouped_dgrad_q(g, w, offs, opt);
    kernels::DeviceBuffer<float> out(static_cast<std::size_t>(M * K));
    kernels::simt_grouped_dgrad(kernels::upload(g), kernels::upload(w), offs, opt, out.get());
    got = out.download();
  } else {
    const TensorF g = test::random_tensor({M, N}, seed, kTensorGradOut, dist);
    const Quantized gt = quantize_kgrouped_lhs(g, offs, opt.quant);
    const Quantized a = quantize_kgrouped_rhs(test::random_tensor({M, K}, seed, kTensorA, dist), offs, opt.quant);
    want = grouped_wgrad_q(gt, a, offs, opt);
    kernels::DeviceBuffer<float> out(static_cast<std::size_t>(E * N * K));
    kernels::simt_grouped_wgrad(kernels::upload(gt), kernels::upload(a), offs, opt, out.get());
    got = out.download();
  }
  const test::Diff d = test::compare_floats(as_floats(want), got);
  CHECK_MESSAGE(d.ok(), d.count, " of ", got.size(), " outputs differ; first: ", d.first_desc);
}

GemmOptions options(Promotion p, OutDtype out, Fp8Format f, int B, Mode m = Mode::promote_fp32) {
  GemmOptions opt;
  opt.mode = m;
  opt.promotion = p;
  opt.out = out;
  opt.quant = QuantOptions{B, false, f};
  return opt;
}

TEST_CASE("simt grouped GEMM is bitwise the reference: modes x passes x families x output dtypes x formats") {
  const std::uint64_t base = test::seed_for(521);
  CAPTURE(base);
  std::uint64_t n = 0;
  for (Mode m : {Mode::promote_fp32, Mode::hopper_tc}) {
    for (Pass pass : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
      for (Promotion p : {Promotion::deepgemm, Promotion::cublas}) {
        for (OutDtype out : {OutDtype::bf16, OutDtype::fp32}) {
          for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
            const GemmOptions opt = options(p, out, f, 128, m);
            if (!mode_unsupported(opt).empty()) continue;  // hopper-tc:cublas is e4m3 only
            for (int rep = 0; rep < 3; ++rep) check_pass(pass, base + n++, opt);
          }
        }
      }
    }
  }
}

TEST_CASE("simt grouped GEMM is bitwise the reference with blocks 64 and 256") {
  const std::uint64_t base = test::seed_for(522);
  CAPTURE(base);
  std::uint64_t n = 0;
  for (Mode m : {Mode::promote_fp32, Mode::hopper_tc}) {
    for (int B : {64, 256}) {
      for (Pass pass : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
        for (Promotion p : {Promotion::deepgemm, Promotion::cublas}) {
          const GemmOptions opt = options(p, OutDtype::bf16, Fp8Format::e4m3, B, m);
          if (!mode_unsupported(opt).empty()) continue;  // hopper-tc:cublas is block 128 only
          check_pass(pass, base + n++, opt);
        }
      }
    }
  }
}

TEST_CASE("simt grouped GEMM reproduces cuBLASLt's split-K runs like the reference, both modes") {
  const std::uint64_t base = test::seed_for(525);
  CAPTURE(base);
  std::mt19937_64 rng(base);
  std::uint64_t n = 0;
  for (Mode m : {Mode::promote_fp32, Mode::hopper_tc}) {
    for (Pass pass : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
      for (OutDtype out : {OutDtype::bf16, OutDtype::fp32}) {
        GemmOptions opt = options(Promotion::cublas, out, Fp8Format::e4m3, 128, m);
        opt.split_k.clear();
        for (int e = 0; e < 4; ++e) opt.split_k.push_back(1 + static_cast<std::int32_t>(rng() % 12));
        CAPTURE(opt.split_k[0]);
        check_pass(pass, base + n++, opt, true);
      }
    }
  }
}

TEST_CASE("simt block GEMM on arbitrary codes, NaN and Inf included, matches the CPU up to NaN signs") {
  // Codes drawn over all 256 bytes exercise the whole codec range, the non-finite block path and
  // large partials; scales are random positive powers and fractions.
  const std::uint64_t seed = test::seed_for(523);
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (Mode m : {Mode::promote_fp32, Mode::hopper_tc}) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (Promotion p : {Promotion::deepgemm, Promotion::cublas}) {
      CAPTURE(std::string(format_name(f)));
      CAPTURE(std::string(promotion_name(p)));
      CAPTURE(std::string(mode_name(m)));
      const GemmOptions opt = options(p, OutDtype::fp32, f, 128, m);
      if (!mode_unsupported(opt).empty()) continue;
      const std::int64_t rows = 70, cols = 130, kc = 384, nkb = kc / 128;
      std::vector<std::uint8_t> lc(static_cast<std::size_t>(rows * kc)), rc(static_cast<std::size_t>(cols * kc));
      // mostly finite: a NaN/Inf code in about 1 of 2000
      auto draw = [&](std::vector<std::uint8_t>& v) {
        for (auto& c : v) {
          c = static_cast<std::uint8_t>(rng());
          while (!fp8_is_finite(c, f) && rng() % 2000 != 0) c = static_cast<std::uint8_t>(rng());
        }
      };
      draw(lc);
      draw(rc);
      std::vector<float> ls(static_cast<std::size_t>(rows * nkb)), rs(static_cast<std::size_t>(cols * nkb));
      std::uniform_real_distribution<float> u(0.25f, 4.0f);
      for (auto& s : ls) s = u(rng) * 0x1p-12f;
      for (auto& s : rs) s = u(rng) * 0x1p-6f;
      // L (rows, kc) row-major, scales (rows, nkb); R given as (kc, cols) read transposed (ks = cols)
      const BlockOperand Lh{lc.data(), kc, 1, ls.data(), nkb, 1, 1, rows};
      const BlockOperand Rh{rc.data(), 1, cols, rs.data(), 1, cols, 1, cols};
      std::vector<double> want(static_cast<std::size_t>(rows * cols));
      block_gemm(Lh, Rh, kc, want.data(), cols, opt);
      kernels::DeviceBuffer<std::uint8_t> dlc(lc), drc(rc);
      kernels::DeviceBuffer<float> dls(ls), drs(rs), out(static_cast<std::size_t>(rows * cols));
      const BlockOperand Ld{dlc.get(), kc, 1, dls.get(), nkb, 1, 1, rows};
      const BlockOperand Rd{drc.get(), 1, cols, drs.get(), 1, cols, 1, cols};
      kernels::simt_block_gemm(Ld, Rd, kc, out.get(), cols, opt);
      std::vector<float> w(want.size());
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(want[i]);
      const test::Diff d = test::compare_floats(w, out.download());
      CHECK_MESSAGE(d.ok(), d.count, " outputs differ; first: ", d.first_desc);
    }
  }
  }
}

TEST_CASE("GPU quantizers feeding the simt GEMM give reference grouped_* promote-fp32 bitwise") {
  // End to end on high-precision inputs: the GPU quantizes, the simt kernel multiplies.
  const std::uint64_t seed = test::seed_for(524);
  CAPTURE(seed);
  const GemmOptions opt = options(Promotion::deepgemm, OutDtype::bf16, Fp8Format::e4m3, 128);
  const std::vector<std::int32_t> offs{129, 129, 384, 500};  // ragged, one empty
  const std::int64_t M = 500, N = 256, K = 384, E = 4;
  const TensorF A = test::random_tensor({M, K}, seed, kTensorA), W = test::random_tensor({E, N, K}, seed, kTensorW);
  kernels::DeviceBuffer<float> dA(A.data), dW(W.data);
  using kernels::Recipe;
  const auto a_q = kernels::quantize<float>(Recipe::act_lhs, dA.get(), A.shape, {}, opt.quant);
  const auto w_q = kernels::quantize<float>(Recipe::weight_fwd, dW.get(), W.shape, {}, opt.quant);
  kernels::DeviceBuffer<float> out(static_cast<std::size_t>(M * N));
  kernels::simt_grouped_fwd(a_q, w_q, offs, opt, out.get());
  const test::Diff d = test::compare_floats(as_floats(grouped_fwd(A, W, offs, opt)), out.download());
  CHECK_MESSAGE(d.ok(), d.count, " outputs differ; first: ", d.first_desc);
}

}  // namespace
