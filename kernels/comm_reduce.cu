// The GPU fake communicator's reduction (see comm_reduce.hpp for the formula and its host twin).
// One thread per element of a chunk, blockIdx.y the chunk: the data of a simulated mesh is small
// and copied per call, so this is memory-bound and simple by choice.
#include "kernels/comm_reduce.hpp"

#include <algorithm>

#include "kernels/check.hpp"
#include "reference/formats.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocksX = 4096;  // grid-stride beyond this
constexpr int kMaxGridY = 65535;            // CUDA's limit on gridDim.y

__global__ void __launch_bounds__(kThreads)
    comm_reduce_kernel(const float* const* __restrict__ members, int n, const CommReduceChunk* __restrict__ chunks,
                       ReduceOrder order, bool bf16) {
  const CommReduceChunk c = chunks[blockIdx.y];
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < c.count; k += stride) {
    const std::int64_t at = c.offset + k;
    float acc = reduce_first(members[reduce_member(order, c.owner, n, 0)][at], bf16);
    for (int s = 1; s < n; ++s) acc = reduce_step(acc, members[reduce_member(order, c.owner, n, s)][at], bf16);
    c.out[k] = acc;
  }
}

}  // namespace

void comm_reduce_chunks(const float* const* members, int n, const CommReduceChunk* chunks, int nchunks,
                        std::int64_t max_count, ReduceOrder order, bool bf16, cudaStream_t stream) {
  if (n < 1 || n > kMaxGridY) fail("comm_reduce_chunks: ", n, " members (1 to ", kMaxGridY, " allowed)");
  if (nchunks < 0 || nchunks > kMaxGridY) fail("comm_reduce_chunks: ", nchunks, " chunks (0 to ", kMaxGridY, " allowed)");
  if (nchunks == 0 || max_count <= 0) return;
  const std::int64_t blocks = std::min<std::int64_t>((max_count + kThreads - 1) / kThreads, kMaxBlocksX);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(nchunks));
  comm_reduce_kernel<<<grid, kThreads, 0, stream>>>(members, n, chunks, order, bf16);
  FP8MOE_CUDA_CHECK_LAUNCH("comm_reduce_kernel", n, " members, ", nchunks, " chunks of up to ", max_count, " values, ",
                           bf16 ? "bf16" : "fp32", " ", reduce_order_name(order));
}

}  // namespace fp8moe::kernels
