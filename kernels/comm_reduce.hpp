#pragma once
// The deterministic reduction of the GPU fake communicator (sim/comm/cuda_fake_communicator.hpp):
// the device twin of sim::reduce_chunk (sim/comm/communicator.cpp), bit for bit. For element k of
// a chunk owned by ring position `owner` among n members:
//
//   member(s) = s                      (ascending)
//             = (owner + 1 + s) % n    (ring: the order a ring reduce-scatter adds in)
//   fp32: acc = in[member(0)][k];            acc = acc + in[member(s)][k]                 s = 1..n-1
//   bf16: acc = bf16(in[member(0)][k]);      acc = bf16(acc + bf16(in[member(s)][k]))
//   out[k] = acc
//
// Each add is __fadd_rn (never fused or reassociated, denormals kept: the file is built with
// --fmad=false and without -ftz, like the host's -ffp-contract=off SSE adds); bf16 is
// reference/formats.hpp's round_bf16, the same integer RNE on host and device. A NaN result is a
// NaN on both sides, but its payload and sign may differ (the GPU returns the canonical NaN, x86
// propagates an operand's), so bitwise parity is a property of NaN-free data.
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8moe::kernels {

enum class CommReduceOrder : std::uint8_t { ascending, ring };

// One chunk of a collective: every member's values at [offset, offset + count) of its buffer,
// reduced into out[0, count). Lives in device memory (the launcher reads it on the device).
struct CommReduceChunk {
  std::int64_t offset = 0;  // elements from the start of each member's buffer
  std::int64_t count = 0;
  float* out = nullptr;     // device, `count` floats (out[k] may alias a member's element offset + k:
                            // one thread reads every member's k before it writes out[k])
  int owner = 0;            // ring position of the member that owns the chunk
};

// members: device array of n device pointers (one fp32 buffer per member, in group order);
// chunks: device array of nchunks chunk descriptors; max_count: the largest chunk count (sizes the
// grid). Enqueued on `stream`; no synchronization. n in [1, 65535], nchunks in [0, 65535].
void comm_reduce_chunks(const float* const* members, int n, const CommReduceChunk* chunks, int nchunks,
                        std::int64_t max_count, CommReduceOrder order, bool bf16, cudaStream_t stream);

}  // namespace fp8moe::kernels
