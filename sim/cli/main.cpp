// fp8moe: blockwise-FP8 MoE numerics simulator. Subcommand dispatch and the one error exit.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <sstream>
#include <set>
#include <string>

#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "sim/cli/command.hpp"
#include "sim/comm/runtime.hpp"

namespace fp8moe::cli {

bool parse(const Args& args, const po::options_description& desc, po::variables_map& vm, const char* usage,
           const po::positional_options_description* pos) {
  po::command_line_parser parser(args);
  parser.options(desc);
  if (pos) parser.positional(*pos);
  po::store(parser.run(), vm);
  if (vm.count("help")) {
    // The positional plumbing (--file, --files) is the usage line's FILE: not listed as an option.
    std::set<std::string> hidden;
    if (pos) {
      for (unsigned i = 0; i < std::min(pos->max_total_count(), 16u); ++i) hidden.insert("--" + pos->name_for_position(i) + " ");
    }
    std::ostringstream text;
    text << desc;
    std::istringstream lines(text.str());
    std::string out, line;
    bool skipping = false;
    while (std::getline(lines, line)) {
      const bool option_line = line.rfind("  -", 0) == 0;
      if (option_line) {
        skipping = false;
        for (const std::string& h : hidden) skipping = skipping || line.rfind("  " + h, 0) == 0;
      }
      if (!skipping) out += line + "\n";
    }
    std::cout << usage << "\n\n" << out << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

bool resolve_padding(const std::string& mode, const std::vector<std::int32_t>& offs, int block) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  if (mode != "auto") fail("--pad '", mode, "': use on, off or auto");
  return groups_need_padding(offs, block);
}

void set_threads(int n) {
  // libgomp segfaults when it cannot create the threads asked for (--threads 100000, issue 16).
  constexpr int kMaxThreads = 4096;
  if (n < 0 || n > kMaxThreads) {
    fail("--threads ", n, ": give 1 to ", kMaxThreads, ", or 0 for every core (this machine has ", omp_get_num_procs(), ")");
  }
  if (n > 0) omp_set_num_threads(n);
}

namespace {

// An error as one readable line: control characters as spaces, a word longer than 160 bytes (a
// value from a 10 MB line of a scenario file) quoted by its first 80 bytes, and a message still
// too long cut in its middle, keeping the file:line at the start and the fix at the end.
std::string one_line(const char* what) {
  const std::string in = what;
  std::string m;
  constexpr std::size_t kLongWord = 160, kShown = 80;
  for (std::size_t i = 0; i < in.size();) {
    std::size_t j = i;
    while (j < in.size() && in[j] != ' ' && in[j] != '\'' && in[j] != '"') ++j;
    if (j == i) {
      m += in[i++];
      continue;
    }
    m += j - i > kLongWord ? in.substr(i, kShown) + "...(" + std::to_string(j - i) + " bytes)" : in.substr(i, j - i);
    i = j;
  }
  for (char& c : m) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  constexpr std::size_t kHead = 1000, kTail = 400;
  if (m.size() > kHead + kTail + 100) {
    m = m.substr(0, kHead) + " ... (" + std::to_string(m.size() - kHead - kTail) + " bytes left out) ... " +
        m.substr(m.size() - kTail);
  }
  return m;
}

struct Command {
  const char* name;
  int (*run)(const Args&);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"sweep", cmd_sweep, "run every case of scenario files: a table on stdout, results in HDF5 (the main job)"},
    {"list", cmd_list, "show the cases scenario files expand to, and why rejected ones cannot run"},
    {"report", cmd_report, "print a sweep file's results as a table, Markdown, CSV or JSON, optionally grouped"},
    {"compare", cmd_compare, "per-case dB and bitwise changes between two sweep files"},
    {"gate", cmd_gate, "check a sweep file against floors, bitwise identities and a baseline (CI)"},
    {"merge", cmd_merge, "join the result files of a sharded sweep (--shard I/N) into one"},
    {"gemm", cmd_gemm, "run the fwd/dgrad/wgrad grouped passes in every arithmetic mode and print metrics"},
    {"run", cmd_run, "run one placement scenario on a fake mesh (op or layer level) and print its diagnostics"},
    {"check", cmd_check, "which arithmetic and placement your kernel's or framework's outputs match, bit for bit"},
    {"rules", cmd_rules, "verify a framework's DTensor sharding-rule table by executing every strategy it would pick"},
    {"quantize", cmd_quantize, "quantize a tensor from an HDF5 file with a blockwise recipe"},
    {"bench", cmd_bench, "GPU kernels: quantizer GB/s next to a copy, GEMM TFLOP/s next to per-tensor cuBLASLt"},
    {"bench-cpu", cmd_bench_cpu, "GFLOP/s of the exact, promote-fp32 and hopper-tc CPU modes next to Eigen fp32"},
    {"info", cmd_info, "versions, build flags and devices"},
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: fp8moe COMMAND [OPTIONS]   (fp8moe COMMAND --help for its options)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace
}  // namespace fp8moe::cli

int main(int argc, char** argv) {
  using namespace fp8moe::cli;
  fp8moe::sim::remember_argv(argc, argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("fp8moe %s\n", FP8MOE_VERSION);
    return 0;
  }
  const Args args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const fp8moe::IoError& e) {
      // The environment failed a write (a full disk): not the user's input, so not exit 2.
      std::fprintf(stderr, "fp8moe %s: error: %s\n", c.name, one_line(e.what()).c_str());
      return 1;
    } catch (const fp8moe::Error& e) {
      std::fprintf(stderr, "fp8moe %s: error: %s\n", c.name, one_line(e.what()).c_str());
      return 2;
    } catch (const boost::program_options::error& e) {
      std::fprintf(stderr, "fp8moe %s: error: %s (see fp8moe %s --help)\n", c.name, one_line(e.what()).c_str(), c.name);
      return 2;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "fp8moe %s: error: out of memory: use smaller shapes\n", c.name);
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fp8moe %s: internal error: %s\n", c.name, one_line(e.what()).c_str());
      return 3;
    }
  }
  std::fprintf(stderr, "fp8moe: error: unknown command '%s'\n", name.c_str());
  usage(stderr);
  return 2;
}
