#pragma once
// Internal to sim/comm: the constructors behind make_mesh_runtime, one per implementation file.
// Each kind's file is compiled when its library is part of the build; otherwise its *_none.cpp
// twin throws an Error saying how to build it in.
#include <memory>

#include "sim/comm/runtime.hpp"

namespace fp8moe::sim::detail {

// cuda_fake_communicator.cpp / cuda_fake_communicator_none.cpp
std::unique_ptr<Communicator> make_fake_gpu_communicator(const Mesh& mesh);
// mpi_runtime.cpp (linked into fp8moe-mpi only), or mpi_reexec.cpp's weak one: re-exec as fp8moe-mpi
std::unique_ptr<MeshRuntime> make_mpi_runtime(const RuntimeOptions& opt);
// nccl_runtime.cpp / nccl_runtime_none.cpp
std::unique_ptr<MeshRuntime> make_nccl_runtime(const RuntimeOptions& opt);

}  // namespace fp8moe::sim::detail
