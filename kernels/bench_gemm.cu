// The GEMM half of fp8moe-bench-kernels: TFLOP/s (2*M*N*K per pass) of every GPU backend's fwd,
// dgrad and wgrad. cublaslt runs at the production shapes (E, rows per expert, N, K) of issue 5;
// the simt promote-fp32 kernel and the GPU hp64 reference are correctness kernels (CUDA cores, a
// few TFLOP/s, seconds per production-shape call), so they run at (4, 1024, 1024, 1024) instead.
// Operands are quantized once before timing (the quantizers have their own table); a timed
// cublaslt call includes its scale relayouts. Baseline, timed in the same run on the same codes
// and shapes: the same per-expert cuBLASLt loop with per-tensor FP8 scaling (LtScaling::
// per_tensor), so "vs per-tensor" is what block scaling costs. Data: kernels/datagen normal, fp32.
#include <cstdio>
#include <string>

#include "kernels/bench_util.hpp"
#include "kernels/cublaslt_grouped.hpp"
#include "kernels/datagen.hpp"
#include "kernels/hp64_gemm.hpp"
#include "kernels/quantize.hpp"
#include "kernels/simt_gemm.hpp"
#include "reference/datagen.hpp"

namespace fp8moe::kernels::bench {
namespace {

struct Shape {
  std::int64_t E, Me, N, K;
};

int g_row = 0;

double tflops_of(const Shape& s, double ms) {
  return 2.0 * static_cast<double>(s.E * s.Me) * static_cast<double>(s.N) * static_cast<double>(s.K) / (ms * 1e-3) / 1e12;
}

// One table row; base_ms > 0: the per-tensor baseline's median of the same pass and shape.
void row(h5::Group* rows, const char* backend, Pass p, const Shape& s, double ms, double base_ms = 0) {
  const double tflops = tflops_of(s, ms);
  const double base = base_ms > 0 ? tflops_of(s, base_ms) : 0;
  char extra[64] = "|          - |      - |";
  if (base_ms > 0) std::snprintf(extra, sizeof extra, "| %10.1f | %5.1f%% |", base, 100.0 * tflops / base);
  std::printf("| %-13s | %-5s | (%2lld,%5lld,%5lld,%5lld) | %9.3f | %8.1f %s\n", backend, pass_name(p),
              static_cast<long long>(s.E), static_cast<long long>(s.Me), static_cast<long long>(s.N),
              static_cast<long long>(s.K), ms, tflops, extra);
  std::fflush(stdout);
  if (!rows) return;
  char name[32];
  std::snprintf(name, sizeof name, "row%03d", g_row++);
  h5::Group g = rows->create_group(name);
  g.set_attr("backend", backend);
  g.set_attr("pass", pass_name(p));
  g.set_attr("E", s.E);
  g.set_attr("rows_per_expert", s.Me);
  g.set_attr("N", s.N);
  g.set_attr("K", s.K);
  g.set_attr("median_ms", ms);
  g.set_attr("tflops", tflops);
  g.set_attr("runs", kRuns);
  if (base_ms > 0) {
    g.set_attr("baseline", "cublaslt per-tensor FP8, same codes and shapes");
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

void bench_cublaslt(CublasLtGrouped& lt, const Shape& s, h5::Group* rows) {
  const std::int64_t M = s.E * s.Me;
  const std::vector<std::int32_t> offs = uniform_offs(s);
  GemmOptions opt;
  opt.promotion = Promotion::cublas;
  {  // fwd: A (M,K) 1x128, W (E,N,K) 128x128 -> (M,N) bf16
    require_device_memory(estimate(M * s.K + s.E * s.N * s.K, M * s.N, 2), shape_name("cublaslt fwd", s));
    DeviceQuantized a_q, w_q;
    {
      const DeviceBuffer<float> a = generate_device({M, s.K}, Dist::normal, 1, kTensorA);
      a_q = quantize<float>(Recipe::act_lhs, a.get(), {M, s.K}, {}, opt.quant);
    }
    {
      const DeviceBuffer<float> w = generate_device({s.E, s.N, s.K}, Dist::normal, 1, kTensorW);
      w_q = quantize<float>(Recipe::weight_fwd, w.get(), {s.E, s.N, s.K}, {}, opt.quant);
    }
    DeviceBuffer<std::uint16_t> out(static_cast<std::size_t>(M * s.N));
    const double blk = median_ms([&] { lt.fwd(a_q, w_q, offs, opt, out.get()); });
    const double pt = median_ms([&] { lt.fwd(a_q, w_q, offs, opt, out.get(), nullptr, LtScaling::per_tensor); });
    row(rows, "cublaslt", Pass::fwd, s, blk, pt);
  }
  {  // dgrad: dOut (M,N) 1x128, W (E,N,K) as 128x128T (E,K,N) -> (M,K) bf16
    require_device_memory(estimate(M * s.N + s.E * s.N * s.K, M * s.K, 2), shape_name("cublaslt dgrad", s));
    DeviceQuantized g_q, w_q;
    {
      const DeviceBuffer<float> g = generate_device({M, s.N}, Dist::normal, 1, kTensorGradOut);
      g_q = quantize<float>(Recipe::act_lhs, g.get(), {M, s.N}, {}, opt.quant);
    }
    {
      const DeviceBuffer<float> w = generate_device({s.E, s.N, s.K}, Dist::normal, 1, kTensorW);
      w_q = quantize<float>(Recipe::weight_dgrad, w.get(), {s.E, s.N, s.K}, {}, opt.quant);
    }
    DeviceBuffer<std::uint16_t> out(static_cast<std::size_t>(M * s.K));
    const double blk = median_ms([&] { lt.dgrad(g_q, w_q, offs, opt, out.get()); });
    const double pt = median_ms([&] { lt.dgrad(g_q, w_q, offs, opt, out.get(), nullptr, LtScaling::per_tensor); });
    row(rows, "cublaslt", Pass::dgrad, s, blk, pt);
  }
  {  // wgrad: dOut^T (N,M) and A^T (K,M), 1x128 along tokens -> dW (E,N,K) bf16
    require_device_memory(estimate(M * (s.N + s.K), s.E * s.N * s.K, 2), shape_name("cublaslt wgrad", s));
    DeviceQuantized g_q, a_q;
    {
      const DeviceBuffer<float> g = generate_device({M, s.N}, Dist::normal, 1, kTensorGradOut);
      g_q = quantize<float>(Recipe::kgrouped_lhs, g.get(), {M, s.N}, offs, opt.quant);
    }
    {
      const DeviceBuffer<float> a = generate_device({M, s.K}, Dist::normal, 1, kTensorA);
      a_q = quantize<float>(Recipe::kgrouped_lhs, a.get(), {M, s.K}, offs, opt.quant);
    }
    DeviceBuffer<std::uint16_t> out(static_cast<std::size_t>(s.E * s.N * s.K));
    const double blk = median_ms([&] { lt.wgrad(g_q, a_q, offs, opt, out.get()); });
    const double pt = median_ms([&] { lt.wgrad(g_q, a_q, offs, opt, out.get(), nullptr, LtScaling::per_tensor); });
    row(rows, "cublaslt", Pass::wgrad, s, blk, pt);
  }
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("after cublaslt", s));
}

void bench_cuda_cores(const Shape& s, h5::Group* rows) {
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
  DeviceBuffer<float> out(static_cast<std::size_t>(std::max(M * std::max(s.N, s.K), s.E * s.N * s.K)));
  DeviceBuffer<double> out64(out.size());
  row(rows, "simt deepgemm", Pass::fwd, s, median_ms([&] { simt_grouped_fwd(a_q, w_q, offs, opt, out.get()); }));
  row(rows, "simt deepgemm", Pass::dgrad, s, median_ms([&] { simt_grouped_dgrad(g_q, wt_q, offs, opt, out.get()); }));
  row(rows, "simt deepgemm", Pass::wgrad, s, median_ms([&] { simt_grouped_wgrad(gt_q, ar_q, offs, opt, out.get()); }));
  row(rows, "hp64", Pass::fwd, s,
      median_ms([&] { hp64_grouped_fwd(a.get(), w.get(), M, s.N, s.K, offs, out64.get()); }));
  row(rows, "hp64", Pass::dgrad, s,
      median_ms([&] { hp64_grouped_dgrad(g.get(), w.get(), M, s.N, s.K, offs, out64.get()); }));
  row(rows, "hp64", Pass::wgrad, s,
      median_ms([&] { hp64_grouped_wgrad(g.get(), a.get(), M, s.N, s.K, offs, out64.get()); }));
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), shape_name("after the CUDA-core GEMMs", s));
}

}  // namespace

void bench_gemms(h5::Group* rows) {
  std::printf("\n| backend       | pass  | (E,   Me,    N,    K) | median ms | TFLOP/s  | per-tensor | ratio  |\n");
  std::printf("|---------------|-------|-----------------------|-----------|----------|------------|--------|\n");
  CublasLtGrouped lt;
  for (const Shape& s : {Shape{8, 4096, 4096, 7168}, Shape{8, 4096, 7168, 2048}, Shape{4, 8192, 4096, 7168},
                         Shape{16, 2048, 5120, 8192}}) {
    bench_cublaslt(lt, s, rows);
  }
  bench_cuda_cores(Shape{4, 1024, 1024, 1024}, rows);
}

}  // namespace fp8moe::kernels::bench
