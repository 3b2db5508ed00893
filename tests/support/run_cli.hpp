#pragma once
// Runs the built `fp8moe` binary (FP8MOE_BIN, set by the suite's CMake) as a subprocess and
// captures its exit code and output, for the CLI suites.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef FP8MOE_BIN
#error "FP8MOE_BIN must name the fp8moe binary (see tests/sim/CMakeLists.txt)"
#endif

namespace fp8moe::test {

struct Run {
  int rc = -1;
  std::string output;  // stdout and stderr together
  int lines() const { return static_cast<int>(std::count(output.begin(), output.end(), '\n')); }
};

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

// The binary under test: FP8MOE_BIN, or the environment's FP8MOE_TEST_BIN (to run a suite against
// another build, e.g. to see a new test fail on the code before a fix).
inline std::string bin_path() {
  const char* env = std::getenv("FP8MOE_TEST_BIN");
  return env && *env ? env : FP8MOE_BIN;
}

// The program at `path` with ARGS (a shell command line's words), stderr merged into the captured
// output unless `stderr_too` is false.
inline Run run_program(const std::string& path, const std::string& args, bool stderr_too = true) {
  const std::string cmd = quote(path) + " " + args + (stderr_too ? " 2>&1" : " 2>/dev/null");
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `fp8moe COMMAND ARGS`, stderr merged into the captured output unless `stderr_too` is false.
inline Run run_cli(const std::string& command, const std::string& args, bool stderr_too = true) {
  return run_program(bin_path(), command + " " + args, stderr_too);
}

// The same under coreutils' `timeout` (SIGKILL after `seconds`, exit 137): a command that used to
// hang fails its test instead of outliving it, and `seconds` is the measured wall time.
struct TimedRun : Run {
  double seconds = 0;
};
inline TimedRun run_cli_within(int limit_s, const std::string& command, const std::string& args) {
  const std::string cmd = "timeout -s KILL " + std::to_string(limit_s) + " " + quote(FP8MOE_BIN) + " " + command + " " +
                          args + " 2>&1";
  TimedRun r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace fp8moe::test
