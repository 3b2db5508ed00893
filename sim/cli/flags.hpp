#pragma once
// Integer flags read in 64 bits and range-checked before they narrow (issue 16 defect 3):
// `--experts 4294967298` must be refused naming the value and the limit, not run as 2, and
// `--seed -1` must not wrap to 2^64-1.
#include <cstdint>

#include "sim/cli/command.hpp"

namespace fp8moe::cli {

// The int64 option `name` (declared po::value<std::int64_t>), checked against [lo, hi].
std::int64_t int_flag(const po::variables_map& vm, const char* name, std::int64_t lo, std::int64_t hi);

// A seed option declared po::value<std::string>: a decimal integer in [0, 2^64 - 1].
std::uint64_t seed_flag(const po::variables_map& vm, const char* name = "seed");

}  // namespace fp8moe::cli
