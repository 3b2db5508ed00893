// Built without CUDA or NCCL: the NCCL mesh runtime is not part of this binary.
#include "reference/error.hpp"
#include "sim/comm/runtime_impl.hpp"

namespace fp8moe::sim::detail {

std::unique_ptr<MeshRuntime> make_nccl_runtime(const RuntimeOptions&) {
  fail("--runtime nccl: this fp8moe was built without CUDA and NCCL; build where the CUDA toolkit with NCCL is ",
       "installed, or use --runtime fake / --runtime mpi");
}

}  // namespace fp8moe::sim::detail
