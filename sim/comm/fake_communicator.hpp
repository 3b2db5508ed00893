#pragma once
// Every rank in one process, on the CPU: collectives are copies and the deterministic reductions
// of reduce_chunk(). Checks what a real library would only hang on: sizes that disagree.
#include "sim/comm/communicator.hpp"

namespace fp8moe::sim {

class FakeCommunicator final : public Communicator {
 public:
  explicit FakeCommunicator(Mesh mesh) : Communicator(std::move(mesh)) {}
  std::vector<int> local_ranks() const override;
  bool is_local(int) const override { return true; }
  std::string name() const override { return "fake-cpu"; }

  void all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) override;
  void all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                  const std::vector<std::vector<Bytes>>& recv) override;
  void broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) override;
  void reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                      std::span<const std::int64_t> counts, const ReduceOptions& opt) override;
  void all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) override;
};

}  // namespace fp8moe::sim
