// The GEMM half of fp8moe-bench-kernels: TFLOP/s (2*M*N*K per pass) of every GPU backend's fwd,
// dgrad and wgrad. cublaslt runs at the production shapes (E, rows per expert, N, K) of issue 5;
// the simt promote-fp32 kernel and the GPU hp64 reference are correctness kernels (CUDA cores, a
// few TFLOP/s, seconds per production-shape call), so they run at (4, 1024, 1024, 1024) instead.
// Operands are quantized once before timing (the quantizers have their own table); a timed
// cublaslt call includes its scale relayouts. Baseline, timed in the same run on the same codes
// and shapes: the same per-expert cuBLASLt loop with per-tensor FP8 scaling (LtScaling::
// per_tensor), so "vs per-tensor" is what block scaling costs. Where CUTLASS was built, cutlass
// rows follow each cublaslt row: the same pass on the same codes in one grouped launch
// (kernels/cutlass_grouped.hpp), their baseline the cuBLASLt block-scaled loop timed just before:
// "cutlass" (the backend's kernel), "cutlass re-init" (the same with every launch uploading and
// initializing its arguments again, against the "cutlass" row: what the argument cache saves),
// "cutlass ex68" (CUTLASS example 68's configuration), and with --cutlass-tune every configuration
// (cutlass_variants).
// Data: kernels/datagen normal, fp32.
//
// Checked before timed (the `wrong` column; outputs start as the NaN sentinel, so an element a
// call leaves unwritten is wrong too):
//   cublaslt       bitwise against its model, hopper-tc:cublas with the split counts cuBLASLt ran
//                  (the simt kernel, itself bitwise the CPU reference: tests/kernels); the timed
//                  calls' last output bitwise the checked one; the per-tensor baseline all finite
//   cutlass        bitwise against hopper-tc:cublas without splits (the simt model); each later
//                  configuration bitwise that output; the timed calls' last output bitwise the
//                  checked one
//   simt deepgemm  bitwise against the CPU reference promote-fp32:deepgemm on the same codes
//   hp64           SQNR >= 250 dB against the CPU's fp64 passes (they differ in summation order only)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bench/bench_util.hpp"
#include "kernels/cublaslt_grouped.hpp"
#ifdef FP8MOE_HAVE_CUTLASS
#include "kernels/cutlass_grouped.hpp"
#endif
#include "kernels/datagen.hpp"
#include "kernels/hp64_gemm.hpp"
#include "kernels/quantize.hpp"
#include "kernels/simt_gemm.hpp"
#include "reference/datagen.hpp"
#include "reference/formats.hpp"
#include "reference/gemm.hpp"
#include "reference/metrics.hpp"
#include "results/h5.hpp"

namespace fp8moe::kernels::bench {
namespace {

using Shape = BenchShape;

// What a row's figure was checked against, and how many elements failed (any > 0 fails the bench).
struct Check {
  std::int64_t wrong = 0;
  std::string how;
};

double tflops_of(const Shape& s, double ms) {
  return 2.0 * static_cast<double>(s.E * s.Me) * static_cast<double>(s.N) * static_cast<double>(s.K) / (ms * 1e-3) / 1e12;
}

constexpr const char* kPerTensor = "cublaslt per-tensor FP8, same codes and shapes";

// One table row; base_ms > 0: the median of its baseline (`base_what`) on the same pass and shape.
void row(Run& run, const std::string& backend, Pass p, const Shape& s, double ms, const Check& c, double base_ms = 0,
         const char* base_what = kPerTensor, const std::string& config = {}) {
  const double tflops = tflops_of(s, ms);
  const double base = base_ms > 0 ? tflops_of(s, base_ms) : 0;
  char extra[64] = "|          - |      - |";
  if (base_ms > 0) std::snprintf(extra, sizeof extra, "| %10.1f | %5.1f%% |", base, 100.0 * tflops / base);
  run.count_check(c.wrong);
  std::printf("| %-16s | %-5s | (%2lld,%5lld,%5lld,%5lld) | %9.3f | %8.1f %s %9lld | %s\n", backend.c_str(), pass_name(p),
              static_cast<long long>(s.E), static_cast<long long>(s.Me), static_cast<long long>(s.N),
              static_cast<long long>(s.K), ms, tflops, extra, static_cast<long long>(c.wrong), c.how.c_str());
  std::fflush(stdout);
  h5::Group* rows = run.rows(Table::gemm);
  if (!rows) return;
  h5::Group g = rows->create_group(run.next_row_name(Table::gemm));
  g.set_attr("backend", backend);
  g.set_attr("pass", pass_name(p));
  g.set_attr("E", s.E);
  g.set_attr("rows_per_expert", s.Me);
  g.set_attr("N", s.N);
  g.set_attr("K", s.K);
  g.set_attr("median_ms", ms);
  g.set_attr("tflops", tflops);
  g.set_attr("runs", run.timing().runs);
  g.set_attr("wrong", c.wrong);
  g.set_attr("check", c.how);
  if (!config.empty()) g.set_attr("config", config);
  if (base_ms > 0) {
    g.set_attr("baseline", base_what);
    g.set_attr("baseline_median_ms", base_ms);
    g.set_attr("baseline_tflops", base);
    g.set_attr("ratio_to_baseline", tflops / base);
  }
}

std::vector<std::int32_t> uniform_offs(const Shape& s) {
  std::vector<std::int32_t> offs;
  for (std::int64_t e = 1; e <= s.E; ++e) offs.push_back(static_cast<std::int32_t>(e * s.Me));
  return offs;
}

std::string shape_name(const char* what, const Shape& s) {
  return cat(what, " (E,Me,N,K)=(", s.E, ",", s.Me, ",", s.N, ",", s.K, ")");
}

// fp32 inputs + codes + 1/128 scales + a bf16/fp32 output, with a margin
std::size_t estimate(std::int64_t in, std::int64_t out, std::size_t out_bytes) {
  return static_cast<std::size_t>(in) * 5 + static_cast<std::size_t>(in) / 16 + static_cast<std::size_t>(out) * out_bytes +
         (std::size_t{64} << 20);
}

// One cuBLASLt pass: `call` runs it into a bf16 buffer with the given scaling; `model` runs the
// hopper-tc:cublas simt kernel with the options it is given into a float buffer.
using LtCallFn = std::function<void(LtScaling, std::uint16_t*)>;
using ModelFn = std::function<void(const GemmOptions&, float*)>;

// The cuBLASLt row's block-scaled median and checked model output, for the cutlass row after it.
struct LtResult {
  double ms = 0;
  std::vector<float> model;  // hopper-tc:cublas with cuBLASLt's splits
  bool split = false;        // some expert ran split-K (the cutlass row needs its own model)
};

LtResult lt_pass(Run& run, CublasLtGrouped& lt, Pass p, const Shape& s, std::int64_t n_out, const GemmOptions& opt,
                 const LtCallFn& call, const ModelFn& model) {
  const auto n = static_cast<std::size_t>(n_out);
  DeviceBuffer<std::uint16_t> out(n);
  out.fill_sentinel();
  call(LtScaling::block, out.get());
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("cublaslt check", s));
  const std::vector<std::uint16_t> checked = download(out.get(), n);
  std::vector<float> got(n);
  for (std::size_t i = 0; i < n; ++i) got[i] = bf16_to_f32(checked[i]);
  GemmOptions m = opt;
  m.mode = Mode::hopper_tc;
  m.promotion = Promotion::cublas;
  m.split_k = lt.last_split_k(static_cast<std::size_t>(s.E));
  std::vector<float> want;
  {
    DeviceBuffer<float> mo(n);
    mo.fill_sentinel();
    model(m, mo.get());
    want = download(mo.get(), n);
  }
  Check c{bytes_differ(got, want), "bitwise vs hopper-tc:cublas (simt model, cuBLASLt's splits)"};

  const double blk = run.median_ms([&] { call(LtScaling::block, out.get()); });
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("cublaslt timing", s));
  const std::int64_t drift = bytes_differ(download(out.get(), n), checked);
  c.wrong += drift;
  if (drift) c.how += "; timed output differs from the checked one";

  DeviceBuffer<std::uint16_t> base(n);
  base.fill_sentinel();
  call(LtScaling::per_tensor, base.get());
  std::int64_t nonfinite = 0;
  for (const std::uint16_t b : download(base.get(), n)) nonfinite += !std::isfinite(bf16_to_f32(b));
  c.wrong += nonfinite;
  c.how += nonfinite ? "; per-tensor baseline has non-finite outputs" : "; per-tensor baseline finite";
  const double pt = run.median_ms([&] { call(LtScaling::per_tensor, base.get()); });
  row(run, "cublaslt", p, s, blk, c, pt);
  LtResult r{blk, std::move(want), false};
  for (const std::int32_t k : m.split_k) r.split = r.split || k > 1;
  return r;
}

#ifdef FP8MOE_HAVE_CUTLASS
// One CUTLASS pass on the same codes: checked bitwise against hopper-tc:cublas without splits (or,
// `verified` given, against that output of an earlier configuration, which was), then timed; its
// baseline the cuBLASLt loop's median from `lt`. Returns the checked output.
std::vector<std::uint16_t> cutlass_pass(Run& run, const std::string& name, CutlassGrouped& cut, Pass p, const Shape& s,
                                        std::int64_t n_out, const GemmOptions& opt,
                                        const std::function<void(std::uint16_t*)>& call, const ModelFn& model,
                                        const LtResult& lt, const std::vector<std::uint16_t>* verified) {
  const auto n = static_cast<std::size_t>(n_out);
  DeviceBuffer<std::uint16_t> out(n);
  out.fill_sentinel();
  call(out.get());
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("cutlass check", s));
  std::vector<std::uint16_t> checked = download(out.get(), n);
  Check c;
  if (verified) {
    c = {bytes_differ(checked, *verified), "bitwise vs the cutlass row's output (bitwise hopper-tc:cublas)"};
  } else {
    std::vector<float> got(n);
    for (std::size_t i = 0; i < n; ++i) got[i] = bf16_to_f32(checked[i]);
    std::vector<float> want = lt.model;
    if (lt.split) {  // cuBLASLt split K here: the unsplit model
      GemmOptions m = opt;
      m.mode = Mode::hopper_tc;
      m.promotion = Promotion::cublas;
      DeviceBuffer<float> mo(n);
      mo.fill_sentinel();
      model(m, mo.get());
      want = download(mo.get(), n);
    }
    c = {bytes_differ(got, want), "bitwise vs hopper-tc:cublas (simt model, no splits)"};
  }
  const double ms = run.median_ms([&] { call(out.get()); });
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("cutlass timing", s));
  const std::int64_t drift = bytes_differ(download(out.get(), n), checked);
  c.wrong += drift;
  if (drift) c.how += "; timed output differs from the checked one";
  row(run, name, p, s, ms, c, lt.ms, "cublaslt loop (block-scaled), same codes and shapes, timed in the same run",
      cut.last_config());
  if (name == "cutlass") {
    // The same kernel with every launch re-initialized (two output buffers in turn, so no launch
    // reruns the previous one's CUTLASS object): what the argument cache saves a call
    // (CutlassScratch), against the row above as baseline.
    DeviceBuffer<std::uint16_t> alt(n);
    alt.fill_sentinel();
    bool flip = true;  // the row above's last launch wrote `out`: start with the other buffer
    const std::int64_t reused = cut.reused_launches();
    const double reinit_ms = run.median_ms([&] {
      call(flip ? alt.get() : out.get());
      flip = !flip;
    });
    FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("cutlass re-init timing", s));
    Check r{bytes_differ(download(alt.get(), n), checked) + bytes_differ(download(out.get(), n), checked),
            "both buffers bitwise the cutlass row's checked output"};
    if (cut.reused_launches() != reused) {
      ++r.wrong;
      r.how += "; a launch reran the cached object";
    }
    row(run, "cutlass re-init", p, s, reinit_ms, r, ms, "the cutlass row (its launches rerun the cached CUTLASS object)",
        cut.last_config());
  }
  return checked;
}

// The configurations --cutlass-tune adds for `kind`: every kernel built for it and bf16
// (kernels/cutlass_kernels.def) in several tile walks, named by cutlass_short_name
// ("cutlass co/ov/M2"): CUTLASS's mainloop only with swizzle 1 (the reference points), cluster
// 2x1x1 with swizzle 1 and 2; those whose name contains `only`.
std::vector<std::pair<std::string, CutlassKernel>> cutlass_tune_variants(ScaleKind kind, const std::string& only) {
  std::vector<std::pair<std::string, CutlassKernel>> v;
  for (const CutlassBuiltKernel& b : cutlass_built_kernels()) {
    if (b.kind != kind) continue;
    for (CutlassRaster r : {CutlassRaster::along_m, CutlassRaster::along_n}) {
      for (int w : {1, 2, 4, 8}) {
        if (b.kernel.fold == CutlassFold::after_mma && w > 1) continue;
        if (b.kernel.cluster == CutlassCluster::m2n1 && w > 2) continue;
        CutlassKernel k = b.kernel;
        k.raster = r;
        k.swizzle = w;
        std::string name = "cutlass " + cutlass_short_name(k);
        if (name.find(only) != std::string::npos) v.emplace_back(std::move(name), k);
      }
    }
  }
  return v;
}

// The CUTLASS rows after each cuBLASLt row: "cutlass" (the backend's kernel, cutlass_choose),
// "cutlass ex68" (CUTLASS example 68's configuration: cooperative, CUTLASS's own mainloop, along M),
// then with --cutlass-tune cutlass_tune_variants.
std::vector<std::pair<std::string, std::optional<CutlassKernel>>> cutlass_variants(ScaleKind kind, bool tune,
                                                                                    const std::string& only) {
  std::vector<std::pair<std::string, std::optional<CutlassKernel>>> v{
      {"cutlass", std::nullopt},
      {"cutlass ex68", CutlassKernel{CutlassSchedule::cooperative, CutlassFold::after_mma, CutlassRaster::along_m, 1}}};
  if (!tune) return v;
  for (auto& [name, k] : cutlass_tune_variants(kind, only)) v.emplace_back(std::move(name), k);
  return v;
}

#endif

// A generated (normal, fp32) input of `shape`, quantized with recipe r; the fp32 copy is freed.
DeviceQuantized quantized_input(Recipe r, const std::vector<std::int64_t>& shape, std::uint32_t tensor,
                                std::span<const std::int32_t> offs, const QuantOptions& q) {
  const DeviceBuffer<float> x = generate_device(shape, Dist::normal, 1, tensor);
  return quantize<float>(r, x.get(), shape, offs, q);
}

void bench_cublaslt(Run& run, CublasLtGrouped& lt, const Shape& s, [[maybe_unused]] bool cutlass_tune,
                    [[maybe_unused]] const std::string& only) {
  const std::int64_t M = s.E * s.Me;
  const std::vector<std::int32_t> offs = uniform_offs(s);
  GemmOptions opt;
  opt.promotion = Promotion::cublas;
  const QuantOptions& q = opt.quant;
#ifdef FP8MOE_HAVE_CUTLASS
  CutlassGrouped cut;
  const auto cutlass_rows = [&](Pass p, std::int64_t n_out, const ModelFn& model, const LtResult& r,
                                const std::function<void(CutlassGrouped&, std::uint16_t*)>& call) {
    std::vector<std::uint16_t> first;  // the first row's output, checked against the model
    for (const auto& [name, k] :
         cutlass_variants(p == Pass::wgrad ? ScaleKind::act_act : ScaleKind::act_weight, cutlass_tune, only)) {
      cut.set_kernel(k);
      std::vector<std::uint16_t> got = cutlass_pass(run, name, cut, p, s, n_out, opt,
                                                    [&](std::uint16_t* out) { call(cut, out); }, model, r,
                                                    first.empty() ? nullptr : &first);
      if (first.empty()) first = std::move(got);
    }
  };
#endif
  {  // fwd: A (M,K) 1x128, W (E,N,K) 128x128 -> (M,N) bf16
    require_device_memory(estimate(M * s.K + s.E * s.N * s.K, M * s.N, 2 + 4 + 2), shape_name("cublaslt fwd", s));
    const DeviceQuantized a_q = quantized_input(Recipe::act_lhs, {M, s.K}, kTensorA, {}, q);
    const DeviceQuantized w_q = quantized_input(Recipe::weight_fwd, {s.E, s.N, s.K}, kTensorW, {}, q);
    const ModelFn model = [&](const GemmOptions& m, float* out) { simt_grouped_fwd(a_q, w_q, offs, m, out); };
    const LtResult r = lt_pass(run, lt, Pass::fwd, s, M * s.N, opt,
                               [&](LtScaling sc, std::uint16_t* out) { lt.fwd(a_q, w_q, offs, opt, out, nullptr, sc); },
                               model);
#ifdef FP8MOE_HAVE_CUTLASS
    cutlass_rows(Pass::fwd, M * s.N, model, r, [&](CutlassGrouped& c, std::uint16_t* out) { c.fwd(a_q, w_q, offs, opt, out); });
#endif
  }
  {  // dgrad: dOut (M,N) 1x128, W (E,N,K) as 128x128T (E,K,N) -> (M,K) bf16
    require_device_memory(estimate(M * s.N + s.E * s.N * s.K, M * s.K, 2 + 4 + 2), shape_name("cublaslt dgrad", s));
    const DeviceQuantized g_q = quantized_input(Recipe::act_lhs, {M, s.N}, kTensorGradOut, {}, q);
    const DeviceQuantized w_q = quantized_input(Recipe::weight_dgrad, {s.E, s.N, s.K}, kTensorW, {}, q);
    const ModelFn model = [&](const GemmOptions& m, float* out) { simt_grouped_dgrad(g_q, w_q, offs, m, out); };
    const LtResult r = lt_pass(run, lt, Pass::dgrad, s, M * s.K, opt,
                               [&](LtScaling sc, std::uint16_t* out) { lt.dgrad(g_q, w_q, offs, opt, out, nullptr, sc); },
                               model);
#ifdef FP8MOE_HAVE_CUTLASS
    cutlass_rows(Pass::dgrad, M * s.K, model, r, [&](CutlassGrouped& c, std::uint16_t* out) { c.dgrad(g_q, w_q, offs, opt, out); });
#endif
  }
  {  // wgrad: dOut^T (N,M) and A^T (K,M), 1x128 along tokens -> dW (E,N,K) bf16. cuBLASLt takes A^T as
     // kgrouped-lhs codes (K,M); the simt model the same blocks as kgrouped-rhs codes (M,K).
    require_device_memory(estimate(M * (s.N + 2 * s.K), s.E * s.N * s.K, 2 + 4 + 2), shape_name("cublaslt wgrad", s));
    const DeviceQuantized g_q = quantized_input(Recipe::kgrouped_lhs, {M, s.N}, kTensorGradOut, offs, q);
    const DeviceQuantized at_q = quantized_input(Recipe::kgrouped_lhs, {M, s.K}, kTensorA, offs, q);
    const DeviceQuantized a_q = quantized_input(Recipe::kgrouped_rhs, {M, s.K}, kTensorA, offs, q);
    const ModelFn model = [&](const GemmOptions& m, float* out) { simt_grouped_wgrad(g_q, a_q, offs, m, out); };
    const LtResult r = lt_pass(run, lt, Pass::wgrad, s, s.E * s.N * s.K, opt,
                               [&](LtScaling sc, std::uint16_t* out) { lt.wgrad(g_q, at_q, offs, opt, out, nullptr, sc); },
                               model);
#ifdef FP8MOE_HAVE_CUTLASS
    cutlass_rows(Pass::wgrad, s.E * s.N * s.K, model, r,
                 [&](CutlassGrouped& c, std::uint16_t* out) { c.wgrad(g_q, at_q, offs, opt, out); });
#endif
  }
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("after cublaslt", s));
}

// The simt kernel's output bitwise the CPU reference on the same codes (float vs double values).
Check simt_check(const std::vector<float>& got, const TensorD& want) {
  std::int64_t wrong = got.size() == want.data.size() ? 0 : static_cast<std::int64_t>(got.size());
  for (std::size_t i = 0; wrong == 0 && i < got.size(); ++i) {
    const float w = static_cast<float>(want.data[i]);
    wrong += std::memcmp(&got[i], &w, sizeof w) != 0;
  }
  return {wrong, "bitwise vs CPU reference promote-fp32:deepgemm, same codes"};
}

Check hp64_check(const std::vector<double>& got, const TensorD& want) {
  const double db = sqnr_db(want.data, got);
  char how[96];
  std::snprintf(how, sizeof how, "SQNR %.1f dB vs CPU hp64 (>= 250)", db);
  std::int64_t nonfinite = 0;
  for (const double v : got) nonfinite += !std::isfinite(v);
  return {nonfinite + (db >= 250.0 ? 0 : 1), how};
}

void bench_cuda_cores(Run& run, const Shape& s) {
  const std::int64_t M = s.E * s.Me;
  const std::vector<std::int32_t> offs = uniform_offs(s);
  GemmOptions opt;
  opt.promotion = Promotion::deepgemm;
  const DeviceBuffer<float> a = generate_device({M, s.K}, Dist::normal, 1, kTensorA);
  const DeviceBuffer<float> w = generate_device({s.E, s.N, s.K}, Dist::normal, 1, kTensorW);
  const DeviceBuffer<float> g = generate_device({M, s.N}, Dist::normal, 1, kTensorGradOut);
  const DeviceQuantized a_q = quantize<float>(Recipe::act_lhs, a.get(), {M, s.K}, {}, opt.quant);
  const DeviceQuantized w_q = quantize<float>(Recipe::weight_fwd, w.get(), {s.E, s.N, s.K}, {}, opt.quant);
  const DeviceQuantized g_q = quantize<float>(Recipe::act_lhs, g.get(), {M, s.N}, {}, opt.quant);
  const DeviceQuantized wt_q = quantize<float>(Recipe::weight_dgrad, w.get(), {s.E, s.N, s.K}, {}, opt.quant);
  const DeviceQuantized gt_q = quantize<float>(Recipe::kgrouped_lhs, g.get(), {M, s.N}, offs, opt.quant);
  const DeviceQuantized ar_q = quantize<float>(Recipe::kgrouped_rhs, a.get(), {M, s.K}, offs, opt.quant);
  const std::size_t n = static_cast<std::size_t>(std::max(M * std::max(s.N, s.K), s.E * s.N * s.K));
  DeviceBuffer<float> out(n);
  DeviceBuffer<double> out64(n);
  const auto simt = [&](Pass p, const std::function<void()>& fn, std::int64_t n_out, const TensorD& want) {
    out.fill_sentinel();
    fn();
    const Check c = simt_check(download(out.get(), static_cast<std::size_t>(n_out)), want);
    row(run, "simt deepgemm", p, s, run.median_ms(fn), c);
  };
  simt(Pass::fwd, [&] { simt_grouped_fwd(a_q, w_q, offs, opt, out.get()); }, M * s.N,
       grouped_fwd_q(a_q.to_host(), w_q.to_host(), offs, opt));
  simt(Pass::dgrad, [&] { simt_grouped_dgrad(g_q, wt_q, offs, opt, out.get()); }, M * s.K,
       grouped_dgrad_q(g_q.to_host(), wt_q.to_host(), offs, opt));
  simt(Pass::wgrad, [&] { simt_grouped_wgrad(gt_q, ar_q, offs, opt, out.get()); }, s.E * s.N * s.K,
       grouped_wgrad_q(gt_q.to_host(), ar_q.to_host(), offs, opt));

  GemmOptions hp;
  hp.mode = Mode::hp64;
  const auto host = [](std::vector<std::int64_t> shape, const float* dev) {
    TensorF t(std::move(shape));
    t.data = download(dev, t.data.size());
    return t;
  };
  const TensorF ah = host({M, s.K}, a.get()), wh = host({s.E, s.N, s.K}, w.get()), gh = host({M, s.N}, g.get());
  const auto hp64 = [&](Pass p, const std::function<void()>& fn, std::int64_t n_out, const TensorD& want) {
    out64.fill_sentinel();
    fn();
    const Check c = hp64_check(download(out64.get(), static_cast<std::size_t>(n_out)), want);
    row(run, "hp64", p, s, run.median_ms(fn), c);
  };
  hp64(Pass::fwd, [&] { hp64_grouped_fwd(a.get(), w.get(), M, s.N, s.K, offs, out64.get()); }, M * s.N,
       grouped_fwd(ah, wh, offs, hp));
  hp64(Pass::dgrad, [&] { hp64_grouped_dgrad(g.get(), w.get(), M, s.N, s.K, offs, out64.get()); }, M * s.K,
       grouped_dgrad(gh, wh, offs, hp));
  hp64(Pass::wgrad, [&] { hp64_grouped_wgrad(g.get(), a.get(), M, s.N, s.K, offs, out64.get()); }, s.E * s.N * s.K,
       grouped_wgrad(gh, ah, offs, hp));
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("after the CUDA-core GEMMs", s));
}

}  // namespace

void bench_gemms(Run& run, bool cutlass_tune, const std::string& only, const std::vector<BenchShape>& shapes) {
  std::printf("\n(baseline: a cublaslt row's is the per-tensor-scaled cuBLASLt loop; a cutlass row's the block-scaled "
              "cuBLASLt loop of the row above it)\n");
  std::printf("\n| backend          | pass  | (E,   Me,    N,    K) | median ms | TFLOP/s  | baseline   | ratio  |     wrong | checked as\n");
  std::printf("|------------------|-------|-----------------------|-----------|----------|------------|--------|-----------|-----------\n");
  CublasLtGrouped lt;
  const std::vector<BenchShape> todo = shapes.empty() ? default_bench_shapes() : shapes;
  // Progress on stderr, one line per shape (a tuning sweep runs minutes per shape).
  for (std::size_t i = 0; i < todo.size(); ++i) {
    std::fprintf(stderr, "fp8moe bench: %s (shape %zu of %zu)\n", shape_name("GEMMs at", todo[i]).c_str(), i + 1,
                 todo.size());
    bench_cublaslt(run, lt, todo[i], cutlass_tune, only);
  }
  if (shapes.empty()) {  // with --shape, only the shapes asked for
    const Shape simt{4, 1024, 1024, 1024};
    std::fprintf(stderr, "fp8moe bench: %s\n", shape_name("CUDA-core GEMMs at", simt).c_str());
    bench_cuda_cores(run, simt);
  }
}

}  // namespace fp8moe::kernels::bench

namespace fp8moe::kernels {

void check_cutlass_tune(bool tune, const std::string& only) {
  if (!tune) return;
#ifdef FP8MOE_HAVE_CUTLASS
  // The filter must keep a configuration of one scale kind at least.
  using bench::cutlass_tune_variants;
  if (!only.empty() && cutlass_tune_variants(ScaleKind::act_weight, only).empty() &&
      cutlass_tune_variants(ScaleKind::act_act, only).empty()) {
    fail("--cutlass-only '", only,
         "' names no CUTLASS configuration (rows are named like co/ov/M2, pp/cl/M1, co/ov/N1/2x1, co/f1/M1/n192, "
         "co/f1/M2/2x1/n192/ya)");
  }
#else
  (void)only;
  fail("--cutlass-tune times CUTLASS's kernel configurations, and this fp8moe was built without CUTLASS: run "
       "scripts/setup.sh (it installs CUTLASS's headers) and rebuild, or drop --cutlass-tune/--cutlass-only");
#endif
}

}  // namespace fp8moe::kernels
