#pragma once
// Scratch files of the CLI suites (tests/sim/test_cli_*): one folder per process in the build
// tree (FP8MOE_TEST_WORK, set by the suite's CMake; CTest runs the cases in parallel).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#ifndef FP8MOE_TEST_WORK
#error "FP8MOE_TEST_WORK must name the suite's scratch folder (see tests/sim/CMakeLists.txt)"
#endif

namespace fp8moe::test {

inline const std::string& work_dir() {
  static const std::string d = std::string(FP8MOE_TEST_WORK) + "/p" + std::to_string(::getpid());
  std::filesystem::create_directories(d);
  return d;
}

// work_dir()/name, with whatever an earlier case left there removed.
inline std::string scratch(const std::string& name) {
  const std::string p = work_dir() + "/" + name;
  std::error_code ec;
  std::filesystem::remove_all(p, ec);
  return p;
}

// A fresh scratch file holding `bytes`.
inline std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string p = scratch(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// Whether a run's captured output (Run, TimedRun) contains `s`.
template <class R>
bool has(const R& r, const std::string& s) {
  return r.output.find(s) != std::string::npos;
}

}  // namespace fp8moe::test
