#pragma once
// The deterministic reduction of the GPU fake communicator (sim/comm/cuda_fake_communicator.hpp):
// reference/reduce.hpp's formula (member order, first value, step), the one the host's
// sim::reduce_chunk uses, so the two agree bit for bit on NaN-free data (the file is built with
// --fmad=false and without -ftz; a NaN's payload may differ: the GPU returns the canonical NaN).
#include <cuda_runtime.h>

#include <cstdint>

#include "reference/reduce.hpp"

namespace fp8moe::kernels {

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
                        std::int64_t max_count, ReduceOrder order, bool bf16, cudaStream_t stream);

}  // namespace fp8moe::kernels
