// Built without CUDA: the GPU fake mesh is not part of this binary.
#include "reference/error.hpp"
#include "sim/comm/runtime_impl.hpp"

namespace fp8moe::sim::detail {

std::unique_ptr<Communicator> make_fake_gpu_communicator(const Mesh& mesh) {
  fail("--runtime fake-gpu (mesh ", mesh.str(), "): this fp8moe was built without CUDA; build where the CUDA toolkit ",
       "is installed (scripts/build.sh finds it at /usr/local/cuda) or use --runtime fake");
}

}  // namespace fp8moe::sim::detail
