#pragma once
// Timing and checking for fp8moe-bench-kernels (bench_quant.cu, bench_gemm.cu), the habits of
// llm.c's dev/cuda and nccl-tests: every timed configuration is first checked in the same run
// (its `wrong` count printed next to the figure), L2 is flushed before every sample (so a kernel
// is not timed on operands a previous sample left in cache), CUDA events are owned (freed on every
// path), Timing::warmup untimed runs, the median of Timing::runs (3 and 30 unless the bench's
// --warmup and --runs say otherwise: fewer under a profiler, which then sees few launches a row).
// One Run holds a bench's state (its timing, the flush buffer, the failed checks, the HDF5 rows
// written) and is passed to whatever times or writes a row: nothing process-wide.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/bench/bench.hpp"
#include "kernels/check.hpp"

namespace fp8moe::h5 {
class Group;  // results/h5.hpp: only the bench sources that write rows include it
}

namespace fp8moe::kernels::bench {

struct Timing {
  int warmup = 3, runs = 30;
};

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

// The two tables whose rows go to HDF5 (groups /quant and /gemm).
enum class Table { quant, gemm };

// One run of the bench (run_kernel_bench): constructed once a CUDA device is known to be there.
class Run {
 public:
  // quant_rows, gemm_rows: the HDF5 groups the tables' rows go to (null: tables only, no --h5).
  Run(Timing t, h5::Group* quant_rows, h5::Group* gemm_rows) : timing_(t), rows_{quant_rows, gemm_rows} {}

  const Timing& timing() const { return timing_; }

  // The median of timing().runs timed calls of fn, after timing().warmup untimed ones, each timed
  // call after an L2 flush (outside the timed interval).
  double median_ms(const std::function<void()>& fn) {
    const Event a, b;
    for (int i = 0; i < timing_.warmup; ++i) fn();
    std::vector<float> ms(static_cast<std::size_t>(timing_.runs));
    for (float& m : ms) {
      flush_();
      FP8MOE_CUDA_CHECK(cudaEventRecord(a.get()));
      fn();
      FP8MOE_CUDA_CHECK(cudaEventRecord(b.get()));
      FP8MOE_CUDA_CHECK(cudaEventSynchronize(b.get()));
      FP8MOE_CUDA_CHECK(cudaEventElapsedTime(&m, a.get(), b.get()));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  // A row's check: `wrong` elements differ from it (any > 0 fails the run after the tables).
  void count_check(std::int64_t wrong) { failed_ += wrong != 0; }
  int failed_checks() const { return failed_; }

  // The group table t's rows go to, or null (no --h5); next_row_name:
  // "row000", "row001", ... in the order that table's rows are written.
  h5::Group* rows(Table t) const { return rows_[static_cast<int>(t)]; }
  std::string next_row_name(Table t) {
    char name[32];
    std::snprintf(name, sizeof name, "row%03d", written_[static_cast<int>(t)]++);
    return name;
  }

 private:
  Timing timing_;
  L2Flush flush_;  // one buffer for the whole run
  int failed_ = 0;
  h5::Group* rows_[2];
  int written_[2] = {0, 0};
};

// The GEMM table (bench_gemm.cu): every GPU backend's fwd, dgrad and wgrad at `shapes` (empty:
// default_bench_shapes(), then the CUDA-core rows at (4, 1024, 1024, 1024)); rows also go to
// run.rows(Table::gemm) (one subgroup per row, attributes as columns) when there is one. cutlass_tune: also every CUTLASS configuration whose row name contains
// `only` (empty: all).
void bench_gemms(Run& run, bool cutlass_tune, const std::string& only, const std::vector<BenchShape>& shapes);

}  // namespace fp8moe::kernels::bench
