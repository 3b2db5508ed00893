#pragma once
// The one CUTLASS launch of the cuda-cutlass backend (kernels/cutlass_grouped.hpp), with no CUTLASS
// type in its interface: the passes describe their groups as plain pointers and strides, and the
// CUTLASS translation units (cutlass_gemm_*.cu, compiled only where CUTLASS was found) build the
// kernel's argument arrays from them.
//
// Every group g computes D_g (m, n) row-major = A_g (m, k) . B_g (n, k)^T, both operands
// K-contiguous FP8 e4m3 codes ("TN"), with blockwise scales read by CUTLASS's sm90 ptr-array
// grouped collective (KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise, CUTLASS example 68):
//   ScaleKind::act_weight  A one scale per row and 128-K block, B one per 128x128 tile (fwd, dgrad)
//   ScaleKind::act_act     A and B one scale per row and 128-K block (wgrad, contracted along tokens)
// Scales are CUTLASS's MN-major layouts (the only ones its sm90 collective reads): sfa (k/128, m)
// row-major, sfb (k/128, ceil(n/128)) or (k/128, n) row-major.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/check.hpp"
#include "reference/gemm.hpp"

namespace fp8moe::kernels {

enum class ScaleKind { act_weight, act_act };

// The kernel schedule: cooperative (two consumer warpgroups share a 128x128 tile; every output
// type) or ping-pong (each warpgroup its own 64x128 tile, one's epilogue under the other's
// mainloop; instantiated for bf16 output). Both are the same arithmetic per output element.
enum class CutlassSchedule { cooperative, pingpong };
const char* cutlass_schedule_name(CutlassSchedule s);

struct CutlassGroup {
  int m = 0, n = 0, k = 0;
  const std::uint8_t* a = nullptr;
  std::int64_t lda = 0;  // elements between rows of A
  const std::uint8_t* b = nullptr;
  std::int64_t ldb = 0;
  void* d = nullptr;
  std::int64_t ldd = 0;
  const float* sfa = nullptr;
  const float* sfb = nullptr;
};

// Buffers a CutlassGrouped keeps between launches (they only grow).
struct CutlassScratch {
  DeviceBuffer<std::uint8_t> args;       // the groups' argument arrays, one upload per launch
  DeviceBuffer<std::uint8_t> workspace;  // CUTLASS's workspace
  std::vector<std::uint8_t> host;        // staging of `args`
  int sm_count = 0;                      // the device's SMs, asked once
};

// What CUTLASS ran (for messages and the bench): tile, cluster, schedule, scales.
std::string cutlass_config_name(ScaleKind kind, CutlassSchedule schedule);

// Launches the grouped GEMM on `stream`; an Error names `what` and CUTLASS's refusal or status.
// out: bf16 or fp32 (fp64 is refused by the caller).
void cutlass_grouped_gemm(ScaleKind kind, CutlassSchedule schedule, OutDtype out, std::span<const CutlassGroup> groups,
                          CutlassScratch& s, cudaStream_t stream, const std::string& what);

}  // namespace fp8moe::kernels
