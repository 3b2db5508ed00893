// Linked into every GPU suite: a doctest listener that, when a test case starts and no CUDA device
// is present, says so and exits 77, which CTest shows as Skipped (SKIP_RETURN_CODE 77). Listing the
// test cases (doctest_discover_tests at build time) starts no test case, so it never probes CUDA.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/check.hpp"

namespace {

struct GpuGate : doctest::IReporter {
  explicit GpuGate(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    static const int devices = fp8moe::kernels::cuda_device_count();
    if (devices == 0) {
      std::printf("SKIPPED (exit 77): no CUDA device is visible, so the GPU test case '%s' cannot run\n", tc.m_name);
      std::fflush(stdout);
      std::exit(77);
    }
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("fp8moe-gpu-gate", 1, GpuGate);
