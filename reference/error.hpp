#pragma once
// One exception type for bad input and broken preconditions. Messages name the value and the fix;
// the CLI prints them on one line and exits 2.
#include <sstream>
#include <stdexcept>
#include <string>

namespace fp8moe {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(cat(args...));
}

}  // namespace fp8moe
