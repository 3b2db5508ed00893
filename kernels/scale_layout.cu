// Scale relayout kernels for cuBLASLt block scaling (see scale_layout.hpp for the layouts). Scale
// tensors are 1/128 (VEC128) or 1/16384 (BLK128x128) of the operand's elements, so these are
// simple element-per-thread copies; the transpose stages 32 x 32 tiles in shared memory.
#include <algorithm>

#include "kernels/check.hpp"
#include "kernels/scale_layout.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxJobs = 64;  // experts per launch: the job table travels as a kernel argument

struct VecJobs {
  int n = 0;
  std::int64_t row0[kMaxJobs + 1];   // first source row of each expert; row0[n] ends the last
  std::int64_t dst_off[kMaxJobs];    // float offset of each expert's (kb, rows_e) block
};

// grid (ceil(max rows_e * kb / kThreads), n): src (M, kb) row-major -> dst block (kb, rows_e)
__global__ void __launch_bounds__(kThreads) relayout_vec_kernel(const float* __restrict__ src, std::int64_t kb,
                                                                VecJobs jobs, float* __restrict__ dst) {
  const int e = blockIdx.y;
  const std::int64_t r0 = jobs.row0[e], rows = jobs.row0[e + 1] - r0;
  const std::int64_t n = rows * kb;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t m = idx / kb, j = idx % kb;
    dst[jobs.dst_off[e] + j * rows + m] = src[(r0 + m) * kb + j];
  }
}

// src (rows, kb) -> dst (rows, pitch), zero in the pad columns
__global__ void __launch_bounds__(kThreads) relayout_blk_kernel(const float* __restrict__ src, std::int64_t rows,
                                                                std::int64_t kb, std::int64_t pitch,
                                                                float* __restrict__ dst) {
  const std::int64_t n = rows * pitch;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t r = idx / pitch, j = idx % pitch;
    dst[idx] = j < kb ? src[r * kb + j] : 0.0f;
  }
}

// grid (ceil(C/32), ceil(R/32), batch), block (32, 8): src (batch, R, C) -> dst (batch, C, R)
__global__ void transpose_kernel(const float* __restrict__ src, std::int64_t R, std::int64_t C,
                                 float* __restrict__ dst) {
  __shared__ float tile[32][33];
  src += static_cast<std::int64_t>(blockIdx.z) * R * C;
  dst += static_cast<std::int64_t>(blockIdx.z) * R * C;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * 32, r0 = static_cast<std::int64_t>(blockIdx.y) * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const std::int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[i][threadIdx.x] = src[r * C + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const std::int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < R && c < C) dst[c * R + r] = tile[threadIdx.x][i];
  }
}

int grid_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

std::vector<std::int64_t> vec_scale_offsets(std::span<const std::int32_t> offs, std::int64_t kb) {
  std::vector<std::int64_t> o{0};
  std::int64_t s = 0, at = 0;
  for (const std::int32_t end : offs) {
    at = round_up_i64(at + (end - s) * kb, kScaleAlign);
    o.push_back(at);
    s = end;
  }
  return o;  // o[e]: where expert e's block starts; o[E]: the total
}

void relayout_vec_scales(const float* src, std::span<const std::int32_t> offs, std::int64_t kb,
                         std::span<const std::int64_t> dst_off, float* dst, cudaStream_t stream) {
  if (dst_off.size() < offs.size()) fail("relayout_vec_scales: ", dst_off.size(), " offsets for ", offs.size(), " experts");
  std::int64_t s = 0;
  for (std::size_t e0 = 0; e0 < offs.size(); e0 += kMaxJobs) {
    VecJobs jobs;
    std::int64_t max_rows = 0;
    jobs.row0[0] = s;
    for (std::size_t e = e0; e < offs.size() && jobs.n < kMaxJobs; ++e) {
      jobs.dst_off[jobs.n] = dst_off[e];
      jobs.row0[++jobs.n] = offs[e];
      max_rows = std::max<std::int64_t>(max_rows, offs[e] - s);
      s = offs[e];
    }
    if (max_rows == 0) continue;
    const dim3 grid(static_cast<unsigned>(grid_for(max_rows * kb)), static_cast<unsigned>(jobs.n));
    relayout_vec_kernel<<<grid, kThreads, 0, stream>>>(src, kb, jobs, dst);
    FP8MOE_CUDA_CHECK_LAUNCH("relayout_vec_kernel", "experts ", e0, "..", e0 + jobs.n, " kb=", kb);
  }
}

void relayout_blk_scales(const float* src, std::int64_t rows, std::int64_t kb, float* dst, cudaStream_t stream) {
  const std::int64_t pitch = blk_scale_pitch(kb);
  if (rows * pitch == 0) return;
  relayout_blk_kernel<<<grid_for(rows * pitch), kThreads, 0, stream>>>(src, rows, kb, pitch, dst);
  FP8MOE_CUDA_CHECK_LAUNCH("relayout_blk_kernel", "rows=", rows, " kb=", kb);
}

void transpose_scales(const float* src, std::int64_t R, std::int64_t C, float* dst, cudaStream_t stream,
                      std::int64_t batch) {
  if (R * C * batch == 0) return;
  if ((R + 31) / 32 > 65535) fail("transpose_scales: ", R, " rows exceed the grid's y limit");
  if (batch > 65535) fail("transpose_scales: a batch of ", batch, " matrices exceeds the grid's z limit");
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>((R + 31) / 32), static_cast<unsigned>(batch));
  transpose_kernel<<<grid, dim3(32, 8), 0, stream>>>(src, R, C, dst);
  FP8MOE_CUDA_CHECK_LAUNCH("transpose_kernel", "R=", R, " C=", C, " batch=", batch);
}

TokenBlockScales relay_token_block_scales(const float* doutT_scales, std::int64_t N, const float* aT_scales,
                                          std::int64_t K, std::span<const std::int32_t> offs, std::int64_t mb,
                                          ScaleScratch& scratch, cudaStream_t stream) {
  float* d = scratch.get(0, static_cast<std::size_t>(mb * N));
  float* a = scratch.get(1, static_cast<std::size_t>(mb * K));
  transpose_scales(doutT_scales, N, mb, d, stream);
  transpose_scales(aT_scales, K, mb, a, stream);
  return TokenBlockScales{d, a, N, K, offs};
}

}  // namespace fp8moe::kernels
