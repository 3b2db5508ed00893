#pragma once
// Helpers shared by the test suites: seeds, random tensors, bit comparisons.
#include <cstdint>
#include <functional>
#include <string>

#include "reference/datagen.hpp"
#include "reference/error.hpp"
#include "reference/tensor.hpp"

namespace fp8moe::test {

// The run's base seed (printed when a suite fails; FP8MOE_TEST_SEED replays it).
std::uint64_t base_seed();

// A seed for one test case: the base seed mixed with a per-test salt.
inline std::uint64_t seed_for(std::uint64_t salt) {
  std::uint64_t z = base_seed() + 0x9E3779B97F4A7C15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Random bf16-valued tensor (never all zeros).
inline TensorF random_tensor(std::vector<std::int64_t> shape, std::uint64_t seed, std::uint32_t id,
                             Dist dist = Dist::normal) {
  return generate(shape, dist, seed, id);
}

// The message of the fp8moe::Error `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fp8moe::test
