// The Hopper tensor-core model (reference/tensor_core.hpp) against the independent oracle of
// tc_oracle.hpp: the k32 step on every code pair of one lane, on random and adversarial terms
// (exponents spread over 60 binades, subnormals, cancellation to zero, NaN/Inf, a dominating
// accumulator), the chained block partial, cuBLASLt's split-K runs and the promotion families
// through the grouped passes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "reference/gemm.hpp"
#include "reference/tensor_core.hpp"
#include "support/test_support.hpp"
#include "tests/reference/tc_oracle.hpp"

using namespace fp8moe;

namespace {

constexpr Fp8Format kE4 = Fp8Format::e4m3, kE5 = Fp8Format::e5m2;

std::string hex(float v) {
  char b[48];
  std::snprintf(b, sizeof b, "%a (0x%08x)", static_cast<double>(v), f32_bits(v));
  return b;
}

// Bitwise equality, any NaN matching any NaN (the model's NaN is 0x7fffffff; the device suite
// records the hardware's).
bool same(float x, float y) { return (std::isnan(x) && std::isnan(y)) || f32_bits(x) == f32_bits(y); }

struct Tally {
  std::int64_t n = 0, bad = 0;
  std::string first;
  void check(const std::uint8_t* a, const std::uint8_t* b, int len, Fp8Format fa, Fp8Format fb, float c) {
    const float got = tc_step(a, 1, fa, b, 1, fb, len, c);
    const float want = test::oracle_tc_step(a, b, len, fa, fb, c);
    ++n;
    if (same(got, want)) return;
    if (bad++ == 0) {
      std::string codes;
      for (int i = 0; i < len; ++i) codes += fp8moe::cat(" ", int(a[i]), "x", int(b[i]));
      first = fp8moe::cat("C ", hex(c), " model ", hex(got), " oracle ", hex(want), " codes", codes);
    }
  }
};

std::uint8_t finite_code(std::mt19937_64& g, Fp8Format f) {
  for (;;) {
    const auto c = static_cast<std::uint8_t>(g());
    if (fp8_is_finite(c, f)) return c;
  }
}

float random_f32(std::mt19937_64& g, int emin, int emax) {
  std::uniform_int_distribution<int> e(emin, emax);
  const float m = 1.0f + static_cast<float>(g() >> 41) * 0x1p-23f;  // 23 random fraction bits
  const float v = std::ldexp(m, e(g));
  return (g() & 1) ? -v : v;
}

const Fp8Format kPairs[4][2] = {{kE4, kE4}, {kE5, kE5}, {kE4, kE5}, {kE5, kE4}};

}  // namespace

TEST_CASE("tc_step: all 2^16 code pairs of one lane, alone and among random terms, every type pair") {
  const std::uint64_t seed = test::seed_for(1501);
  CAPTURE(seed);
  std::mt19937_64 g(seed);
  for (const auto& fp : kPairs) {
    const Fp8Format fa = fp[0], fb = fp[1];
    CAPTURE(std::string(format_name(fa)) + "x" + format_name(fb));
    Tally alone, mixed;
    std::uint8_t a[32], b[32];
    for (int x = 0; x < 256; ++x) {
      for (int y = 0; y < 256; ++y) {
        std::memset(a, 0, sizeof a);
        std::memset(b, 0, sizeof b);
        a[7] = static_cast<std::uint8_t>(x);
        b[7] = static_cast<std::uint8_t>(y);
        alone.check(a, b, 32, fa, fb, 0.0f);
        for (int i = 0; i < 32; ++i) {
          if (i == 7) continue;
          a[i] = finite_code(g, fa);
          b[i] = finite_code(g, fb);
        }
        mixed.check(a, b, 32, fa, fb, random_f32(g, -20, 20));
      }
    }
    CAPTURE(alone.first);
    CAPTURE(mixed.first);
    CHECK(alone.n == 65536);
    CHECK(alone.bad == 0);
    CHECK(mixed.bad == 0);
  }
}

TEST_CASE("tc_step: random and adversarial terms") {
  const std::uint64_t seed = test::seed_for(1502);
  CAPTURE(seed);
  std::mt19937_64 g(seed);
  Tally t;
  std::uint8_t a[32], b[32];
  for (const auto& fp : kPairs) {
    const Fp8Format fa = fp[0], fb = fp[1];
    for (int it = 0; it < 40000; ++it) {
      const int cls = it % 8;
      for (int i = 0; i < 32; ++i) {
        a[i] = finite_code(g, fa);
        b[i] = finite_code(g, fb);
        if (cls == 1 && (g() & 1)) a[i] &= 0x80 | ((1 << fp8_spec(fa).mant_bits) - 1);  // subnormal or zero
        if (cls == 2 && i >= 16) {  // cancellation: the second half negates the first
          a[i] = static_cast<std::uint8_t>(a[i - 16] ^ 0x80);
          b[i] = b[i - 16];
        }
      }
      float c = 0.0f;
      switch (cls) {
        case 0: c = random_f32(g, -30, 30); break;                           // normal
        case 1: c = std::ldexp(static_cast<float>(g() % (1u << 23)), -149); break;  // subnormal (or 0)
        case 2: c = 0.0f; break;                                             // exact cancellation
        case 3: c = random_f32(g, 100, 127); break;                          // huge: dominates
        case 4: c = random_f32(g, -60, 60); break;                           // 60 binades either way
        case 5: {  // cancelling: C = -(the products' fp64 sum rounded to fp32)
          double s = 0;
          for (int i = 0; i < 32; ++i) s += static_cast<double>(fp8_decode(a[i], fa)) * fp8_decode(b[i], fb);
          c = static_cast<float>(-s);
          break;
        }
        case 6: c = random_f32(g, 17, 40); break;  // the accumulator a little above the products
        default: c = -0.0f; break;                 // negative zero drops out like +0
      }
      t.check(a, b, 32, fa, fb, c);
      if (cls == 2) {
        INFO("exact cancellation gives +0");
        const float r = tc_step(a, 1, fa, b, 1, fb, 32, c);
        REQUIRE(f32_bits(r) == 0u);
      }
    }
  }
  // exponents of the products spread over 60 binades: e5m2 codes from the smallest subnormal to
  // the largest normal on both sides, C from 2^-40 to 2^40
  for (int it = 0; it < 50000; ++it) {
    for (int i = 0; i < 32; ++i) {
      const int e = static_cast<int>(g() % 31);  // exponent field 0..30
      a[i] = static_cast<std::uint8_t>((g() & 0x80) | (e << 2) | (g() & 3));
      b[i] = static_cast<std::uint8_t>((g() & 0x80) | ((g() % 31) << 2) | (g() & 3));
    }
    t.check(a, b, 32, kE5, kE5, it % 3 == 0 ? 0.0f : random_f32(g, -40, 40));
  }
  CAPTURE(t.first);
  CHECK(t.n >= 210000);
  CHECK(t.bad == 0);
}

TEST_CASE("tc_step: NaN and Inf inputs") {
  std::uint8_t a[32] = {}, b[32] = {};
  a[0] = 0x38;  // 1.0 in e4m3
  b[0] = 0x38;
  CHECK(tc_step(a, 1, kE4, b, 1, kE4, 32, 0.0f) == 1.0f);
  a[3] = 0x7f;  // e4m3 NaN times 0
  CHECK(f32_bits(tc_step(a, 1, kE4, b, 1, kE4, 32, 0.0f)) == kTcNaN);
  a[3] = 0;
  CHECK(f32_bits(tc_step(a, 1, kE4, b, 1, kE4, 32, std::nanf(""))) == kTcNaN);
  CHECK(tc_step(a, 1, kE4, b, 1, kE4, 32, INFINITY) == INFINITY);
  CHECK(tc_step(a, 1, kE4, b, 1, kE4, 32, -INFINITY) == -INFINITY);
  // e5m2: Inf x finite, Inf x 0, Inf - Inf
  std::uint8_t c[32] = {}, d[32] = {};
  c[0] = 0x7c;  // +Inf
  d[0] = 0xbc;  // -1.0
  CHECK(tc_step(c, 1, kE5, d, 1, kE5, 32, 1.0f) == -INFINITY);
  d[0] = 0;
  CHECK(f32_bits(tc_step(c, 1, kE5, d, 1, kE5, 32, 1.0f)) == kTcNaN);
  d[0] = 0x3c;  // +1.0: +Inf, then C = -Inf cancels it
  CHECK(f32_bits(tc_step(c, 1, kE5, d, 1, kE5, 32, -INFINITY)) == kTcNaN);
  c[1] = 0xfc;  // -Inf x +1
  d[1] = 0x3c;
  CHECK(f32_bits(tc_step(c, 1, kE5, d, 1, kE5, 32, 0.0f)) == kTcNaN);
  // and the oracle agrees on every one of these classes over random codes
  const std::uint64_t seed = test::seed_for(1503);
  CAPTURE(seed);
  std::mt19937_64 g(seed);
  Tally t;
  for (const auto& fp : kPairs) {
    for (int it = 0; it < 20000; ++it) {
      for (int i = 0; i < 32; ++i) {
        a[i] = static_cast<std::uint8_t>(g());  // every code, NaN and Inf included
        b[i] = static_cast<std::uint8_t>(g());
      }
      const float cc = it % 5 == 0 ? INFINITY : it % 5 == 1 ? -INFINITY : random_f32(g, -10, 10);
      t.check(a, b, 32, fp[0], fp[1], cc);
    }
  }
  CAPTURE(t.first);
  CHECK(t.bad == 0);
}

TEST_CASE("tc_step: truncation, not rounding, at both places the model truncates") {
  std::uint8_t a[32] = {}, b[32] = {};
  // 1.0 + 2^-14 as C with a product 1.0: E = 0, C's term 2^13 + 0.5 units truncates to 2^13
  a[0] = 0x38;
  b[0] = 0x38;
  CHECK(tc_step(a, 1, kE4, b, 1, kE4, 32, 1.0f + 0x1p-14f) == 2.0f);
  // C = 1.0 + 2^-13 survives alignment (exactly one unit) but a sum of 2 + 2^-13 has 15
  // significant bits: truncated to 2.0
  CHECK(tc_step(a, 1, kE4, b, 1, kE4, 32, 1.0f + 0x1p-13f) == 2.0f);
  // negative terms truncate toward zero (magnitude), not toward -inf
  a[0] = 0xb8;  // -1.0
  CHECK(tc_step(a, 1, kE4, b, 1, kE4, 32, -1.0f - 0x1p-14f) == -2.0f);
  // a product far below the largest exponent is dropped whole: 2^-9 * 2^-9 next to 1.0
  std::uint8_t x[32] = {}, y[32] = {};
  x[0] = 0x38;
  y[0] = 0x38;
  x[1] = 0x01;  // smallest e4m3 subnormal 2^-9, pinned at exponent -6
  y[1] = 0x01;
  CHECK(tc_step(x, 1, kE4, y, 1, kE4, 32, 0.0f) == 1.0f);
}

TEST_CASE("the block partial chains B/32 steps from +0: split-K runs cut whole units of 4 blocks") {
  const std::uint64_t seed = test::seed_for(1504);
  CAPTURE(seed);
  std::mt19937_64 g(seed);
  std::vector<std::uint8_t> a(256), b(256);
  for (int B : {64, 128, 256}) {
    for (int it = 0; it < 2000; ++it) {
      for (int k = 0; k < B; ++k) {
        a[static_cast<std::size_t>(k)] = finite_code(g, kE4);
        b[static_cast<std::size_t>(k)] = finite_code(g, kE4);
      }
      const float m = tc_block_partial(a.data(), 1, b.data(), 1, kE4, B);
      const float o = test::oracle_tc_block(a.data(), 1, b.data(), 1, B, kE4);
      REQUIRE(same(m, o));
    }
  }
  // runs of q = 4*ceil(KB/(4S)) blocks, worked by hand (K = 128 * KB)
  CHECK(split_run_blocks(56, 1) == 56);
  CHECK(split_run_blocks(56, 3) == 20);   // [0,20) [20,40) [40,56)
  CHECK(split_run_blocks(128, 2) == 64);
  CHECK(split_run_blocks(128, 11) == 12); // ten runs of 12, one of 8
  CHECK(split_run_blocks(128, 12) == 12); // ten runs of 12, one of 8, one empty
  CHECK(split_run_blocks(4, 2) == 4);     // one run of 4, one empty
  CHECK(split_run_blocks(4, 8) == 4);
  CHECK(split_run_blocks(40, 4) == 12);   // ceil(40/4) = 10 -> 12: [0,12) [12,24) [24,36) [36,40)
  // act x act (wgrad) cuts single blocks: 67 blocks in 3 splits are runs of 23, 23, 21
  CHECK(split_unit(ScaleConfig::act_act, 0) == 1);
  CHECK(split_unit(ScaleConfig::act_weight, 0) == 4);
  CHECK(split_unit(ScaleConfig::act_act, 2) == 2);
  CHECK(split_run_blocks(67, 3, split_unit(ScaleConfig::act_act, 0)) == 23);
  CHECK(split_run_blocks(67, 3, split_unit(ScaleConfig::act_weight, 0)) == 24);
  CHECK(split_run_blocks(134, 6, 1) == 23);
}

TEST_CASE("hopper-tc wgrad (act x act) split runs of single blocks equal the oracle") {
  const std::uint64_t seed = test::seed_for(1506);
  CAPTURE(seed);
  // one expert of 67 blocks of tokens (8576): S = 3 cuts 23, 23, 21 here, 24, 24, 19 by units of 4
  const std::int64_t N = 128, K = 128, M = 8576;
  const std::vector<std::int32_t> offs{static_cast<std::int32_t>(M)};
  const TensorF G = test::random_tensor({M, N}, seed, kTensorGradOut);
  const TensorF A = test::random_tensor({M, K}, seed, kTensorA);
  QuantOptions qo;
  const Quantized gq = quantize_kgrouped_lhs(G, offs, qo), aq = quantize_kgrouped_rhs(A, offs, qo);
  GemmOptions o;
  o.mode = Mode::hopper_tc;
  o.promotion = Promotion::cublas;
  o.out = OutDtype::fp32;
  o.split_k = {3};
  const TensorD y = grouped_wgrad_q(gq, aq, offs, o);
  test::DenseQ L, R;
  L.rows = N;
  R.rows = K;
  L.kc = R.kc = M;
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t t = 0; t < M; ++t) {
      L.code.push_back(gq.codes(n, t));
      L.s_inv.push_back(gq.scale_at(0, n, t));
    }
  }
  for (std::int64_t k = 0; k < K; ++k) {
    for (std::int64_t t = 0; t < M; ++t) {
      R.code.push_back(aq.codes(t, k));
      R.s_inv.push_back(aq.scale_at(0, t, k));
    }
  }
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < N; i += 7) {  // a sample of rows: the oracle is slow
    for (std::int64_t j = 0; j < K; ++j) {
      if (y(0, i, j) != static_cast<double>(test::oracle_hopper_element(L, i, R, j, 128, kE4, true, true, 3))) ++bad;
    }
  }
  CHECK(bad == 0);
  GemmOptions by4 = o;
  by4.split_unit = 4;  // the act x weight rule gives other numbers here
  CHECK(grouped_wgrad_q(gq, aq, offs, by4).data != y.data);
}

TEST_CASE("hopper-tc passes with cuBLASLt's split-K runs equal the oracle, and splits change numbers") {
  const std::uint64_t seed = test::seed_for(1505);
  CAPTURE(seed);
  // small M, long K: the shapes where cuBLASLt splits (K = 8192 = 64 blocks)
  const std::int64_t N = 128, K = 8192;
  const std::vector<std::int32_t> offs{8, 8, 40};  // one empty expert
  const TensorF A = test::random_tensor({40, K}, seed, kTensorA);
  const TensorF W = test::random_tensor({3, N, K}, seed, kTensorW);
  QuantOptions qo;
  const Quantized aq = quantize_act_lhs(A, qo);
  const Quantized wq = quantize_grouped_weight(W, WeightOrientation::fwd, qo);
  for (const std::vector<std::int32_t>& splits : {std::vector<std::int32_t>{1, 1, 1}, {2, 1, 3}, {11, 5, 12}}) {
    GemmOptions o;
    o.mode = Mode::hopper_tc;
    o.promotion = Promotion::cublas;
    o.out = OutDtype::fp32;
    o.split_k = splits;
    const TensorD y = grouped_fwd_q(aq, wq, offs, o);
    std::int64_t bad = 0, s = 0;
    for (std::size_t e = 0; e < offs.size(); ++e) {
      test::DenseQ L, R;
      L.rows = offs[e] - s;
      L.kc = R.kc = K;
      R.rows = N;
      for (std::int64_t m = s; m < offs[e]; ++m) {
        for (std::int64_t k = 0; k < K; ++k) {
          L.code.push_back(aq.codes(m, k));
          L.s_inv.push_back(aq.scale_at(0, m, k));
        }
      }
      for (std::int64_t n = 0; n < N; ++n) {
        for (std::int64_t k = 0; k < K; ++k) {
          R.code.push_back(wq.codes(static_cast<std::int64_t>(e), n, k));
          R.s_inv.push_back(wq.scale_at(static_cast<std::int64_t>(e), n, k));
        }
      }
      for (std::int64_t i = 0; i < L.rows; ++i) {
        for (std::int64_t j = 0; j < N; ++j) {
          const float want = test::oracle_hopper_element(L, i, R, j, 128, kE4, false, true, splits[e]);
          if (y(s + i, j) != static_cast<double>(want)) ++bad;
        }
      }
      s = offs[e];
    }
    CAPTURE(splits[0]);
    CHECK(bad == 0);
  }
  GemmOptions one, two;
  one.mode = two.mode = Mode::hopper_tc;
  one.promotion = two.promotion = Promotion::cublas;
  one.out = two.out = OutDtype::fp32;
  two.split_k = {4, 4, 4};
  CHECK(grouped_fwd_q(aq, wq, offs, one).data != grouped_fwd_q(aq, wq, offs, two).data);
  two.split_k = {1, 1};
  CHECK_THROWS_WITH_AS(grouped_fwd_q(aq, wq, offs, two), doctest::Contains("split_k has 2 entries"), Error);
}

TEST_CASE("hopper-tc:cublas outside cuBLASLt's options is refused with the value and the fix") {
  GemmOptions o;
  o.mode = Mode::hopper_tc;
  o.promotion = Promotion::cublas;
  o.quant.block = 64;
  CHECK(mode_unsupported(o).find("not block 64") != std::string::npos);
  CHECK(mode_unsupported(o).find("hopper-tc:deepgemm") != std::string::npos);
  o.quant.block = 128;
  o.quant.format = Fp8Format::e5m2;
  CHECK(mode_unsupported(o).find("e5m2") != std::string::npos);
  o.promotion = Promotion::deepgemm;
  CHECK(mode_unsupported(o).empty());
  // the mode spellings: ':' or '/', a bare promoted mode is both families
  CHECK(parse_mode_spec("hopper-tc:cublas").size() == 1);
  CHECK(parse_mode_spec("hopper-tc:deepgemm")[0].promo == Promotion::deepgemm);
  CHECK(parse_mode_spec("hopper-tc").size() == 2);
  CHECK_THROWS_WITH_AS(parse_mode_spec("exact:cublas"), doctest::Contains("only promote-fp32 and hopper-tc"), Error);
}
