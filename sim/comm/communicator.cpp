#include "sim/comm/communicator.hpp"

#include <algorithm>

#include "reference/error.hpp"
#include "reference/formats.hpp"

namespace fp8moe::sim {

const char* reduce_order_name(ReduceOrder o) { return o == ReduceOrder::ascending ? "ascending" : "ring"; }
const char* reduce_dtype_name(ReduceDtype d) { return d == ReduceDtype::fp32 ? "fp32" : "bf16"; }
ReduceOrder parse_reduce_order(const std::string& s) {
  if (s == "ascending") return ReduceOrder::ascending;
  if (s == "ring") return ReduceOrder::ring;
  fail("unknown reduction order '", s, "': use ascending or ring");
}
ReduceDtype parse_reduce_dtype(const std::string& s) {
  if (s == "fp32") return ReduceDtype::fp32;
  if (s == "bf16") return ReduceDtype::bf16;
  fail("unknown reduce dtype '", s, "': use fp32 or bf16");
}

std::int64_t CommStats::max_bytes() const {
  return bytes_sent.empty() ? 0 : *std::max_element(bytes_sent.begin(), bytes_sent.end());
}

Communicator::Communicator(Mesh mesh) : mesh_(std::move(mesh)) { reset_stats(); }

void Communicator::reset_stats() {
  stats_ = {};
  stats_.bytes_sent.assign(static_cast<std::size_t>(mesh_.world()), 0);
}

void check_comm_mesh(const Communicator& comm, const Mesh& mesh) {
  if (comm.mesh().str() != mesh.str()) {
    fail("communicator ", comm.name(), " runs mesh ", comm.mesh().str(), " but the case needs mesh ", mesh.str());
  }
}

void reduce_chunk(const float* const* in, int n, int owner, std::int64_t count, const ReduceOptions& opt, float* out) {
  const bool bf = opt.dtype == ReduceDtype::bf16;
  auto member = [&](int step) {  // the member added at `step`
    return opt.order == ReduceOrder::ascending ? step : (owner + 1 + step) % n;
  };
  for (std::int64_t k = 0; k < count; ++k) {
    float acc = in[member(0)][k];
    if (bf) acc = round_bf16(acc);
    for (int s = 1; s < n; ++s) {
      const float x = in[member(s)][k];
      acc = bf ? round_bf16(acc + round_bf16(x)) : acc + x;
    }
    out[k] = acc;
  }
}

}  // namespace fp8moe::sim
