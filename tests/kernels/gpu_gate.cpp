// Linked into every GPU suite: a doctest listener that, when a test case starts and no CUDA device
// is present, says so and exits 77, which CTest shows as Skipped (SKIP_RETURN_CODE 77). Listing the
// test cases (doctest_discover_tests at build time) starts no test case, so it never probes CUDA.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/check.hpp"
#include "support/listener.hpp"

namespace {

struct GpuGate : fp8moe::test::Listener {
  explicit GpuGate(const doctest::ContextOptions&) {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    static const int devices = fp8moe::kernels::cuda_device_count();
    if (devices == 0) {
      std::printf("SKIPPED (exit 77): no CUDA device is visible, so the GPU test case '%s' cannot run\n", tc.m_name);
      std::fflush(stdout);
      std::exit(77);
    }
  }
};

}  // namespace

DOCTEST_REGISTER_LISTENER("fp8moe-gpu-gate", 1, GpuGate);
