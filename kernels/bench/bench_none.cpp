// run_kernel_bench in a build without CUDA: says how to get one.
#include "kernels/bench/bench.hpp"
#include "reference/error.hpp"

namespace fp8moe::kernels {

void check_cutlass_tune(bool, const std::string&) {}  // run_kernel_bench below refuses first

int run_kernel_bench(const KernelBenchOptions&) {
  fail("this fp8moe was built without CUDA, so it has no GPU kernels to bench: build on a machine with the CUDA "
       "Toolkit (scripts/build.sh finds it) and run there, or pack it for a GPU machine (scripts/pack_gpu.sh)");
}

}  // namespace fp8moe::kernels
