// The wgmma probe (kernels/wgmma_probe.hpp): raw FP8 wgmma.mma_async m64nNk32 against
// reference/tensor_core.hpp's tc_step, bit for bit, for N = 8, 64, 128, 256 and all four type
// pairs, 2^26 outputs each (2^30 > 1e9 in one run of the binary). The comparison runs on the
// device; a host spot check per case proves the device check and the device data generator agree
// with the host's copy of the same headers. Label gpu: exits 77 without a device or on a device
// other than sm_90.
//
// What it prints (one run of the binary): a layout line per N, then per (pair, N) a table line
//   [wgmma] e4m3 x e5m2 N=128 | outputs .. | mismatches .. (model finite .., inf .., NaN ..) | ...
// with NaN classes and the hardware's NaN bit patterns, the class breakdown, the spot check, and on
// any mismatch the first ones in full (codes, C, hardware and model bits, the replay key) and a
// diagnosis of the first failing tile (is the hardware value found elsewhere in the tile: a layout
// fault; or near the exact dot product: an arithmetic difference). The suite total comes last.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/check.hpp"
#include "kernels/wgmma_probe.hpp"
#include "reference/tensor_core.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;
using kernels::DeviceBuffer;
namespace wg = fp8moe::kernels::wgmma;

constexpr std::int64_t kOutputsPerCase = std::int64_t{1} << 26;
constexpr std::int64_t kBatchOutputs = std::int64_t{1} << 24;
constexpr int kProbeCases = 16;  // 4 type pairs x N in {8, 64, 128, 256}
static_assert(kProbeCases * kOutputsPerCase >= 1000000000, "the suite must compare >= 1e9 outputs");

struct SuiteTotals {
  std::int64_t outputs = 0, mismatches = 0;
  int cases = 0;
};
SuiteTotals& totals() {
  static SuiteTotals t;
  return t;
}

// Skip (77) on a device that is not sm_90; fail when the build lacks sm_90a.
void require_sm90() {
  static int status = -1;
  static std::string why;
  if (status < 0) status = static_cast<int>(wg::probe_arch(&why));
  if (status == static_cast<int>(wg::ArchStatus::not_sm90)) {
    std::printf("SKIPPED (exit 77): %s\n", why.c_str());
    std::fflush(stdout);
    std::exit(77);
  }
  REQUIRE_MESSAGE(status == static_cast<int>(wg::ArchStatus::ok), why);
}

// ---- One batch of tiles in device memory: A (tiles,64,32), B (tiles,N,32), C and D (tiles,64,N).
struct Batch {
  wg::ProbeCase pc;
  std::int64_t tiles;
  DeviceBuffer<std::uint8_t> A, B;
  DeviceBuffer<float> C, D;
  Batch(const wg::ProbeCase& p, std::int64_t t)
      : pc(p), tiles(t), A(static_cast<std::size_t>(t * wg::kM * wg::kK)),
        B(static_cast<std::size_t>(t * p.n * wg::kK)), C(static_cast<std::size_t>(t * wg::kM * p.n)),
        D(static_cast<std::size_t>(t * wg::kM * p.n)) {}
  std::int64_t tile_outputs() const { return std::int64_t{wg::kM} * pc.n; }
  void run(std::uint64_t first_tile, wg::ProbeCounts* counts, bool swap_fields = false) {
    wg::generate(pc, first_tile, tiles, A.get(), B.get(), C.get());
    wg::run_wgmma(pc, tiles, A.get(), B.get(), C.get(), D.get(), swap_fields);
    wg::check(pc, first_tile, tiles, A.get(), B.get(), C.get(), D.get(), counts);
    FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "wgmma probe batch: N=", pc.n, " first tile ", first_tile);
  }
};

template <class T>
std::vector<T> download_range(const DeviceBuffer<T>& buf, std::int64_t offset, std::int64_t n) {
  std::vector<T> host(static_cast<std::size_t>(n));
  FP8MOE_CUDA_CHECK(cudaMemcpy(host.data(), buf.get() + offset, n * sizeof(T), cudaMemcpyDeviceToHost), "range ",
                    offset, "+", n);
  return host;
}

wg::ProbeCounts download_counts(const DeviceBuffer<wg::ProbeCounts>& c) { return c.download()[0]; }

// One tile's data on the host: a (64,32), b (N,32), c and d (64,N).
struct HostTile {
  std::vector<std::uint8_t> a, b;
  std::vector<float> c, d;
};
HostTile fetch_tile(const Batch& bt, std::int64_t local) {
  const int n = bt.pc.n;
  return {download_range(bt.A, local * wg::kM * wg::kK, wg::kM * wg::kK), download_range(bt.B, local * n * wg::kK, n * wg::kK),
          download_range(bt.C, local * wg::kM * n, wg::kM * n), download_range(bt.D, local * wg::kM * n, wg::kM * n)};
}

float host_model(const wg::ProbeCase& pc, const std::uint8_t* a, const std::uint8_t* b, float c) {
  return tc_step(a, 1, pc.fa, b, 1, pc.fb, wg::kK, c);
}

bool is_nan_bits(std::uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
// The device check's rule: the model NaN needs a NaN (any bits); otherwise the bits must agree.
bool differs(std::uint32_t hw, std::uint32_t model) { return is_nan_bits(model) ? !is_nan_bits(hw) : hw != model; }

// The exact value (fp64, rounding aside) and the magnitude of the largest term: what a correct dot
// product should be near.
struct Exact {
  double value;
  double scale;
};
Exact exact_value(const wg::ProbeCase& pc, const std::uint8_t* a, const std::uint8_t* b, float c) {
  double s = c, scale = std::fabs(static_cast<double>(c));
  for (int k = 0; k < wg::kK; ++k) {
    const double p = static_cast<double>(fp8_decode(a[k], pc.fa)) * static_cast<double>(fp8_decode(b[k], pc.fb));
    s += p;
    scale = std::max(scale, std::fabs(p));
  }
  return {s, scale};
}

std::string hex_codes(const std::uint8_t* p) {
  std::string s;
  char buf[4];
  for (int k = 0; k < wg::kK; ++k) {
    std::snprintf(buf, sizeof buf, "%02x", p[k]);
    s += buf;
    if (k + 1 < wg::kK) s += k % 8 == 7 ? "  " : " ";
  }
  return s;
}

std::string case_name(const wg::ProbeCase& pc) {
  return std::string(wg::probe_format_name(pc.fa)) + " x " + wg::probe_format_name(pc.fb) + " N=" + std::to_string(pc.n);
}

// ---- Diagnosis of one failing tile: per mismatch, where the hardware value sits in the model's
// tile (a permutation: layout or fragment fault) and how far it is from the exact dot product.
void diagnose_tile(const Batch& bt, std::int64_t local, std::uint64_t tile) {
  const wg::ProbeCase& pc = bt.pc;
  const int n = pc.n;
  const HostTile h = fetch_tile(bt, local);
  std::vector<std::uint32_t> model(static_cast<std::size_t>(wg::kM * n));
  for (int r = 0; r < wg::kM; ++r) {
    for (int c = 0; c < n; ++c) model[r * n + c] = f32_bits(host_model(pc, &h.a[r * 32], &h.b[c * 32], h.c[r * n + c]));
  }
  int bad = 0, found_elsewhere = 0, near_exact = 0, shown = 0;
  std::printf("  diagnosis of tile %llu (%s): hardware vs host model over its %d outputs\n",
              static_cast<unsigned long long>(tile), case_name(pc).c_str(), wg::kM * n);
  for (int r = 0; r < wg::kM; ++r) {
    for (int c = 0; c < n; ++c) {
      const std::uint32_t hw = f32_bits(h.d[r * n + c]);
      if (!differs(hw, model[r * n + c])) continue;
      ++bad;
      std::string where;
      int hits = 0;
      for (int i = 0; i < wg::kM * n; ++i) {
        if (model[i] == hw && !is_nan_bits(hw)) {
          if (hits++ < 4) where += " (" + std::to_string(i / n) + "," + std::to_string(i % n) + ")";
        }
      }
      if (hits) ++found_elsewhere;
      const Exact ex = exact_value(pc, &h.a[r * 32], &h.b[c * 32], h.c[r * n + c]);
      const double rel = std::fabs(static_cast<double>(h.d[r * n + c]) - ex.value) / (ex.scale > 0 ? ex.scale : 1.0);
      if (rel <= 0x1p-9) ++near_exact;
      if (shown++ < 6) {
        std::printf("    D[%d][%d]: hardware 0x%08x (%.9g) model 0x%08x (%.9g) exact %.12g |hw-exact|/max|term| %.3g; "
                    "model has the hardware value at %d place(s)%s\n",
                    r, c, hw, h.d[r * n + c], model[r * n + c], f32_from_bits(model[r * n + c]), ex.value, rel, hits,
                    where.c_str());
      }
    }
  }
  std::printf("  tile %llu: %d of %d outputs differ; %d of them equal a model output elsewhere in the tile "
              "(a layout/fragment fault if most do); %d are within 2^-9 of the largest term from the exact dot "
              "product (an arithmetic difference from the model if most are)\n",
              static_cast<unsigned long long>(tile), bad, wg::kM * n, found_elsewhere, near_exact);
}

void print_records(const wg::ProbeCase& pc, const wg::ProbeCounts& c) {
  const int shown = static_cast<int>(std::min<unsigned long long>(c.records_n, wg::kRecords));
  std::printf("  first %d mismatches (arrival order; replay: FP8MOE_TEST_SEED as printed by the run, or "
              "ProbeCase{%s, %s, N=%d, seed=0x%016llx} and the tile index):\n",
              shown, wg::probe_format_name(pc.fa), wg::probe_format_name(pc.fb), pc.n,
              static_cast<unsigned long long>(pc.seed));
  for (int i = 0; i < shown; ++i) {
    const wg::MismatchRecord& r = c.rec[i];
    const float cval = f32_from_bits(r.c_bits);
    const std::uint32_t host = f32_bits(host_model(pc, r.a, r.b, cval));
    const Exact ex = exact_value(pc, r.a, r.b, cval);
    std::printf("  [%d] tile %llu row %d col %d (codes %s, C %s)\n", i, static_cast<unsigned long long>(r.tile), r.row,
                r.col, wg::code_class_name(static_cast<int>(r.code_class)), wg::c_class_name(static_cast<int>(r.c_class)));
    std::printf("      a = %s\n      b = %s\n", hex_codes(r.a).c_str(), hex_codes(r.b).c_str());
    std::printf("      C 0x%08x (%.9g) | hardware 0x%08x (%.9g) | device model 0x%08x (%.9g) | host model 0x%08x%s | "
                "exact %.12g\n",
                r.c_bits, cval, r.hw_bits, f32_from_bits(r.hw_bits), r.model_bits, f32_from_bits(r.model_bits), host,
                host == r.model_bits ? "" : " (DIFFERS from the device model!)", ex.value);
  }
}

// ---- Spot check: a few tiles of the last batch, every class represented, host against device.
struct Spot {
  int tiles = 0;
  std::int64_t outputs = 0, input_diffs = 0, model_diffs = 0, host_mismatches = 0, device_mismatches = 0;
};
Spot spot_check(const Batch& bt, std::uint64_t first_tile) {
  const wg::ProbeCase& pc = bt.pc;
  const int n = pc.n;
  std::vector<std::int64_t> locals{0, bt.tiles - 1};
  std::vector<bool> seen_code(wg::kCodeClasses), seen_c(wg::kCClasses);
  for (std::int64_t l = 0; l < bt.tiles; ++l) {
    const wg::TileClass tc = wg::probe_tile_class(pc, first_tile + l);
    const int cc = static_cast<int>(tc.codes), ck = static_cast<int>(tc.c);
    if (!seen_code[cc] || !seen_c[ck]) locals.push_back(l);
    seen_code[cc] = true;
    seen_c[ck] = true;
  }
  std::sort(locals.begin(), locals.end());
  locals.erase(std::unique(locals.begin(), locals.end()), locals.end());
  const std::int64_t per = bt.tile_outputs();
  DeviceBuffer<wg::ProbeCounts> sc(1);
  sc.zero();
  DeviceBuffer<float> M(static_cast<std::size_t>(locals.size() * per));
  for (std::size_t s = 0; s < locals.size(); ++s) {
    const std::int64_t l = locals[s];
    wg::check(pc, first_tile + l, 1, bt.A.get() + l * wg::kM * wg::kK, bt.B.get() + l * n * wg::kK,
              bt.C.get() + l * per, bt.D.get() + l * per, sc.get(), M.get() + s * per);
  }
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "spot check");
  const std::vector<float> dev_model = M.download();
  Spot sp;
  sp.tiles = static_cast<int>(locals.size());
  for (std::size_t s = 0; s < locals.size(); ++s) {
    const std::uint64_t tile = first_tile + locals[s];
    const HostTile h = fetch_tile(bt, locals[s]);
    const wg::TileClass tc = wg::probe_tile_class(pc, tile);
    // The inputs again, on the host, from (seed, tile): equal bits prove the replay key works.
    for (int r = 0; r < wg::kM; ++r) {
      for (int k = 0; k < wg::kK; ++k) {
        sp.input_diffs += wg::probe_code(pc, tc, pc.fa, wg::kProbeTensorA, (tile * wg::kM + r) * wg::kK + k) != h.a[r * 32 + k];
      }
    }
    for (int c = 0; c < n; ++c) {
      for (int k = 0; k < wg::kK; ++k) {
        sp.input_diffs += wg::probe_code(pc, tc, pc.fb, wg::kProbeTensorB, (tile * n + c) * wg::kK + k) != h.b[c * 32 + k];
      }
    }
    for (int r = 0; r < wg::kM; ++r) {
      for (int c = 0; c < n; ++c) {
        const float cv = wg::probe_c(pc, tc, tile, r, c, &h.a[r * 32], &h.b[c * 32]);
        sp.input_diffs += f32_bits(cv) != f32_bits(h.c[r * n + c]);
        const std::uint32_t host = f32_bits(host_model(pc, &h.a[r * 32], &h.b[c * 32], h.c[r * n + c]));
        const std::uint32_t dev = f32_bits(dev_model[s * per + r * n + c]);
        sp.model_diffs += host != dev;
        sp.host_mismatches += differs(f32_bits(h.d[r * n + c]), host);
        ++sp.outputs;
      }
    }
  }
  sp.device_mismatches = static_cast<std::int64_t>(download_counts(sc).mismatches);
  return sp;
}

// ---- One (pair, N) case: 2^26 outputs in batches of 2^24, checked on the device.
void run_case(Fp8Format fa, Fp8Format fb, int n, std::uint64_t salt) {
  require_sm90();
  wg::ProbeCase pc;
  pc.fa = fa;
  pc.fb = fb;
  pc.n = n;
  pc.seed = test::seed_for(salt);
  const std::string name = case_name(pc);
  CAPTURE(name);
  CAPTURE(pc.seed);
  const std::int64_t per = std::int64_t{wg::kM} * n;
  const std::int64_t tiles_total = kOutputsPerCase / per, tiles_batch = kBatchOutputs / per;
  Batch bt(pc, tiles_batch);
  DeviceBuffer<wg::ProbeCounts> counts(1);
  counts.zero();
  const auto t0 = std::chrono::steady_clock::now();
  bool diagnosed = false;
  std::uint64_t first = 0;
  for (; first < static_cast<std::uint64_t>(tiles_total); first += static_cast<std::uint64_t>(tiles_batch)) {
    bt.run(first, counts.get());
    if (!diagnosed) {
      const wg::ProbeCounts c = download_counts(counts);
      if (c.mismatches != 0) {  // the records of the first failing batch are from this batch
        diagnosed = true;
        diagnose_tile(bt, static_cast<std::int64_t>(c.rec[0].tile - first), c.rec[0].tile);
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const wg::ProbeCounts c = download_counts(counts);
  // Outputs per class, from the tile classes (host).
  std::vector<std::int64_t> by_code(wg::kCodeClasses), by_c(wg::kCClasses);
  for (std::int64_t t = 0; t < tiles_total; ++t) {
    const wg::TileClass tc = wg::probe_tile_class(pc, static_cast<std::uint64_t>(t));
    by_code[static_cast<int>(tc.codes)] += per;
    by_c[static_cast<int>(tc.c)] += per;
  }
  std::string nan_bits;
  for (int s = 0; s < wg::kNanSlots; ++s) {
    if (c.nan_bits[s] == 0) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, " 0x%08x x%llu", c.nan_bits[s], c.nan_count[s]);
    nan_bits += buf;
  }
  if (c.nan_overflow) nan_bits += " (+" + std::to_string(c.nan_overflow) + " in other patterns)";
  if (nan_bits.empty()) nan_bits = " none";
  std::printf("[wgmma] %-16s | outputs %llu | mismatches %llu (model finite %llu, inf %llu, NaN %llu) | model finite "
              "%llu, inf %llu, NaN %llu | hw NaN %llu, NaN bits != model's 0x%08x: %llu | hw NaN bits:%s | %.2f s | "
              "seed 0x%016llx\n",
              name.c_str(), c.outputs, c.mismatches, c.mismatch_finite, c.mismatch_inf, c.mismatch_nan, c.model_finite,
              c.model_inf, c.model_nan, c.hw_nan, kTcNaN, c.nan_bits_differ, nan_bits.c_str(), secs,
              static_cast<unsigned long long>(pc.seed));
  std::string line = "        by code class (outputs/mismatches):";
  for (int i = 0; i < wg::kCodeClasses; ++i) {
    line += " " + std::string(wg::code_class_name(i)) + " " + std::to_string(by_code[i]) + "/" +
            std::to_string(c.mismatch_by_code[i]);
  }
  line += "\n        by C class (outputs/mismatches):";
  for (int i = 0; i < wg::kCClasses; ++i) {
    line += " " + std::string(wg::c_class_name(i)) + " " + std::to_string(by_c[i]) + "/" + std::to_string(c.mismatch_by_c[i]);
  }
  std::printf("%s\n", line.c_str());
  // The spot check on the last batch (still in device memory).
  const Spot sp = spot_check(bt, first - static_cast<std::uint64_t>(tiles_batch));
  std::printf("        spot check: %d tiles, %lld outputs: host-regenerated inputs differ in %lld, host tc_step != "
              "device tc_step in %lld, hardware vs host model %lld mismatches (device check counted %lld)\n",
              sp.tiles, static_cast<long long>(sp.outputs), static_cast<long long>(sp.input_diffs),
              static_cast<long long>(sp.model_diffs), static_cast<long long>(sp.host_mismatches),
              static_cast<long long>(sp.device_mismatches));
  if (c.mismatches != 0) print_records(pc, c);
  std::fflush(stdout);
  totals().outputs += static_cast<std::int64_t>(c.outputs);
  totals().mismatches += static_cast<std::int64_t>(c.mismatches);
  ++totals().cases;
  CHECK(c.outputs == static_cast<unsigned long long>(kOutputsPerCase));
  CHECK(c.model_finite + c.model_inf + c.model_nan == c.outputs);
  CHECK(sp.input_diffs == 0);
  CHECK(sp.model_diffs == 0);
  CHECK(sp.host_mismatches == sp.device_mismatches);
  CHECK(sp.outputs >= 4096);
  CHECK_MESSAGE(c.mismatches == 0, c.mismatches, " of ", c.outputs, " wgmma outputs differ from tc_step (", name, ")");
}

TEST_CASE("wgmma probe: layout check, finite codes and C = 0, e4m3 x e4m3, N = 8, 64, 128, 256") {
  require_sm90();
  for (int n : {8, 64, 128, 256}) {
    wg::ProbeCase pc;
    pc.n = n;
    pc.seed = test::seed_for(1500 + static_cast<std::uint64_t>(n));
    pc.force_codes = static_cast<int>(wg::CodeClass::finite);
    pc.force_c = static_cast<int>(wg::CClass::zero);
    CAPTURE(n);
    CAPTURE(pc.seed);
    Batch bt(pc, 64);
    DeviceBuffer<wg::ProbeCounts> counts(1);
    counts.zero();
    bt.run(0, counts.get());
    const wg::ProbeCounts c = download_counts(counts);
    // Evidence of a dot product at all: tile 0 against the exact value.
    const HostTile h = fetch_tile(bt, 0);
    double worst = 0;
    for (int r = 0; r < wg::kM; ++r) {
      for (int col = 0; col < n; ++col) {
        const Exact ex = exact_value(pc, &h.a[r * 32], &h.b[col * 32], h.c[r * n + col]);
        worst = std::max(worst, std::fabs(h.d[r * n + col] - ex.value) / (ex.scale > 0 ? ex.scale : 1.0));
      }
    }
    std::printf("[wgmma layout] N=%-3d: 64 tiles, %llu outputs, %llu mismatches; descriptors A lbo %u sbo %u, B lbo %u "
                "sbo %u (bytes); tile 0 max |hw - exact| / max|term| = %.3g (a correct dot product: about 2^-8 or less; a layout fault: order 1)\n",
                n, c.outputs, c.mismatches, wg::operand_lbo(wg::kM), wg::operand_sbo(wg::kM), wg::operand_lbo(n),
                wg::operand_sbo(n), worst);
    if (c.mismatches != 0) {
      print_records(pc, c);
      diagnose_tile(bt, static_cast<std::int64_t>(c.rec[0].tile), c.rec[0].tile);
      DeviceBuffer<wg::ProbeCounts> swapped(1);
      swapped.zero();
      bt.run(0, swapped.get(), /*swap_fields=*/true);
      std::printf("  the same tiles with the descriptor's LBO and SBO fields swapped: %llu mismatches (0 here means the "
                  "hardware reads the fields the other way round from PTX ISA 9.7.15.5.1.2.1)\n",
                  download_counts(swapped).mismatches);
    }
    std::fflush(stdout);
    CHECK_MESSAGE(c.mismatches == 0, "layout check N=", n, ": ", c.mismatches, " of ", c.outputs, " outputs differ");
  }
}

#define FP8MOE_WGMMA_PROBE_CASE(FA, FB, N, SALT) \
  TEST_CASE("wgmma probe " #FA " x " #FB " N=" #N) { run_case(Fp8Format::FA, Fp8Format::FB, N, SALT); }

FP8MOE_WGMMA_PROBE_CASE(e4m3, e4m3, 8, 1510)
FP8MOE_WGMMA_PROBE_CASE(e4m3, e4m3, 64, 1511)
FP8MOE_WGMMA_PROBE_CASE(e4m3, e4m3, 128, 1512)
FP8MOE_WGMMA_PROBE_CASE(e4m3, e4m3, 256, 1513)
FP8MOE_WGMMA_PROBE_CASE(e4m3, e5m2, 8, 1520)
FP8MOE_WGMMA_PROBE_CASE(e4m3, e5m2, 64, 1521)
FP8MOE_WGMMA_PROBE_CASE(e4m3, e5m2, 128, 1522)
FP8MOE_WGMMA_PROBE_CASE(e4m3, e5m2, 256, 1523)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e4m3, 8, 1530)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e4m3, 64, 1531)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e4m3, 128, 1532)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e4m3, 256, 1533)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e5m2, 8, 1540)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e5m2, 64, 1541)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e5m2, 128, 1542)
FP8MOE_WGMMA_PROBE_CASE(e5m2, e5m2, 256, 1543)

TEST_CASE("wgmma probe: suite total (>= 1e9 outputs when the whole binary runs)") {
  require_sm90();
  const SuiteTotals& t = totals();
  std::printf("[wgmma] suite total: %d of %d cases ran in this process, %lld outputs compared, %lld mismatches\n", t.cases,
              kProbeCases, static_cast<long long>(t.outputs), static_cast<long long>(t.mismatches));
  if (t.cases < kProbeCases) {
    std::printf("[wgmma] (ctest runs one case per process; run the binary alone for the 1e9 total: %d x 2^26 = %lld "
                "outputs)\n",
                kProbeCases, static_cast<long long>(kProbeCases * kOutputsPerCase));
  } else {
    CHECK(t.outputs >= 1000000000);
  }
  std::fflush(stdout);
  CHECK(t.mismatches == 0);
}

}  // namespace
