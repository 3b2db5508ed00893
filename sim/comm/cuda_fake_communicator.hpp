#pragma once
// Every rank of a mesh on one GPU (`fp8moe sweep --runtime fake-gpu`, issue 5 item 4): each member's
// buffer of a collective has a device image, the collective runs on those images (device-to-device
// cudaMemcpyAsync on one stream, reductions in kernels/comm_reduce.cu in reduce_chunk()'s order),
// and the host images are written back. Bitwise FakeCommunicator's results (NaN-free data: see
// kernels/comm_reduce.hpp) and bitwise its CommStats; the same size checks with the same messages.
//
// Buffers: a span whose memory is on the device (cudaPointerGetAttributes: device or managed, on
// this communicator's device) is used in place; a host span is staged through an arena of device
// memory that grows to the largest collective seen so far (rounded up to 1 MiB) and is never
// reallocated for a call that fits. Host inputs are uploaded before the collective and host
// outputs downloaded after it, so in-place collectives (an output aliasing an input) are safe on
// host memory. Every call returns with its stream synchronized. The stream is a blocking one, so
// it is ordered after work the caller queued on the legacy default stream (the CUDA backends').
//
// The device is the current one when the communicator is made; each call makes it current for
// its duration and restores the caller's. Needs a CUDA device: the constructor throws otherwise.
// This header needs no CUDA headers (the CUDA state is behind Impl).
#include <cstddef>
#include <memory>

#include "sim/comm/communicator.hpp"

namespace fp8moe::sim {

class CudaFakeCommunicator final : public Communicator {
 public:
  explicit CudaFakeCommunicator(Mesh mesh);
  ~CudaFakeCommunicator() override;
  CudaFakeCommunicator(const CudaFakeCommunicator&) = delete;
  CudaFakeCommunicator& operator=(const CudaFakeCommunicator&) = delete;

  std::vector<int> local_ranks() const override;
  bool is_local(int) const override { return true; }
  std::string name() const override { return "fake-gpu"; }

  void all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) override;
  void all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                  const std::vector<std::vector<Bytes>>& recv) override;
  void broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) override;
  void reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                      std::span<const std::int64_t> counts, const ReduceOptions& opt) override;
  void all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) override;

  // Device bytes the staging arena holds now (its largest need so far, rounded up); the memory
  // estimate of a case (sim/backend/cuda_backend.hpp) bounds it.
  std::size_t arena_bytes() const;
  // How many times the arena was (re)allocated: it grows only for a collective larger than any before.
  int arena_allocations() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8moe::sim
