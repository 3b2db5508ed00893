#pragma once
// Timing for fp8moe-bench-kernels (bench_quant.cu, bench_gemm.cu): CUDA events around each
// launch on the default stream, kWarmup untimed runs, the median of kRuns.
#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/check.hpp"
#include "results/h5.hpp"

namespace fp8moe::kernels::bench {

inline constexpr int kWarmup = 3, kRuns = 30;

inline double median_ms(const std::function<void()>& fn, int runs = kRuns) {
  cudaEvent_t a, b;
  FP8MOE_CUDA_CHECK(cudaEventCreate(&a));
  FP8MOE_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<float> ms(static_cast<std::size_t>(runs));
  for (int i = 0; i < runs; ++i) {
    FP8MOE_CUDA_CHECK(cudaEventRecord(a));
    fn();
    FP8MOE_CUDA_CHECK(cudaEventRecord(b));
    FP8MOE_CUDA_CHECK(cudaEventSynchronize(b));
    FP8MOE_CUDA_CHECK(cudaEventElapsedTime(&ms[static_cast<std::size_t>(i)], a, b));
  }
  FP8MOE_CUDA_CHECK(cudaEventDestroy(a));
  FP8MOE_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[static_cast<std::size_t>(runs / 2)];
}

// The GEMM table (bench_gemm.cu): every GPU backend's fwd, dgrad and wgrad at the production
// shapes; rows also go to `rows` (one subgroup per row, attributes as columns) when given.
void bench_gemms(h5::Group* rows);

}  // namespace fp8moe::kernels::bench
