#pragma once
// Timing and checking for fp8moe-bench-kernels (bench_quant.cu, bench_gemm.cu), the habits of
// llm.c's dev/cuda and nccl-tests: every timed configuration is first checked in the same run
// (its `wrong` count printed next to the figure), L2 is flushed before every sample (so a kernel
// is not timed on operands a previous sample left in cache), CUDA events are owned (freed on every
// path), timing().warmup untimed runs, the median of timing().runs (3 and 30 unless the bench's
// --warmup and --runs say otherwise: fewer under a profiler, which then sees few launches a row).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/check.hpp"

namespace fp8moe::h5 {
class Group;  // results/h5.hpp: only the bench sources that write rows include it
}

namespace fp8moe::kernels::bench {

struct Timing {
  int warmup = 3, runs = 30;
};
// The bench's timing, set once from its options (run_kernel_bench) before anything is timed.
inline Timing& timing() {
  static Timing t;
  return t;
}

// One CUDA event, destroyed with its owner (also when a timed function throws).
class Event {
 public:
  Event() { FP8MOE_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_{};
};

// Evicts the device's L2 by writing a buffer of twice its size (cudaDevAttrL2CacheSize).
class L2Flush {
 public:
  L2Flush() {
    int dev = 0, bytes = 0;
    FP8MOE_CUDA_CHECK(cudaGetDevice(&dev));
    FP8MOE_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev));
    buf_ = DeviceBuffer<std::uint8_t>(2 * static_cast<std::size_t>(std::max(bytes, 1 << 20)));
  }
  void operator()() { FP8MOE_CUDA_CHECK(cudaMemsetAsync(buf_.get(), static_cast<int>(++fill_ & 0xff), buf_.bytes())); }
  std::size_t bytes() const { return buf_.bytes(); }

 private:
  DeviceBuffer<std::uint8_t> buf_;
  unsigned fill_ = 0;
};

// The median of timing().runs timed calls of fn, each after an L2 flush (outside the timed interval).
inline double median_ms(const std::function<void()>& fn) {
  static L2Flush flush;  // one buffer for the whole bench
  const Event a, b;
  const int runs = timing().runs;
  for (int i = 0; i < timing().warmup; ++i) fn();
  std::vector<float> ms(static_cast<std::size_t>(runs));
  for (int i = 0; i < runs; ++i) {
    flush();
    FP8MOE_CUDA_CHECK(cudaEventRecord(a.get()));
    fn();
    FP8MOE_CUDA_CHECK(cudaEventRecord(b.get()));
    FP8MOE_CUDA_CHECK(cudaEventSynchronize(b.get()));
    FP8MOE_CUDA_CHECK(cudaEventElapsedTime(&ms[static_cast<std::size_t>(i)], a.get(), b.get()));
  }
  std::sort(ms.begin(), ms.end());
  return ms[static_cast<std::size_t>(runs / 2)];
}

template <class T>
std::vector<T> download(const T* p, std::size_t n) {
  std::vector<T> h(n);
  if (n > 0) FP8MOE_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), n, " elements");
  return h;
}

// Elements whose bytes differ (a NaN never equals anything here: bitwise).
template <class T>
std::int64_t bytes_differ(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return static_cast<std::int64_t>(std::max(a.size(), b.size()));
  if (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0) return 0;  // the usual case, fast
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return n;
}

// Checks that failed in this run; run_kernel_bench fails at the end when there is any.
inline int& failed_checks() {
  static int n = 0;
  return n;
}

// The GEMM table (bench_gemm.cu): every GPU backend's fwd, dgrad and wgrad at the production
// shapes; rows also go to `rows` (one subgroup per row, attributes as columns) when given.
// cutlass_tune: also every CUTLASS configuration whose row name contains `only` (empty: all).
void bench_gemms(h5::Group* rows, bool cutlass_tune, const std::string& only);

}  // namespace fp8moe::kernels::bench
