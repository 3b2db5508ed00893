#include "sim/cli/flags.hpp"

#include <charconv>
#include <string>

#include "reference/error.hpp"

namespace fp8moe::cli {

std::int64_t int_flag(const po::variables_map& vm, const char* name, std::int64_t lo, std::int64_t hi) {
  const std::int64_t v = vm[name].as<std::int64_t>();
  if (v < lo) fail("--", name, " ", v, " is below the minimum ", lo);
  if (v > hi) fail("--", name, " ", v, " exceeds the limit ", hi, ": use at most ", hi);
  return v;
}

std::uint64_t seed_flag(const po::variables_map& vm, const char* name) {
  const std::string s = vm[name].as<std::string>();
  std::uint64_t v = 0;
  // from_chars takes no sign: "-1" is refused instead of wrapping as Boost's lexical_cast does.
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) fail("--", name, " ", s, " exceeds the limit 18446744073709551615 (2^64 - 1)");
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
    fail("--", name, " '", s, "' is not a non-negative integer: give e.g. --", name, " 0");
  }
  return v;
}

}  // namespace fp8moe::cli
