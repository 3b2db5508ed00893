// fp8moe: blockwise-FP8 MoE numerics simulator. Subcommand dispatch and the one error exit.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <iostream>

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
    std::cout << usage << "\n\n" << desc << "\n";
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
  if (n < 0) fail("--threads must be >= 0 (0 uses every core), got ", n);
  if (n > 0) omp_set_num_threads(n);
}

namespace {

struct Command {
  const char* name;
  int (*run)(const Args&);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"sweep", cmd_sweep, "run every case of scenario files: a table on stdout, results in HDF5 (the main job)"},
    {"list", cmd_list, "show the cases scenario files expand to, and why rejected ones cannot run"},
    {"report", cmd_report, "print a sweep file's results as a table, CSV or Markdown, optionally grouped"},
    {"compare", cmd_compare, "per-case dB and bitwise changes between two sweep files"},
    {"gate", cmd_gate, "check a sweep file against floors, bitwise identities and a baseline (CI)"},
    {"merge", cmd_merge, "join the result files of a sharded sweep (--shard I/N) into one"},
    {"gemm", cmd_gemm, "run the fwd/dgrad/wgrad grouped passes in every arithmetic mode and print metrics"},
    {"run", cmd_run, "run one placement scenario on a fake mesh (op or layer level) and print its diagnostics"},
    {"quantize", cmd_quantize, "quantize a tensor from an HDF5 file with a blockwise recipe"},
    {"bench", cmd_bench, "GPU kernels: quantizer GB/s next to a copy, GEMM TFLOP/s next to per-tensor cuBLASLt"},
    {"bench-cpu", cmd_bench_cpu, "GFLOP/s of the exact and promote-fp32 CPU modes next to Eigen fp32"},
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
      std::fprintf(stderr, "fp8moe %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const fp8moe::Error& e) {
      std::fprintf(stderr, "fp8moe %s: error: %s\n", c.name, e.what());
      return 2;
    } catch (const boost::program_options::error& e) {
      std::fprintf(stderr, "fp8moe %s: error: %s (see fp8moe %s --help)\n", c.name, e.what(), c.name);
      return 2;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "fp8moe %s: error: out of memory: use smaller shapes\n", c.name);
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fp8moe %s: internal error: %s\n", c.name, e.what());
      return 3;
    }
  }
  std::fprintf(stderr, "fp8moe: error: unknown command '%s'\n", name.c_str());
  usage(stderr);
  return 2;
}
