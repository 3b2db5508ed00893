// hopper-tc on e4m3 operands, fast: reference/tensor_core.hpp's tc_step chained into
// tc_block_partial, then promote and split_combine, vectorised over 16 (AVX-512) or 8 (AVX2)
// output columns in fp32 lanes. tensor_core.hpp is the one definition; this is a re-statement of
// it that tests/reference/test_block_gemm_tc.cpp holds bitwise against block_gemm_scalar.
//
// One k32 step, per output element, in fp32 lanes (every operation below is exact):
//   E    = max(max over k of 2^ea * 2^eb over non-zero codes, 2^exp(C) if C != 0, 2^-40)
//          (tc_step's E as a power of two; a zero code packs the power 0, so it never wins)
//   sc   = 2^(13-E) from E's bits;  S = cvtt(C * sc) + sum over k of cvtt((a*b) * sc)   (int32)
//   C'   = (fl32(S) with the low 10 mantissa bits cleared) * 2^(E-13)
// Why each step is exact, for a C that tc_block_partial feeds in (+0, or a previous step's
// result):
// - a, b are e4m3 values s * 2^(e-3), s <= 15: a*b has <= 8 significant bits and
//   2^-18 <= |a*b| < 2^18, so the fp32 product is exact;
// - C is +0 or 2^-25 <= |C| < 2^26: a step with a non-zero product has E >= -12 (subnormal codes
//   sit at exponent -6) and returns a multiple of 2^(E-13) >= 2^-25; a step without one returns C
//   (C already has 14 significant bits); |C| <= B * 448^2 < 2^26 for B <= 256. So whenever a term
//   exists E is in [-25, 26], the 2^-40 floor only acts when the result is +0 anyway, and
//   2^(13-E), 2^(E-13) are normal fp32: multiplying by them is exact for every non-zero term
//   (|a*b * sc| >= 2^-31, |C * sc| >= 2^-38: normal results);
// - cvtt truncates toward zero: tc_align's truncation of the magnitude with the sign put back;
// - every term is below 2^15 in magnitude (a term's exponent is <= E), so S (33 terms) < 2^21:
//   exact in int32 and in fp32; clearing 10 of fp32's 23 mantissa bits keeps 14 significant
//   bits, toward zero (tc_pack); the result S' * 2^(E-13) >= 2^-53 is a normal fp32: exact.
//   S = 0 gives +0, as tc_step does.
// Non-finite codes take the scalar path (the caller does it: block_gemm_tc.hpp).
#include "reference/block_gemm_tc.hpp"
#include "reference/tile_schedule.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>

namespace fp8moe {
namespace {

constexpr int kMR512 = 12, kNR512 = 16;  // micro-tile: rows x columns (one zmm per row)
constexpr int kMR256 = 6, kNR256 = 8;    // one ymm per row
constexpr int kMC = 96, kNC = 256;       // macro-tile; kMC is a multiple of both kMRs
constexpr int kMaxLanes = 16;
constexpr std::int32_t kScaleBias = 267 << 23;  // bits(2^(13-E)) = kScaleBias - bits(2^E)
constexpr std::int32_t kInvBias = 254 << 23;    // bits(2^(E-13)) = kInvBias - bits(2^(13-E))
constexpr std::int32_t kExpMask = 0x7f800000;   // bits(2^exp(C)) for a normal C
constexpr std::int32_t kKeep14 = static_cast<std::int32_t>(0xfffffc00u);  // sign, exponent, 13 bits
constexpr float kEFloor = 0x1p-40f;
static_assert(kMC % kMR512 == 0 && kMC % kMR256 == 0, "a macro-tile holds whole micro-panels of rows");
static_assert(kNC % kNR512 == 0 && kNC % kNR256 == 0, "a macro-tile holds whole micro-panels of columns");

// Per e4m3 code: its value (exact in fp32) and 2^e with e = fp8_sig's exponent (0 for a zero code).
struct TcLut {
  std::array<float, 256> value, pow2;
  TcLut() {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const Fp8Sig s = fp8_sig(code, Fp8Format::e4m3);
      value[c] = fp8_decode(code, Fp8Format::e4m3);
      pow2[c] = s.sig == 0 ? 0.0f : f32_from_bits(static_cast<std::uint32_t>(s.exp + 127) << 23);
    }
  }
};
const TcLut& tc_lut() {
  static const TcLut lut;
  return lut;
}

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
// GCC 12's own AVX-512 intrinsics trip -Wmaybe-uninitialized (their pass-through operand is
// deliberately undefined), as in block_gemm.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// acc (mr, ld) += promote(P) for the block partial P (kMR x kNR) of one k-block, the micro-panels
// lp (2, B, kMR) and rp (2, B, kNR) holding values then powers 2^e, k-major. kind 1:
// fma(P, fl(sa*sb), acc); kind 2: fma(fl(P*sa), sb, acc) (tensor_core.hpp promote). sa (kMR) and
// sb (kNR): the rows' and columns' scales of this block.
__attribute__((target("avx512f,avx512dq"))) void tc_kernel_avx512(const float* __restrict lp,
                                                                 const float* __restrict rp, int B, int kind,
                                                                 const float* sa, const float* sb, float* acc,
                                                                 std::int64_t ld) {
  constexpr int mr = kMR512, nr = kNR512;
  const float *lv = lp, *le = lp + B * mr, *rv = rp, *re = rp + B * nr;
  const __m512i scale_bias = _mm512_set1_epi32(kScaleBias), inv_bias = _mm512_set1_epi32(kInvBias);
  const __m512i exp_mask = _mm512_set1_epi32(kExpMask), keep14 = _mm512_set1_epi32(kKeep14);
  const __m512 e_floor = _mm512_set1_ps(kEFloor);
  __m512 c[mr];  // the running partial C of each row
  for (int i = 0; i < mr; ++i) c[i] = _mm512_setzero_ps();
  for (int k0 = 0; k0 < B; k0 += kTcStepK) {
    __m512 e[mr];  // 2^E, then 2^(13-E)
    for (int i = 0; i < mr; ++i) e[i] = _mm512_setzero_ps();
    for (int k = k0; k < k0 + kTcStepK; ++k) {
      const __m512 pb = _mm512_load_ps(re + k * nr);
#pragma GCC unroll 12
      for (int i = 0; i < mr; ++i) e[i] = _mm512_max_ps(e[i], _mm512_mul_ps(_mm512_set1_ps(le[k * mr + i]), pb));
    }
    __m512i s[mr];  // the step's integer sum in units of 2^(E-13)
#pragma GCC unroll 12
    for (int i = 0; i < mr; ++i) {
      const __m512 ce = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(c[i]), exp_mask));
      const __m512 pe = _mm512_max_ps(_mm512_max_ps(e[i], ce), e_floor);
      e[i] = _mm512_castsi512_ps(_mm512_sub_epi32(scale_bias, _mm512_castps_si512(pe)));
      s[i] = _mm512_cvttps_epi32(_mm512_mul_ps(c[i], e[i]));
    }
    for (int k = k0; k < k0 + kTcStepK; ++k) {
      const __m512 bv = _mm512_load_ps(rv + k * nr);
#pragma GCC unroll 12
      for (int i = 0; i < mr; ++i) {
        const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(lv[k * mr + i]), bv), e[i]);
        s[i] = _mm512_add_epi32(s[i], _mm512_cvttps_epi32(t));
      }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; ++i) {
      const __m512i m = _mm512_and_si512(_mm512_castps_si512(_mm512_cvtepi32_ps(s[i])), keep14);
      const __m512 inv = _mm512_castsi512_ps(_mm512_sub_epi32(inv_bias, _mm512_castps_si512(e[i])));
      c[i] = _mm512_mul_ps(_mm512_castsi512_ps(m), inv);
    }
  }
  const __m512 sbv = _mm512_loadu_ps(sb);
#pragma GCC unroll 12
  for (int i = 0; i < mr; ++i) {
    const __m512 fa = _mm512_set1_ps(sa[i]);
    float* row = acc + i * ld;
    const __m512 y = _mm512_loadu_ps(row);
    _mm512_storeu_ps(row, kind == 1 ? _mm512_fmadd_ps(c[i], _mm512_mul_ps(fa, sbv), y)
                                    : _mm512_fmadd_ps(_mm512_mul_ps(c[i], fa), sbv, y));
  }
}

#pragma GCC diagnostic pop

// The same, operation for operation, on 6 x 8 tiles in AVX2 registers.
void tc_kernel_avx2(const float* __restrict lp, const float* __restrict rp, int B, int kind, const float* sa,
                    const float* sb, float* acc, std::int64_t ld) {
  constexpr int mr = kMR256, nr = kNR256;
  const float *lv = lp, *le = lp + B * mr, *rv = rp, *re = rp + B * nr;
  const __m256i scale_bias = _mm256_set1_epi32(kScaleBias), inv_bias = _mm256_set1_epi32(kInvBias);
  const __m256i exp_mask = _mm256_set1_epi32(kExpMask), keep14 = _mm256_set1_epi32(kKeep14);
  const __m256 e_floor = _mm256_set1_ps(kEFloor);
  __m256 c[mr];
  for (int i = 0; i < mr; ++i) c[i] = _mm256_setzero_ps();
  for (int k0 = 0; k0 < B; k0 += kTcStepK) {
    __m256 e[mr];
    for (int i = 0; i < mr; ++i) e[i] = _mm256_setzero_ps();
    for (int k = k0; k < k0 + kTcStepK; ++k) {
      const __m256 pb = _mm256_load_ps(re + k * nr);
#pragma GCC unroll 6
      for (int i = 0; i < mr; ++i) e[i] = _mm256_max_ps(e[i], _mm256_mul_ps(_mm256_broadcast_ss(le + k * mr + i), pb));
    }
    __m256i s[mr];
#pragma GCC unroll 6
    for (int i = 0; i < mr; ++i) {
      const __m256 ce = _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(c[i]), exp_mask));
      const __m256 pe = _mm256_max_ps(_mm256_max_ps(e[i], ce), e_floor);
      e[i] = _mm256_castsi256_ps(_mm256_sub_epi32(scale_bias, _mm256_castps_si256(pe)));
      s[i] = _mm256_cvttps_epi32(_mm256_mul_ps(c[i], e[i]));
    }
    for (int k = k0; k < k0 + kTcStepK; ++k) {
      const __m256 bv = _mm256_load_ps(rv + k * nr);
#pragma GCC unroll 6
      for (int i = 0; i < mr; ++i) {
        const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_broadcast_ss(lv + k * mr + i), bv), e[i]);
        s[i] = _mm256_add_epi32(s[i], _mm256_cvttps_epi32(t));
      }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; ++i) {
      const __m256i m = _mm256_and_si256(_mm256_castps_si256(_mm256_cvtepi32_ps(s[i])), keep14);
      const __m256 inv = _mm256_castsi256_ps(_mm256_sub_epi32(inv_bias, _mm256_castps_si256(e[i])));
      c[i] = _mm256_mul_ps(_mm256_castsi256_ps(m), inv);
    }
  }
  const __m256 sbv = _mm256_loadu_ps(sb);
#pragma GCC unroll 6
  for (int i = 0; i < mr; ++i) {
    const __m256 fa = _mm256_set1_ps(sa[i]);
    float* row = acc + i * ld;
    const __m256 y = _mm256_loadu_ps(row);
    _mm256_storeu_ps(row, kind == 1 ? _mm256_fmadd_ps(c[i], _mm256_mul_ps(fa, sbv), y)
                                    : _mm256_fmadd_ps(_mm256_mul_ps(c[i], fa), sbv, y));
  }
}
constexpr bool kHaveKernels = true;
#else
void tc_kernel_avx512(const float*, const float*, int, int, const float*, const float*, float*, std::int64_t) {}
void tc_kernel_avx2(const float*, const float*, int, int, const float*, const float*, float*, std::int64_t) {}
constexpr bool kHaveKernels = false;
#endif
using TcKernel = void (*)(const float*, const float*, int, int, const float*, const float*, float*, std::int64_t);

// One operand packed once per call: for k-block b and panel p (mr rows), the slab
// data[(b * panels + p) * 2 * B * mr ...] holds (2, B, mr): values, then powers 2^e, k-major;
// rows past `rows` hold code 0 (value 0, power 0). scales (nkb, panels * mr): s_inv per block and
// row, 0 past `rows`.
struct TcPacked {
  int mr = 0;
  std::int64_t panels = 0, rows_pad = 0;
  std::vector<float> storage;
  float* data = nullptr;  // 64-byte aligned view into storage
  std::vector<float> scales;
};

// Allocation, by one thread before the parallel region.
void tc_alloc(const BlockOperand& op, std::int64_t nkb, int B, int mr, TcPacked& out) {
  out.mr = mr;
  out.panels = (op.rows + mr - 1) / mr;
  out.rows_pad = out.panels * mr;
  const std::size_t need = static_cast<std::size_t>(nkb * out.rows_pad * 2 * B) + 16;
  if (out.storage.size() < need) out.storage.resize(need);
  out.data = out.storage.data();
  while (reinterpret_cast<std::uintptr_t>(out.data) % 64 != 0) ++out.data;
  out.scales.assign(static_cast<std::size_t>(nkb * out.rows_pad), 0.0f);
}

// Filling, work-shared among the threads of the enclosing parallel region without a barrier (the
// caller places one). Sets *nan when a code is NaN (e4m3's only non-finite codes, 0x7f and 0xff).
void tc_pack(const BlockOperand& op, std::int64_t nkb, int B, TcPacked& out, std::uint8_t* nan) {
  const TcLut& lut = tc_lut();
  const int mr = out.mr;
#pragma omp for collapse(2) schedule(static) nowait
  for (std::int64_t b = 0; b < nkb; ++b) {
    for (std::int64_t p = 0; p < out.panels; ++p) {
      float* v = out.data + (b * out.panels + p) * 2 * B * mr;  // (B, mr) values
      float* e = v + static_cast<std::int64_t>(B) * mr;           // (B, mr) powers
      static const std::uint8_t kZero[1] = {0};
      const std::uint8_t* src[kMaxLanes];
      std::int64_t step[kMaxLanes];
      for (int i = 0; i < mr; ++i) {
        const std::int64_t r = p * mr + i;
        const bool live = r < op.rows;
        src[i] = live ? op.codes + r * op.rs + b * B * op.ks : kZero;
        step[i] = live ? op.ks : 0;
        if (live) out.scales[static_cast<std::size_t>(b * out.rows_pad + r)] = op.scales[(r / op.rblock) * op.srs + b * op.sks];
      }
      unsigned bad = 0;
      for (int k = 0; k < B; ++k) {
        for (int i = 0; i < mr; ++i) {
          const std::uint8_t c = src[i][k * step[i]];
          v[k * mr + i] = lut.value[c];
          e[k * mr + i] = lut.pow2[c];
          bad |= (c & 0x7fu) == 0x7fu;
        }
      }
      if (bad) {
#pragma omp atomic write
        *nan = 1;
      }
    }
  }
}

}  // namespace

bool tc_have_avx512() {
  static const bool yes = kHaveKernels && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return yes;
}

std::vector<std::size_t> block_gemm_tc(std::span<const GemmTask> tasks, const GemmOptions& opt, TcIsa isa) {
  const int B = opt.quant.block;
  if (opt.mode != Mode::hopper_tc || opt.quant.format != Fp8Format::e4m3) {
    fail("block_gemm_tc computes hopper-tc on e4m3, not ", mode_name(opt.mode));
  }
  if (B % kTcStepK != 0 || B > kTcFastMaxBlock) {
    fail("block_gemm_tc: block ", B, " must be a multiple of 32 up to ", kTcFastMaxBlock);
  }
  if (isa == TcIsa::avx512 && !tc_have_avx512()) fail("block_gemm_tc: this CPU has no AVX-512");
  const std::size_t n = tasks.size();
  std::vector<std::size_t> refused;
  if (!kHaveKernels) {  // a build without AVX2: every task to the scalar path
    for (std::size_t t = 0; t < n; ++t) refused.push_back(t);
    return refused;
  }
  const bool wide = isa == TcIsa::avx512 || (isa == TcIsa::best && tc_have_avx512());
  const int nr = wide ? kNR512 : kNR256, mr = wide ? kMR512 : kMR256;
  const TcKernel kernel = wide ? tc_kernel_avx512 : tc_kernel_avx2;
  const TileSchedule sched = plan_tiles(tasks, kMC, kNC, nr);
  const std::int64_t nc_tile = sched.nc_tile;
  // Per calling thread and reused across calls (first-touch page faults cost as much as a small
  // expert's arithmetic), as in block_gemm.cpp's fast path.
  thread_local std::vector<TcPacked> tl_lp, tl_rp;
  std::vector<TcPacked>& lp = tl_lp;
  std::vector<TcPacked>& rp = tl_rp;
  if (lp.size() < n) lp.resize(n);
  if (rp.size() < n) rp.resize(n);
  for (std::size_t t = 0; t < n; ++t) {
    tc_alloc(tasks[t].L, tasks[t].kc / B, B, mr, lp[t]);
    tc_alloc(tasks[t].R, tasks[t].kc / B, B, nr, rp[t]);
  }
  std::vector<std::uint8_t> nan(n, 0);
  (void)tc_lut();  // built before the threads start
#pragma omp parallel
  {
    for (std::size_t t = 0; t < n; ++t) {
      tc_pack(tasks[t].L, tasks[t].kc / B, B, lp[t], &nan[t]);
      tc_pack(tasks[t].R, tasks[t].kc / B, B, rp[t], &nan[t]);
    }
#pragma omp barrier
    // (kMC, nc_tile): the call's total and, for split runs after the first, the current run
    std::vector<float> tot(static_cast<std::size_t>(kMC * nc_tile)), run(tot.size());
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t tile = 0; tile < sched.tiles(); ++tile) {
      const std::size_t t = sched.task_of(tile);
      if (nan[t]) continue;
      const GemmTask& g = tasks[t];
      const TcPacked& l = lp[t];
      const TcPacked& r = rp[t];
      const bool p_times_sa = opt.promotion == Promotion::cublas && scale_config(g.L, g.R) == ScaleConfig::act_act;
      const int kind = p_times_sa ? 2 : 1;
      const std::int64_t nkb = g.kc / B;
      const std::int64_t i0 = sched.row0(t, tile), j0 = sched.col0(t, tile);
      const int mc = static_cast<int>(std::min<std::int64_t>(kMC, g.L.rows - i0));
      const int nc = static_cast<int>(std::min<std::int64_t>(nc_tile, g.R.rows - j0));
      // cuBLASLt's split-K runs (tensor_core.hpp): each promoted from +0, then added in order.
      // Run 0 is the total itself (split_combine), later runs go through `run`.
      const int runs = std::max(g.splits, 1);
      const std::int64_t q = split_run_blocks(nkb, runs, split_unit(scale_config(g.L, g.R), opt.split_unit));
      for (int ri = 0; ri < runs; ++ri) {
        float* y = ri == 0 ? tot.data() : run.data();
        std::fill(y, y + kMC * nc_tile, 0.0f);
        for (std::int64_t b = ri * q; b < std::min<std::int64_t>((ri + 1) * q, nkb); ++b) {
          const float* sl = l.scales.data() + b * l.rows_pad + i0;
          const float* sr = r.scales.data() + b * r.rows_pad + j0;
          for (int pj = 0; pj * nr < nc; ++pj) {
            const float* rpanel = r.data + (b * r.panels + j0 / nr + pj) * 2 * B * nr;
            for (int pi = 0; pi * mr < mc; ++pi) {
              const float* lpanel = l.data + (b * l.panels + i0 / mr + pi) * 2 * B * mr;
              kernel(lpanel, rpanel, B, kind, sl + pi * mr, sr + pj * nr, y + pi * mr * nc_tile + pj * nr, nc_tile);
            }
          }
        }
        if (ri > 0) {
          for (int i = 0; i < mc; ++i) {
            for (int j = 0; j < nc; ++j) tot[i * nc_tile + j] = split_combine(tot[i * nc_tile + j], run[i * nc_tile + j], ri);
          }
        }
      }
      for (int i = 0; i < mc; ++i) {
        double* out = g.C + (i0 + i) * g.ldc + j0;
        const float* y = tot.data() + i * nc_tile;
        if (opt.out == OutDtype::bf16) {
          for (int j = 0; j < nc; ++j) out[j] = round_bf16(y[j]);
        } else {
          for (int j = 0; j < nc; ++j) out[j] = y[j];
        }
      }
    }
  }
  for (std::size_t t = 0; t < n; ++t) {
    if (nan[t]) refused.push_back(t);
  }
  return refused;
}

}  // namespace fp8moe
