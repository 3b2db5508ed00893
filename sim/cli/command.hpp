#pragma once
// The `fp8moe` command line: one function per subcommand, each parsing its own options with
// Boost.Program_options. Commands throw fp8moe::Error (or a program_options error) on bad input;
// main() prints it on one line and exits 2.
#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8moe::cli {

namespace po = boost::program_options;

using Args = std::vector<std::string>;  // the arguments after the subcommand name

int cmd_quantize(const Args& args);
int cmd_gemm(const Args& args);
int cmd_bench_cpu(const Args& args);
int cmd_bench(const Args& args);
int cmd_info(const Args& args);
int cmd_run(const Args& args);
int cmd_check(const Args& args);
int cmd_sweep(const Args& args);
int cmd_list(const Args& args);
int cmd_report(const Args& args);
int cmd_compare(const Args& args);
int cmd_gate(const Args& args);
int cmd_merge(const Args& args);
int cmd_rules(const Args& args);

// Parse `args` against `desc` (positional options optional); prints help and returns false when
// --help was given.
bool parse(const Args& args, const po::options_description& desc, po::variables_map& vm, const char* usage,
           const po::positional_options_description* pos = nullptr);

// --pad on|off|auto for these offsets: auto turns padding on when a token group is not a
// multiple of the block (wgrad quantizes whole token blocks per expert).
bool resolve_padding(const std::string& mode, const std::vector<std::int32_t>& offs, int block);

// Apply --threads (0 = all cores) to OpenMP.
void set_threads(int n);

}  // namespace fp8moe::cli
