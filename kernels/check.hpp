#pragma once
// Checked CUDA calls and an RAII device buffer (host code; reference/SPEC.md 1.4 "errors that say where and
// why"). Every CUDA runtime call goes through FP8MOE_CUDA_CHECK, which throws fp8moe::Error with the
// call's text, the error's name and string, file:line, and a context string the caller gives
// (shapes, sizes): FP8MOE_CUDA_CHECK(cudaMemcpy(...), "M=", M, " K=", K).
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "reference/error.hpp"

namespace fp8moe::kernels {

template <class... Ctx>
[[noreturn]] void cuda_fail(cudaError_t err, const char* call, const char* file, int line, const Ctx&... ctx) {
  fail("CUDA error at ", file, ":", line, ": ", call, " returned ", cudaGetErrorName(err), " (",
       cudaGetErrorString(err), ")", (sizeof...(ctx) ? " [" : ""), ctx..., (sizeof...(ctx) ? "]" : ""));
}

}  // namespace fp8moe::kernels

// FP8MOE_CUDA_CHECK(call, context...): throw fp8moe::Error naming the call, the error and the context.
#define FP8MOE_CUDA_CHECK(call, ...)                                                                 \
  do {                                                                                               \
    const cudaError_t fp8moe_err_ = (call);                                                          \
    if (fp8moe_err_ != cudaSuccess) {                                                                \
      ::fp8moe::kernels::cuda_fail(fp8moe_err_, #call, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                                                \
  } while (0)

// After a <<<...>>> launch: a bad configuration shows in cudaGetLastError. Asynchronous faults
// show at the next synchronizing call, which is itself checked.
#define FP8MOE_CUDA_CHECK_LAUNCH(kernel_name, ...)                                                   \
  do {                                                                                               \
    const cudaError_t fp8moe_err_ = cudaGetLastError();                                              \
    if (fp8moe_err_ != cudaSuccess) {                                                                \
      ::fp8moe::kernels::cuda_fail(fp8moe_err_, "launch of " kernel_name, __FILE__,                  \
                                   __LINE__ __VA_OPT__(, ) __VA_ARGS__);                             \
    }                                                                                                \
  } while (0)

namespace fp8moe::kernels {

// A device array of n T's: cudaMalloc on construction, cudaFree on destruction; move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n_ > 0) FP8MOE_CUDA_CHECK(cudaMalloc(&p_, n_ * sizeof(T)), "allocating ", n_, " x ", sizeof(T), " bytes");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* get() { return p_; }
  const T* get() const { return p_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    if (host.size() != n_) fail("DeviceBuffer::upload: host has ", host.size(), " elements, device ", n_);
    if (n_ > 0) FP8MOE_CUDA_CHECK(cudaMemcpy(p_, host.data(), bytes(), cudaMemcpyHostToDevice), n_, " elements");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) FP8MOE_CUDA_CHECK(cudaMemcpy(host.data(), p_, bytes(), cudaMemcpyDeviceToHost), n_, " elements");
    return host;
  }
  void zero() {
    if (n_ > 0) FP8MOE_CUDA_CHECK(cudaMemset(p_, 0, bytes()), n_, " elements");
  }
  // Every byte 0xFF: a NaN in bf16, fp32 and fp64. An output buffer filled with it before a kernel
  // or library call shows every element the call did not write as NaN, which no bitwise or SQNR
  // check passes (a fresh cudaMalloc may instead hold a previous run's equal values).
  void fill_sentinel() {
    if (n_ > 0) FP8MOE_CUDA_CHECK(cudaMemset(p_, 0xFF, bytes()), n_, " elements");
  }

 private:
  void release() noexcept {
    if (p_) cudaFree(p_);  // never throws from a destructor; a failed free is reported by the next call
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// Number of CUDA devices; 0 when the runtime finds none or no driver is loaded (no throw).
inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

// Reject a case before it runs when its device buffers cannot fit: `bytes` is the caller's
// estimate of what it will allocate, `what` names the case (shapes). Throws with both numbers.
inline void require_device_memory(std::size_t bytes, const std::string& what) {
  std::size_t free_b = 0, total_b = 0;
  FP8MOE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), what);
  if (bytes > free_b) {
    fail(what, " needs an estimated ", static_cast<double>(bytes) / (1ull << 30), " GiB of device memory but only ",
         static_cast<double>(free_b) / (1ull << 30), " GiB of ", static_cast<double>(total_b) / (1ull << 30),
         " GiB are free: use smaller shapes or fewer experts");
  }
}

}  // namespace fp8moe::kernels
