#pragma once
// The NCCL communicator (--runtime nccl): one GPU per rank. A RankCommunicator over NcclTransport:
// the size agreement is an ncclAllGather of int64 headers on the mesh's communicator; the data
// moves on one communicator per mesh dim (ncclCommSplit, colour = the rank's group of that dim)
// with grouped ncclSend/ncclRecv (uneven all_gather and all_to_all) and ncclBroadcast; the
// reductions are rank_communicator.cpp's (contributions to the chunk's owner, reduce_chunk on
// the host in the fake's order), bitwise the fake's.
//
// Buffers: the sim computes on the host, so spans are host memory today; they are staged through
// two device buffers per rank that only grow (no cudaMalloc per call). A span that already lies
// in this rank's device memory (cudaPointerGetAttributes) is used directly.
//
// Errors and stalls: the communicators are non-blocking (ncclConfig_t blocking = 0); every wait
// polls ncclCommGetAsyncError and the stream against RuntimeOptions::timeout_s (and, with one
// thread per GPU, a flag raised when another rank failed), then aborts every communicator of the
// rank (ncclCommAbort) and throws naming the rank and the collective. Every CUDA and NCCL call is
// checked: the message names the call, the error's name, the rank and the sizes.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "reference/error.hpp"
#include "sim/comm/rank_communicator.hpp"

namespace fp8moe::sim::nccl {

// The error of a rank that stopped because another rank failed first (one thread per GPU): the
// runtime reports the first rank's own error rather than these.
struct PeerAborted : Error {
  using Error::Error;
};

const char* result_name(ncclResult_t r);
// Throw fp8moe::Error naming the call, the result and `ctx` (r may be ncclInProgress: not an error).
void check(ncclResult_t r, const char* call, int rank, const std::string& ctx, ncclComm_t comm = nullptr);
void check_cuda(cudaError_t e, const char* call, int rank, const std::string& ctx);

// The NVLink multicast switches of the device README (a program using multicast can put a
// host's shared GPUs out of service): NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1,
// TORCH_SYMM_MEM_DISABLE_MULTICAST=1, each set unless the user set it. Before the first NCCL call.
void set_multicast_env();

std::string nccl_version();                  // "2.28.3"
std::string device_description(int device);  // "NVIDIA H200 (0000:19:00.0)"

// What one rank holds on its GPU, kept by the runtime across the cases of one mesh world size.
struct RankContext {
  int rank = 0, world = 0, device = 0;
  double timeout_s = 600;
  const std::atomic<bool>* abort = nullptr;  // one thread per GPU: raised when another rank failed
  ncclComm_t comm = nullptr;                 // the mesh: ranks 0 .. world-1
  std::map<std::string, ncclComm_t> dims;    // "mesh/dim": this rank's group of that mesh dim
  std::map<Group, ncclComm_t> groups;        // other groups (members only; split over the mesh)
  cudaStream_t stream = nullptr;
  void* send_stage = nullptr;  // device staging, grown on demand
  std::size_t send_cap = 0;
  void* recv_stage = nullptr;
  std::size_t recv_cap = 0;
  bool broken = false;  // its communicators were aborted: the runtime makes a new context

  RankContext() = default;
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;
  ~RankContext();

  // cudaSetDevice, the stream, and the mesh communicator from `id` (collective over the world).
  void init(const ncclUniqueId& id);
  // Until the communicators' pending calls are done (and the stream is idle, when `stream`).
  void wait(const std::string& what, ncclComm_t a, ncclComm_t b, bool on_stream);
  // ncclCommAbort on every communicator, then throws `msg` (PeerAborted when `peer`).
  [[noreturn]] void abort_and_throw(const std::string& msg, bool peer);
  void abort_all();
  // Finalizes and destroys the communicators (aborting those that do not finish in time).
  void destroy();
  void ensure_stage(std::size_t send_bytes, std::size_t recv_bytes);
};

// Finalizes and destroys several ranks' communicators together (one thread may hold all of a
// world's ranks, whose finalizes wait for each other).
void destroy_all(const std::vector<RankContext*>& ranks);

std::unique_ptr<Communicator> make_nccl_communicator(const Mesh& mesh, RankContext& ctx);

}  // namespace fp8moe::sim::nccl
