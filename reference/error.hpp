#pragma once
// One exception type for bad input and broken preconditions. Messages name the value and the fix;
// the CLI prints them on one line and exits 2. IoError is the environment failing a write that
// was right to try (a full disk, an I/O error): the CLI prints it the same way and exits 1.
#include <sstream>
#include <stdexcept>
#include <string>

namespace fp8moe {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct IoError : Error {
  using Error::Error;
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

template <class... Args>
[[noreturn]] void fail_io(const Args&... args) {
  throw IoError(cat(args...));
}

}  // namespace fp8moe
