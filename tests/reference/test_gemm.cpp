// Grouped GEMM passes in every CPU mode, held against independent oracles (gemm_oracle.hpp), the
// torchao op-level floors (reference/SPEC.md 9.1) and each other.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "reference/gemm.hpp"
#include "reference/groups.hpp"
#include "reference/metrics.hpp"
#include "support/test_support.hpp"
#include "tests/reference/gemm_oracle.hpp"
#include "tests/reference/tc_oracle.hpp"

using namespace fp8moe;
using fp8moe::test::DenseQ;

namespace {

struct Problem {
  TensorF A, W, G;  // A (M,K), W (E,N,K), G = grad_out (M,N)
  std::vector<std::int32_t> offs;
};

Problem make_problem(std::vector<std::int32_t> offs, std::int64_t N, std::int64_t K, std::uint64_t seed,
                     Dist dist = Dist::normal) {
  Problem p;
  p.offs = std::move(offs);
  const std::int64_t M = p.offs.back(), E = static_cast<std::int64_t>(p.offs.size());
  p.A = test::random_tensor({M, K}, seed, kTensorA, dist);
  p.W = test::random_tensor({E, N, K}, seed, kTensorW, dist);
  p.G = test::random_tensor({M, N}, seed, kTensorGradOut, dist);
  return p;
}

TensorD run(Pass pass, const Problem& p, const GemmOptions& o) {
  switch (pass) {
    case Pass::fwd: return grouped_fwd(p.A, p.W, p.offs, o);
    case Pass::dgrad: return grouped_dgrad(p.G, p.W, p.offs, o);
    case Pass::wgrad: return grouped_wgrad(p.G, p.A, p.offs, o);
  }
  return {};
}

GemmOptions opts(Mode m, Promotion pr = Promotion::deepgemm, OutDtype out = OutDtype::bf16, bool pad = false) {
  GemmOptions o;
  o.mode = m;
  o.promotion = pr;
  o.out = out;
  o.pad = pad;
  return o;
}

// Logical operands of one expert for the oracle, built from the quantizers' outputs through their
// documented layouts (reference/quantize.hpp); dgrad's rhs is built from the forward weight
// quantization, so the dgrad-orientation quantizer is cross-checked too.
DenseQ rows_of(const Quantized& q, std::int64_t r0, std::int64_t rows) {
  DenseQ d;
  d.rows = rows;
  d.kc = q.codes.dim(1);
  for (std::int64_t r = r0; r < r0 + rows; ++r) {
    for (std::int64_t c = 0; c < d.kc; ++c) {
      d.code.push_back(q.codes(r, c));
      d.s_inv.push_back(q.scale_at(0, r, c));
    }
  }
  return d;
}

DenseQ weight_of(const Quantized& wq, std::int64_t e, bool transpose) {
  const std::int64_t N = wq.codes.dim(1), K = wq.codes.dim(2);
  DenseQ d;
  d.rows = transpose ? K : N;
  d.kc = transpose ? N : K;
  for (std::int64_t r = 0; r < d.rows; ++r) {
    for (std::int64_t c = 0; c < d.kc; ++c) {
      const std::int64_t n = transpose ? c : r, k = transpose ? r : c;
      d.code.push_back(wq.codes(e, n, k));
      d.s_inv.push_back(wq.scale_at(e, n, k));
    }
  }
  return d;
}

DenseQ tokens_of(const Quantized& q, bool lhs, std::int64_t s, std::int64_t Me) {
  // lhs: kgrouped-lhs codes (D, M); rhs: kgrouped-rhs codes (M, D); both as (D, Me) operands.
  DenseQ d;
  d.rows = lhs ? q.codes.dim(0) : q.codes.dim(1);
  d.kc = Me;
  for (std::int64_t r = 0; r < d.rows; ++r) {
    for (std::int64_t t = s; t < s + Me; ++t) {
      d.code.push_back(lhs ? q.codes(r, t) : q.codes(t, r));
      d.s_inv.push_back(lhs ? q.scale_at(0, r, t) : q.scale_at(0, t, r));
    }
  }
  return d;
}

// Checks every element of the exact (fp64 out), promote-fp32 and hopper-tc (fp32 out, both
// families; hopper-tc:cublas where cuBLASLt's options allow it) results of `pass` against the
// oracles, bitwise, and exact against a long double dequantized product.
void check_against_oracle(Pass pass, const Problem& p, const QuantOptions& qo) {
  const int B = qo.block;
  GemmOptions ex = opts(Mode::exact, Promotion::deepgemm, OutDtype::fp64);
  GemmOptions dg = opts(Mode::promote_fp32, Promotion::deepgemm, OutDtype::fp32);
  GemmOptions cb = opts(Mode::promote_fp32, Promotion::cublas, OutDtype::fp32);
  GemmOptions tdg = opts(Mode::hopper_tc, Promotion::deepgemm, OutDtype::fp32);
  GemmOptions tcb = opts(Mode::hopper_tc, Promotion::cublas, OutDtype::fp32);
  ex.quant = dg.quant = cb.quant = tdg.quant = tcb.quant = qo;
  const bool with_tcb = mode_unsupported(tcb).empty();
  const TensorD y_ex = run(pass, p, ex), y_dg = run(pass, p, dg), y_cb = run(pass, p, cb);
  const TensorD y_tdg = run(pass, p, tdg), y_tcb = with_tcb ? run(pass, p, tcb) : y_tdg;
  const std::int64_t E = static_cast<std::int64_t>(p.offs.size());
  // quantize once per pass; the oracle reads the codes and scales through their layouts
  const bool wg = pass == Pass::wgrad;
  const Quantized lq = wg ? quantize_kgrouped_lhs(p.G, p.offs, qo) : quantize_act_lhs(pass == Pass::fwd ? p.A : p.G, qo);
  const Quantized rq = wg ? quantize_kgrouped_rhs(p.A, p.offs, qo) : quantize_grouped_weight(p.W, WeightOrientation::fwd, qo);
  std::int64_t s = 0, checked = 0, mismatches = 0;
  std::string first;
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t Me = p.offs[static_cast<std::size_t>(e)] - s;
    const DenseQ L = wg ? tokens_of(lq, true, s, Me) : rows_of(lq, s, Me);
    const DenseQ R = wg ? tokens_of(rq, false, s, Me) : weight_of(rq, e, pass == Pass::dgrad);
    const std::int64_t out_row0 = wg ? e * L.rows : s, ldc = R.rows;
    for (std::int64_t i = 0; i < L.rows; ++i) {
      for (std::int64_t j = 0; j < R.rows; ++j) {
        const bool act_act = wg;
        const test::OracleOut o = test::oracle_element(L, i, R, j, B, qo.format, act_act);
        const float h_dg = test::oracle_hopper_element(L, i, R, j, B, qo.format, act_act, false);
        const float h_cb = with_tcb ? test::oracle_hopper_element(L, i, R, j, B, qo.format, act_act, true) : h_dg;
        const std::size_t idx = static_cast<std::size_t>((out_row0 + i) * ldc + j);
        // Exact FP8 arithmetic against a long double product of the dequantized operands:
        // within fp64 rounding of the block combination (one rounding per block and one final).
        long double ld = 0;
        for (std::int64_t k = 0; k < L.kc; ++k) {
          ld += test::oracle_decode(L.code[i * L.kc + k], qo.format) * L.s_inv[i * L.kc + k] *
                test::oracle_decode(R.code[j * R.kc + k], qo.format) * R.s_inv[j * R.kc + k];
        }
        const long double bound = (L.kc / B + 2) * std::ldexp(1.0L, -52) * o.abs_sum;
        const bool ok = y_ex.data[idx] == static_cast<double>(o.exact_unrounded) &&
                        y_dg.data[idx] == static_cast<double>(o.promote_deepgemm) &&
                        y_cb.data[idx] == static_cast<double>(o.promote_cublas) &&
                        y_tdg.data[idx] == static_cast<double>(h_dg) && y_tcb.data[idx] == static_cast<double>(h_cb) &&
                        std::fabs(static_cast<long double>(y_ex.data[idx]) - ld) <= bound;
        if (!ok && mismatches++ == 0) {
          auto g = [](double v) {
            char buf[40];
            std::snprintf(buf, sizeof buf, "%.17g", v);
            return std::string(buf);
          };
          first = fp8moe::cat("expert ", e, " element (", i, ",", j, "): exact ", g(y_ex.data[idx]), " vs oracle ",
                              g(static_cast<double>(o.exact_unrounded)), " (long double ", g(static_cast<double>(ld)),
                              "), deepgemm ", g(y_dg.data[idx]), " vs ", g(o.promote_deepgemm), ", cublas ",
                              g(y_cb.data[idx]), " vs ", g(o.promote_cublas), ", hopper-tc:deepgemm ",
                              g(y_tdg.data[idx]), " vs ", g(h_dg), ", hopper-tc:cublas ", g(y_tcb.data[idx]), " vs ",
                              g(h_cb));
        }
        ++checked;
      }
    }
    s = p.offs[static_cast<std::size_t>(e)];
  }
  CAPTURE(first);
  CHECK(mismatches == 0);
  CHECK(checked == static_cast<std::int64_t>(y_ex.numel()));
}

}  // namespace

TEST_CASE("exact, promote-fp32 and hopper-tc equal the independent oracles bitwise, every pass") {
  const std::uint64_t seed = test::seed_for(101);
  CAPTURE(seed);
  QuantOptions qo;
  // empty expert, ragged groups, N and K not multiples of the micro-tiles
  const Problem fp = make_problem({0, 37, 300, 300, 431}, 384, 256, seed);
  for (Pass pass : {Pass::fwd, Pass::dgrad}) {
    CAPTURE(std::string(pass_name(pass)));
    check_against_oracle(pass, fp, qo);
  }
  const Problem wp = make_problem({128, 128, 256, 512}, 256, 384, seed + 1);
  check_against_oracle(Pass::wgrad, wp, qo);
}

TEST_CASE("oracle agreement with block 64, power-of-two scales, heavy tails and e5m2") {
  const std::uint64_t seed = test::seed_for(102);
  CAPTURE(seed);
  QuantOptions q64;
  q64.block = 64;
  q64.pow2_scales = true;
  const Problem p = make_problem({64, 64, 192}, 192, 128, seed, Dist::student_t3);
  for (Pass pass : {Pass::fwd, Pass::dgrad, Pass::wgrad}) check_against_oracle(pass, p, q64);
  QuantOptions q5;
  q5.format = Fp8Format::e5m2;
  const Problem p5 = make_problem({128, 256}, 128, 256, seed + 7, Dist::outlier_channels);
  for (Pass pass : {Pass::fwd, Pass::dgrad, Pass::wgrad}) check_against_oracle(pass, p5, q5);
}

TEST_CASE("promote-fp32 of one 128-block is the exact block partial rounded once") {
  const std::uint64_t seed = test::seed_for(103);
  CAPTURE(seed);
  const Problem p = make_problem({77, 200}, 256, 128, seed);  // K = 128: one block
  QuantOptions qo;
  qo.pow2_scales = true;  // scale products exact, so the only rounding is the block partial's
  const Quantized aq = quantize_act_lhs(p.A, qo);
  const Quantized wq = quantize_grouped_weight(p.W, WeightOrientation::fwd, qo);
  for (Promotion pr : {Promotion::deepgemm, Promotion::cublas}) {
    GemmOptions o = opts(Mode::promote_fp32, pr, OutDtype::fp32);
    o.quant = qo;
    const TensorD y = grouped_fwd(p.A, p.W, p.offs, o);
    std::int64_t s = 0;
    for (std::size_t e = 0; e < p.offs.size(); ++e) {
      for (std::int64_t m = s; m < p.offs[e]; ++m) {
        for (std::int64_t n = 0; n < 256; ++n) {
          long double exact = 0;
          for (std::int64_t k = 0; k < 128; ++k) {
            exact += test::oracle_decode(aq.codes(m, k), qo.format) *
                     test::oracle_decode(wq.codes(static_cast<std::int64_t>(e), n, k), qo.format);
          }
          exact *= static_cast<long double>(aq.scale_at(0, m, 0)) * wq.scale_at(static_cast<std::int64_t>(e), n, 0);
          REQUIRE(y(m, n) == static_cast<double>(static_cast<float>(exact)));
        }
      }
      s = p.offs[e];
    }
  }
}

TEST_CASE("torchao op-level floors: torchao-emulated vs the bf16 reference") {
  // SPEC.md 9.1: fwd >= 27 dB, dgrad >= 26, wgrad >= 26; E=2 [256,512] unpadded and E=3
  // [129,384,500] padded, K = N = 256.
  for (int trial = 0; trial < 3; ++trial) {
    const std::uint64_t seed = test::seed_for(200 + trial);
    CAPTURE(seed);
    for (const auto& [offs, pad] : {std::pair{std::vector<std::int32_t>{256, 512}, false},
                                    std::pair{std::vector<std::int32_t>{129, 384, 500}, true}}) {
      const Problem p = make_problem(offs, 256, 256, seed);
      for (Pass pass : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
        CAPTURE(std::string(pass_name(pass)));
        CAPTURE(pad);
        const TensorD ref = run(pass, p, opts(Mode::bf16, Promotion::deepgemm, OutDtype::bf16, pad));
        const TensorD emu = run(pass, p, opts(Mode::torchao_emulated, Promotion::deepgemm, OutDtype::bf16, pad));
        const double floor = pass == Pass::fwd ? 27.0 : 26.0;
        const double db = sqnr_db(ref.data, emu.data);
        CAPTURE(db);
        CHECK(db >= floor);
        // the other quantized modes meet the same floor
        for (Mode m : {Mode::exact, Mode::promote_fp32}) {
          CHECK(sqnr_db(ref.data, run(pass, p, opts(m, Promotion::cublas, OutDtype::bf16, pad)).data) >= floor);
        }
      }
    }
  }
}

TEST_CASE("modes differ from each other where they should") {
  const std::uint64_t seed = test::seed_for(104);
  CAPTURE(seed);
  const Problem p = make_problem({256, 512}, 256, 2048, seed);
  auto y = [&](Mode m, Promotion pr, OutDtype o) { return run(Pass::fwd, p, opts(m, pr, o)).data; };
  auto differ = [](const std::vector<double>& a, const std::vector<double>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) != 0;
  };
  const auto hp = y(Mode::hp64, Promotion::deepgemm, OutDtype::bf16);
  const auto bf = y(Mode::bf16, Promotion::deepgemm, OutDtype::bf16);
  const auto ex = y(Mode::exact, Promotion::deepgemm, OutDtype::fp64);
  const auto ex32 = y(Mode::exact, Promotion::deepgemm, OutDtype::fp32);
  const auto emu = y(Mode::torchao_emulated, Promotion::deepgemm, OutDtype::bf16);
  const auto dg = y(Mode::promote_fp32, Promotion::deepgemm, OutDtype::fp32);
  const auto cb = y(Mode::promote_fp32, Promotion::cublas, OutDtype::fp32);
  CHECK(differ(hp, bf));
  CHECK(differ(bf, emu));
  CHECK(differ(ex, ex32));
  CHECK(differ(ex32, dg));
  // act x weight: both families promote fma(P, fl(sa*sb), y); the tensor core's P differs
  CHECK(!differ(dg, cb));
  const auto tc = y(Mode::hopper_tc, Promotion::cublas, OutDtype::fp32);
  CHECK(differ(dg, tc));
  CHECK(!differ(tc, y(Mode::hopper_tc, Promotion::deepgemm, OutDtype::fp32)));
  // act x act (wgrad): cuBLASLt's fma(fl(P*s_lhs), s_rhs, y) differs from DeepGEMM's order
  for (Mode m : {Mode::promote_fp32, Mode::hopper_tc}) {
    CAPTURE(std::string(mode_name(m)));
    CHECK(differ(run(Pass::wgrad, p, opts(m, Promotion::deepgemm, OutDtype::fp32)).data,
                 run(Pass::wgrad, p, opts(m, Promotion::cublas, OutDtype::fp32)).data));
  }
  CHECK(differ(emu, y(Mode::exact, Promotion::deepgemm, OutDtype::bf16)));
  // and yet all of them are close to the truth
  for (const auto* v : {&bf, &ex, &emu, &dg, &cb, &tc}) CHECK(sqnr_db(hp, *v) > 25.0);
  CHECK(sqnr_db(hp, bf) > 45.0);
}

TEST_CASE("padding changes no number: unpadded ragged wgrad is refused with the fix") {
  const std::uint64_t seed = test::seed_for(105);
  CAPTURE(seed);
  const Problem p = make_problem({129, 129, 384, 500}, 256, 256, seed);
  for (Mode m : {Mode::hp64, Mode::bf16, Mode::exact, Mode::torchao_emulated, Mode::promote_fp32}) {
    CAPTURE(std::string(mode_name(m)));
    for (Pass pass : {Pass::fwd, Pass::dgrad}) {
      CHECK(run(pass, p, opts(m, Promotion::cublas, OutDtype::bf16, true)).data ==
            run(pass, p, opts(m, Promotion::cublas, OutDtype::bf16, false)).data);
    }
  }
  // aligned groups: wgrad identical with and without padding
  const Problem a = make_problem({128, 128, 384}, 256, 256, seed + 3);
  CHECK(run(Pass::wgrad, a, opts(Mode::promote_fp32, Promotion::deepgemm, OutDtype::bf16, true)).data ==
        run(Pass::wgrad, a, opts(Mode::promote_fp32, Promotion::deepgemm, OutDtype::bf16, false)).data);
  // ragged groups without padding: one clear message
  try {
    (void)run(Pass::wgrad, p, opts(Mode::exact));
    FAIL("unpadded ragged wgrad was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("expert 0 has 129 tokens") != std::string::npos);
    CHECK(std::string(e.what()).find("padding on") != std::string::npos);
  }
}

TEST_CASE("empty experts produce zero weight gradients and no rows") {
  const std::uint64_t seed = test::seed_for(106);
  CAPTURE(seed);
  const Problem p = make_problem({0, 256, 256, 384}, 128, 256, seed);
  for (Mode m : {Mode::hp64, Mode::exact, Mode::promote_fp32, Mode::torchao_emulated}) {
    const TensorD dw = run(Pass::wgrad, p, opts(m));
    for (std::int64_t e : {0, 2}) {
      for (std::int64_t i = 0; i < 128 * 256; ++i) REQUIRE(dw.data[static_cast<std::size_t>(e * 128 * 256 + i)] == 0.0);
    }
    double norm = 0;
    for (std::int64_t i = 0; i < 128 * 256; ++i) norm += std::fabs(dw.data[static_cast<std::size_t>(128 * 256 + i)]);
    CHECK(norm > 0);
  }
}

TEST_CASE("wgrad's A given transposed (A^T, kgrouped-lhs, cuBLASLt's TN layout) gives the same dW bitwise") {
  // The plan (reference/grouped_plan.hpp) takes wgrad's A either way; the cuBLASLt passes run it
  // with A^T. The codes and scales are the same blocks transposed, so every mode's dW is equal.
  const std::uint64_t seed = test::seed_for(107);
  CAPTURE(seed);
  const Problem p = make_problem({128, 128, 512}, 256, 384, seed);  // an empty expert, then 384 tokens
  const QuantOptions q;
  const Quantized g = quantize_kgrouped_lhs(p.G, p.offs, q);
  const Quantized a = quantize_kgrouped_rhs(p.A, p.offs, q), at = quantize_kgrouped_lhs(p.A, p.offs, q);
  const std::int64_t M = p.A.dim(0), K = p.A.dim(1);
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t k = 0; k < K; ++k) {
      REQUIRE(a.codes.data[static_cast<std::size_t>(a.layout.code_index(0, m, k))] ==
              at.codes.data[static_cast<std::size_t>(at.layout.code_index(0, k, m))]);
      REQUIRE(a.scales.data[static_cast<std::size_t>(a.layout.scale_index(0, m, k))] ==
              at.scales.data[static_cast<std::size_t>(at.layout.scale_index(0, k, m))]);
    }
  }
  for (Mode m : {Mode::exact, Mode::promote_fp32, Mode::hopper_tc}) {
    for (Promotion pr : {Promotion::deepgemm, Promotion::cublas}) {
      CAPTURE(std::string(mode_name(m)));
      CAPTURE(static_cast<int>(pr));
      const GemmOptions o = opts(m, pr, OutDtype::fp32);
      const TensorD want = grouped_wgrad_q(g, a, p.offs, o), got = grouped_wgrad_q(g, at, p.offs, o);
      REQUIRE(got.shape == want.shape);
      CHECK(got.data == want.data);
      double norm = 0;
      for (double v : got.data) norm += std::fabs(v);
      CHECK(norm > 0);
    }
  }
  // Any other recipe for A is refused, naming both that are taken.
  try {
    (void)grouped_wgrad_q(g, quantize_act_lhs(p.A, q), p.offs, opts(Mode::exact));
    FAIL("wgrad took A quantized 1x128 along K");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("kgrouped") != std::string::npos);
    CHECK(std::string(e.what()).find("(A^T)") != std::string::npos);
  }
}

TEST_CASE("a NaN input poisons exactly the outputs it feeds, and NaN never passes a metric") {
  const std::uint64_t seed = test::seed_for(107);
  CAPTURE(seed);
  const Problem clean = make_problem({128, 256}, 128, 256, seed);
  Problem p = clean;
  p.A(5, 17) = NAN;
  const TensorD ref = run(Pass::fwd, clean, opts(Mode::hp64));
  for (Mode m : {Mode::exact, Mode::promote_fp32, Mode::hp64, Mode::torchao_emulated}) {
    CAPTURE(std::string(mode_name(m)));
    const TensorD y = run(Pass::fwd, p, opts(m));
    for (std::int64_t n = 0; n < 128; ++n) CHECK(std::isnan(y(5, n)));
    CHECK(std::isfinite(y(6, 0)));
    const Metrics mt = compare(ref.data, y.data);
    CHECK(std::isnan(mt.sqnr_db));
    CHECK_FALSE(mt.sqnr_db >= 0.0);  // a floor comparison fails on NaN
    CHECK(mt.nonfinite == 128);
  }
}

TEST_CASE("bad shapes and options name the value and the fix") {
  const std::uint64_t seed = test::seed_for(108);
  const Problem p = make_problem({100, 200}, 256, 192, seed);  // K = 192 is not a multiple of 128
  try {
    (void)run(Pass::fwd, p, opts(Mode::exact));
    FAIL("K = 192 was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("192") != std::string::npos);
  }
  const Problem q = make_problem({100, 200}, 256, 256, seed);
  const std::vector<std::int32_t> bad{150, 100};
  CHECK_THROWS_AS((void)grouped_fwd(q.A, q.W, bad, opts(Mode::exact)), Error);
  CHECK_THROWS_AS((void)grouped_fwd(q.A, q.W, std::vector<std::int32_t>{100, 300}, opts(Mode::exact)), Error);
  CHECK_THROWS_AS((void)grouped_fwd(q.A, q.W, std::vector<std::int32_t>{200}, opts(Mode::exact)), Error);
  CHECK(parse_mode("hopper-tc") == Mode::hopper_tc);
  CHECK_THROWS_AS(parse_mode("hopper"), Error);
  CHECK_THROWS_AS(parse_mode("fp4"), Error);
}

TEST_CASE("fast e4m3 kernel equals the scalar int128 path bitwise") {
  const std::uint64_t seed = test::seed_for(109);
  CAPTURE(seed);
  // M = 350 and N = 384 leave partial micro- and macro-tiles; the rhs is also read transposed
  // (strided), as wgrad reads A.
  const std::int64_t M = 350, N = 384, K = 512;
  const Problem r = make_problem({1, 97, 350}, N, K, seed);
  QuantOptions qo;
  const Quantized aq = quantize_act_lhs(r.A, qo);
  const Quantized wq = quantize_grouped_weight(r.W, WeightOrientation::fwd, qo);
  const Quantized wt = quantize_grouped_weight(r.W, WeightOrientation::dgrad, qo);  // (E,K,N)
  const BlockOperand L{aq.codes.ptr(), K, 1, aq.scales.ptr(), K / 128, 1, 1, M};
  const BlockOperand R{wq.codes.ptr(), K, 1, wq.scales.ptr(), K / 128, 1, 128, N};
  // the same weight read through the transposed layout: code(n, k) = wt(0, k, n)
  const BlockOperand Rt{wt.codes.ptr(), 1, N, wt.scales.ptr(), 1, N / 128, 128, N};
  for (Mode m : {Mode::exact, Mode::promote_fp32}) {
    for (Promotion pr : {Promotion::deepgemm, Promotion::cublas}) {
      for (OutDtype od : {OutDtype::bf16, OutDtype::fp32}) {
        const GemmOptions o = opts(m, pr, od);
        std::vector<double> fast(static_cast<std::size_t>(M * N)), slow(fast.size()), strided(fast.size());
        block_gemm(L, R, K, fast.data(), N, o);
        block_gemm_scalar(L, R, K, slow.data(), N, o);
        block_gemm(L, Rt, K, strided.data(), N, o);
        CHECK(std::memcmp(fast.data(), slow.data(), fast.size() * sizeof(double)) == 0);
        CHECK(std::memcmp(fast.data(), strided.data(), fast.size() * sizeof(double)) == 0);
      }
    }
  }
}
