// doctest main for every suite: picks one base seed per run (fresh unless FP8MOE_TEST_SEED is
// set), prints it, and lets tests derive their data seeds from it so a failure can be replayed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

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

int main(int argc, char** argv) {
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  const bool listing = ctx.shouldExit();
  const int rc = ctx.run();
  if (!listing && rc != 0) {
    std::fprintf(stderr, "base seed %llu: rerun with FP8MOE_TEST_SEED=%llu to repeat this data\n",
                 static_cast<unsigned long long>(fp8moe::test::base_seed()),
                 static_cast<unsigned long long>(fp8moe::test::base_seed()));
  }
  return rc;
}
