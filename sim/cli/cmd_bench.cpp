// `fp8moe bench`: the GPU kernel benchmark (kernels/bench/bench.hpp): quantizer GB/s next to a
// device-to-device copy, fwd/dgrad/wgrad TFLOP/s per GPU backend next to cuBLASLt's per-tensor FP8
// loop, each baseline timed in the same run. A benchmark, never a test. Exits 77 when no CUDA
// device is visible (nothing measured, no file written).
#include <optional>
#include <string>
#include <vector>

#include "kernels/bench/bench.hpp"
#include "results/output_file.hpp"
#include "sim/cli/command.hpp"

namespace fp8moe::cli {

int cmd_bench(const Args& args) {
  po::options_description desc("fp8moe bench options");
  desc.add_options()("help,h", "show this help")
      ("h5", po::value<std::string>(), "also write every row to this HDF5 file (/quant, /gemm)")
      ("force", po::bool_switch(), "overwrite an existing --h5 file")
      ("no-quant", po::bool_switch(), "skip the quantizer table")
      ("no-gemm", po::bool_switch(), "skip the GEMM table")
      ("cutlass-tune", po::bool_switch(), "also time every CUTLASS kernel configuration on every shape (each checked bitwise first)")
      ("cutlass-only", po::value<std::string>(),
       "--cutlass-tune with only the configurations whose row name contains this (e.g. co/ov: cooperative, fp8moe's fold)")
      ("shape", po::value<std::vector<std::string>>(),
       "time the GEMMs at E,Me,N,K (experts, rows per expert, N, K; Me, N, K multiples of 128) instead of the five "
       "production shapes; repeat for more")
      ("warmup", po::value<int>()->default_value(3), "untimed calls of each row before it is timed")
      ("runs", po::value<int>()->default_value(30),
       "timed calls of each row (its median reported); under a profiler --warmup 0 --runs 1");
  po::variables_map vm;
  if (!parse(args, desc, vm,
             "usage: fp8moe bench [--h5 FILE [--force]] [--no-quant] [--no-gemm] [--cutlass-tune] [--cutlass-only SUBSTRING]\n"
             "                   [--shape E,Me,N,K ...] [--warmup N] [--runs N]")) {
    return 0;
  }
  kernels::KernelBenchOptions opt;
  opt.quant = !vm["no-quant"].as<bool>();
  opt.gemm = !vm["no-gemm"].as<bool>();
  opt.cutlass_tune = vm["cutlass-tune"].as<bool>() || vm.count("cutlass-only");
  if (vm.count("cutlass-only")) opt.cutlass_only = vm["cutlass-only"].as<std::string>();
  opt.warmup = vm["warmup"].as<int>();
  opt.runs = vm["runs"].as<int>();
  if (vm.count("shape")) {
    for (const std::string& t : vm["shape"].as<std::vector<std::string>>()) opt.shapes.push_back(kernels::parse_bench_shape(t));
  }
  if (vm.count("h5")) opt.h5_path = vm["h5"].as<std::string>();
  std::optional<results::OutputFile> out;  // checked and locked before anything runs
  kernels::prepare_bench(opt, vm["force"].as<bool>(), out);
  opt.command = "fp8moe bench";
  for (const std::string& a : args) opt.command += " " + a;
  return kernels::run_kernel_bench(opt);
}

}  // namespace fp8moe::cli
