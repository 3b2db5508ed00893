// fp8moe-bench-kernels: the GPU kernel benchmark as its own binary (kernels/bench/bench.hpp; the same
// as `fp8moe bench`). Exits 77 when no CUDA device is visible.
//   fp8moe-bench-kernels [--h5 FILE [--force]] [--no-quant] [--no-gemm] [--cutlass-tune] [--cutlass-only SUBSTRING]
//                        [--shape E,Me,N,K ...] [--warmup N] [--runs N]
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <string>

#include "kernels/bench/bench.hpp"
#include "reference/datagen.hpp"
#include "results/output_file.hpp"

int main(int argc, char** argv) {
  fp8moe::kernels::KernelBenchOptions opt;
  bool force = false;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) opt.command += ' ';
    opt.command += argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--h5" && i + 1 < argc) {
      opt.h5_path = argv[++i];
    } else if (a == "--force") {
      force = true;  // overwrite an existing --h5 file (never anything but a regular file)
    } else if (a == "--no-quant") {
      opt.quant = false;
    } else if (a == "--no-gemm") {
      opt.gemm = false;
    } else if (a == "--cutlass-tune") {
      opt.cutlass_tune = true;
    } else if (a == "--cutlass-only" && i + 1 < argc) {
      opt.cutlass_tune = true;
      opt.cutlass_only = argv[++i];
    } else if (a == "--shape" && i + 1 < argc) {
      try {
        opt.shapes.push_back(fp8moe::kernels::parse_bench_shape(argv[++i]));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fp8moe-bench-kernels: %s\n", e.what());
        return 2;
      }
    } else if ((a == "--warmup" || a == "--runs") && i + 1 < argc) {
      // A whole number (check_bench_options checks its range), as `fp8moe bench` reads it.
      try {
        (a == "--warmup" ? opt.warmup : opt.runs) =
            static_cast<int>(fp8moe::parse_int(argv[++i], std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fp8moe-bench-kernels: %s %s: give a whole number (e.g. %s 1)\n", a.c_str(), e.what(), a.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: fp8moe-bench-kernels [--h5 FILE [--force]] [--no-quant] [--no-gemm] [--cutlass-tune] "
                           "[--cutlass-only SUBSTRING] [--shape E,Me,N,K ...] [--warmup N] [--runs N]\n");
      return 2;
    }
  }
  // What the user asked for is checked first (the counts' bounds, the --h5 file: exit 2, as
  // `fp8moe bench`); a failure while measuring exits 1.
  std::optional<fp8moe::results::OutputFile> out;
  try {
    fp8moe::kernels::prepare_bench(opt, force, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8moe-bench-kernels: %s\n", e.what());
    return 2;
  }
  try {
    return fp8moe::kernels::run_kernel_bench(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8moe-bench-kernels: %s\n", e.what());
    return 1;
  }
}
