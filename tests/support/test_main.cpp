// doctest main for every suite: picks one base seed per run (fresh unless FP8MOE_TEST_SEED is
// set), prints it, and lets tests derive their data seeds from it so a failure can be replayed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "support/listener.hpp"
#include "support/test_support.hpp"

namespace fp8moe::test {

std::uint64_t base_seed() {
  static const std::uint64_t seed = [] {
    if (const char* s = std::getenv("FP8MOE_TEST_SEED")) return static_cast<std::uint64_t>(std::strtoull(s, nullptr, 0));
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

}  // namespace fp8moe::test

namespace {

// Counts the test cases a run's filters selected. CTest runs each case as `SUITE -tc=NAME`; a name
// that does not select its case (CMake splits a discovered name at ';') would run nothing and
// pass: main turns a filtered run that selected no case into a failure.
struct SelectedCount : fp8moe::test::Listener {
  static inline unsigned selected = 0;
  explicit SelectedCount(const doctest::ContextOptions&) {}
  void test_run_end(const doctest::TestRunStats& s) override { selected = s.numTestCasesPassingFilters; }
};
REGISTER_LISTENER("fp8moe_selected_count", 1, SelectedCount);

bool has_case_filter(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    for (const char* f : {"-tc=", "--test-case=", "-dt-tc=", "--dt-test-case="}) {
      if (a.rfind(f, 0) == 0) return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  const bool listing = ctx.shouldExit();
  const int rc = ctx.run();
  if (!listing && rc == 0 && has_case_filter(argc, argv) && SelectedCount::selected == 0) {
    std::fprintf(stderr, "no test case matched the --test-case filter: nothing ran (a test name with ';' is split by "
                         "CTest's discovery: use another separator)\n");
    return 1;
  }
  if (!listing && rc != 0) {
    std::fprintf(stderr, "base seed %llu: rerun with FP8MOE_TEST_SEED=%llu to repeat this data\n",
                 static_cast<unsigned long long>(fp8moe::test::base_seed()),
                 static_cast<unsigned long long>(fp8moe::test::base_seed()));
  }
  return rc;
}
