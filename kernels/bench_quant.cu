// fp8moe-bench-kernels: GB/s of every GPU quantizer next to a device-to-device copy timed in the
// same run, and the simt GEMM's TFLOP/s at one small shape (STYLE.md: reference, variants,
// validate, bench side by side; the bitwise checks live in tests/kernels/).
//   bytes of a quantizer = input read + codes written + scales written
//   bytes of the copy    = 2 x the quantizer input's size (read + write), same buffer size
// Timing: CUDA events around each launch, 3 warm-up runs, the median of 30. Data: the GPU
// generator (kernels/datagen.hpp), normal, bf16 values. Exits 77 when no CUDA device is present.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/check.hpp"
#include "kernels/datagen.hpp"
#include "kernels/quantize.hpp"
#include "kernels/simt_gemm.hpp"
#include "reference/datagen.hpp"

namespace {

using namespace fp8moe;
using namespace fp8moe::kernels;

constexpr int kWarmup = 3, kRuns = 30;

// Median milliseconds of fn() over kRuns timed launches.
double median_ms(const std::function<void()>& fn) {
  cudaEvent_t a, b;
  FP8MOE_CUDA_CHECK(cudaEventCreate(&a));
  FP8MOE_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<float> ms(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    FP8MOE_CUDA_CHECK(cudaEventRecord(a));
    fn();
    FP8MOE_CUDA_CHECK(cudaEventRecord(b));
    FP8MOE_CUDA_CHECK(cudaEventSynchronize(b));
    FP8MOE_CUDA_CHECK(cudaEventElapsedTime(&ms[static_cast<std::size_t>(i)], a, b));
  }
  FP8MOE_CUDA_CHECK(cudaEventDestroy(a));
  FP8MOE_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[kRuns / 2];
}

struct QuantCase {
  Recipe recipe;
  std::vector<std::int64_t> shape;
  std::vector<std::int32_t> offs;
};

std::string shape_text(const std::vector<std::int64_t>& s) { return shape_str(s); }

template <class T>
void bench_quant(const QuantCase& c, const char* dtype, const QuantOptions& opt) {
  std::int64_t n = 1;
  for (auto d : c.shape) n *= d;
  const QuantLayout l = quant_layout(c.recipe, c.shape, c.offs, opt);
  // input + its copy + codes + scales
  require_device_memory(static_cast<std::size_t>(n) * (2 * sizeof(T) + 1) + sizeof(float) * l.scale_count(),
                        std::string("bench ") + recipe_name(c.recipe) + " " + shape_text(c.shape));
  DeviceBuffer<T> x(static_cast<std::size_t>(n));
  generate_slice_device<T>(Dist::normal, 1, kTensorA, c.shape.back(), 0, n, x.get());
  DeviceBuffer<std::uint8_t> codes(static_cast<std::size_t>(l.code_count()));
  DeviceBuffer<float> scales(static_cast<std::size_t>(l.scale_count()));
  DeviceBuffer<std::uint8_t> copy_dst(x.bytes());
  const double q_ms = median_ms([&] {
    quantize_into<T>(c.recipe, x.get(), c.shape, c.offs, codes.get(), scales.get(), opt);
  });
  const double c_ms = median_ms([&] {
    FP8MOE_CUDA_CHECK(cudaMemcpyAsync(copy_dst.get(), x.get(), x.bytes(), cudaMemcpyDeviceToDevice), x.bytes(), " bytes");
  });
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "after ", recipe_name(c.recipe));
  const double q_bytes = static_cast<double>(x.bytes() + codes.bytes() + scales.bytes());
  const double q_gbs = q_bytes / (q_ms * 1e-3) / 1e9, c_gbs = 2.0 * x.bytes() / (c_ms * 1e-3) / 1e9;
  std::printf("| %-12s | %-5s | %-18s | %4d | %9.3f | %8.1f | %9.3f | %8.1f | %5.1f%% |\n", recipe_name(c.recipe),
              dtype, shape_text(c.shape).c_str(), opt.block, q_ms, q_gbs, c_ms, c_gbs, 100.0 * q_gbs / c_gbs);
  std::fflush(stdout);
}

void bench_simt(Promotion promo) {
  // fwd at (E, rows per expert, N, K) = (4, 1024, 1024, 1024): a correctness kernel, not a fast one
  const std::int64_t E = 4, Me = 1024, N = 1024, K = 1024, M = E * Me;
  std::vector<std::int32_t> offs;
  for (std::int64_t e = 1; e <= E; ++e) offs.push_back(static_cast<std::int32_t>(e * Me));
  GemmOptions opt;
  opt.promotion = promo;
  DeviceBuffer<float> a = generate_device({M, K}, Dist::normal, 1, kTensorA);
  DeviceBuffer<float> w = generate_device({E, N, K}, Dist::normal, 1, kTensorW);
  const DeviceQuantized a_q = quantize<float>(Recipe::act_lhs, a.get(), {M, K}, {}, opt.quant);
  const DeviceQuantized w_q = quantize<float>(Recipe::weight_fwd, w.get(), {E, N, K}, {}, opt.quant);
  DeviceBuffer<float> out(static_cast<std::size_t>(M * N));
  const double ms = median_ms([&] { simt_grouped_fwd(a_q, w_q, offs, opt, out.get()); });
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "after the simt GEMM");
  const double tflops = 2.0 * M * N * K / (ms * 1e-3) / 1e12;
  std::printf("| simt fwd %-8s | (%lld,%lld,%lld,%lld) | %9.3f | %8.2f |\n", promotion_name(promo),
              static_cast<long long>(E), static_cast<long long>(Me), static_cast<long long>(N),
              static_cast<long long>(K), ms, tflops);
}

}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::printf("fp8moe-bench-kernels: no CUDA device is visible; nothing to measure (exit 77)\n");
    return 77;
  }
  try {
    cudaDeviceProp p{};
    FP8MOE_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    std::printf("fp8moe-bench-kernels on %s (sm_%d%d, %d SMs); median of %d runs after %d warm-up, CUDA events\n\n",
                p.name, p.major, p.minor, p.multiProcessorCount, kRuns, kWarmup);
    std::printf("| recipe       | input | shape              |    B | quant ms  | quant GB/s | copy ms   | copy GB/s | q/copy |\n");
    std::printf("|--------------|-------|--------------------|------|-----------|----------|-----------|----------|--------|\n");
    const std::int64_t M = 16384, K = 7168, E = 8;
    std::vector<std::int32_t> offs;
    for (std::int64_t e = 1; e <= E; ++e) offs.push_back(static_cast<std::int32_t>(e * M / E));
    const std::vector<QuantCase> cases{
        {Recipe::act_lhs, {M, K}, {}},          {Recipe::act_rhs, {M, K}, {}},
        {Recipe::act_lhs_t, {M, K}, {}},        {Recipe::weight_fwd, {E, 2048, K}, {}},
        {Recipe::weight_dgrad, {E, 2048, K}, {}}, {Recipe::kgrouped_lhs, {M, K}, offs},
        {Recipe::kgrouped_rhs, {M, K}, offs},
    };
    const QuantOptions opt;
    for (const QuantCase& c : cases) {
      bench_quant<Bf16Bits>(c, "bf16", opt);
      bench_quant<float>(c, "fp32", opt);
    }
    std::printf("\n| kernel            | (E,Me,N,K)             | ms        | TFLOP/s  |\n");
    std::printf("|-------------------|------------------------|-----------|----------|\n");
    bench_simt(Promotion::deepgemm);
    bench_simt(Promotion::cublas);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8moe-bench-kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
