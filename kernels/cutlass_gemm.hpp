#pragma once
// The one CUTLASS launch of the cuda-cutlass backend (kernels/cutlass_grouped.hpp), with no CUTLASS
// type in its interface: the passes describe their groups as plain pointers and strides, and the
// CUTLASS translation units (cutlass_gemm_*.cu, compiled only where CUTLASS was found) build the
// kernel's argument arrays from them.
//
// Every group g computes D_g (m, n) row-major = A_g (m, k) . B_g (n, k)^T, both operands
// K-contiguous FP8 e4m3 codes ("TN"), with blockwise scales read by CUTLASS's sm90 ptr-array
// grouped collective (KernelPtrArrayTmaWarpSpecialized{Cooperative,Pingpong}FP8Blockwise, CUTLASS
// example 68), its mainloop CUTLASS's or fp8moe's (cutlass_overlap.cuh; the same arithmetic):
//   ScaleKind::act_weight  A one scale per row and 128-K block, B one per 128x128 tile (fwd, dgrad)
//   ScaleKind::act_act     A and B one scale per row and 128-K block (wgrad, contracted along tokens)
// Scales are CUTLASS's MN-major layouts (the only ones its sm90 collective reads): sfa (k/128, m)
// row-major, sfb (k/128, ceil(n/128)) (act_weight) or (k/128, n) (act_act) row-major. An
// act_weight kernel whose tile width is not a multiple of 128 (160, 192; cutlass_straddles) takes
// sfb as the quantizer writes it, (ceil(n/128), k/128) row-major, and repeats it on the device
// before each launch into CUTLASS's MN-major layout at one scale per gcd(width, 128) columns (a
// grid-stride copy, 2 or 4 floats per weight block), since its tiles straddle two weight blocks.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/check.hpp"
#include "reference/gemm.hpp"

namespace fp8moe::kernels {

enum class ScaleKind { act_weight, act_act };

// The kernel schedule: cooperative (two consumer warpgroups share a 128 x tile_n tile; every
// output type), ping-pong (each warpgroup its own 64 x tile_n tile, one's epilogue under the
// other's mainloop; instantiated for bf16 output). The same arithmetic per output element. (An
// epilogue stored straight from the accumulator registers, CUTLASS's PtrArrayNoSmemWarpSpecialized,
// was bitwise but 12-43 % slower on every bench shape on the H100: results/bench/
// 2026-12-07-cutlass-round16; removed.)
enum class CutlassSchedule { cooperative, pingpong };
// Where the mainloop folds a 128-K block's partial into the accumulator: right after its own
// wgmma (CUTLASS's collective), under the next block's wgmma (fp8moe's mainloop with two partials,
// kernels/cutlass_overlap.cuh), or right after its own wgmma in fp8moe's mainloop (one partial, the
// scales read from shared memory as it folds: the registers of a 160- or 192-wide tile, where
// CUTLASS's collective spills), or under the other half's wgmma (fp8moe's mainloop with two
// partials each half the tile's width: the fold of each half under a wgmma of the same warpgroup
// in the registers of one whole partial). The same arithmetic per output element.
enum class CutlassFold { after_mma, under_next_mma, after_mma_own, under_other_half };
// The persistent tile scheduler's walk over each group's output tiles (CUTLASS's grouped scheduler
// takes no heuristic): along M (CUTLASS's default) or along N, in swizzled bands of 1, 2, 4 or 8 tiles.
enum class CutlassRaster { along_m, along_n };

// The fold's scheduling bits in the kernel's SASS (scripts/sass_fold_yield.py, run on the object at
// build time; fp8moe's mainloops only): as nvcc wrote them (every other fold FFMA lets the warp
// scheduler switch warps), every fold FFMA yielding (with no operand reuse), none yielding (a warp
// issues its whole fold at once), or the fold's first half yielding and its second as compiled
// (DeepGEMM's kind of rewrite). Control bits only: the same instructions and arithmetic.
enum class CutlassSass { as_compiled, yield_all, yield_none, yield_head };

// The thread-block cluster: 1x2x1 (two CTAs of neighbouring N tiles; A's tile loaded once for both
// by TMA multicast; CUTLASS example 68's) or 2x1x1 (neighbouring M tiles share B's).
enum class CutlassCluster { m1n2, m2n1 };

// One CUTLASS kernel configuration (kernels/cutlass_grouped.hpp's cutlass_choose picks the
// backend's per launch); cutlass_built says which are compiled. The tile is 128 x tile_n x 128
// (cooperative) or 64 x tile_n x 128 (ping-pong).
struct CutlassKernel {
  CutlassSchedule schedule = CutlassSchedule::cooperative;
  CutlassFold fold = CutlassFold::under_next_mma;
  CutlassRaster raster = CutlassRaster::along_m;
  int swizzle = 1;
  CutlassCluster cluster = CutlassCluster::m1n2;
  int tile_n = 128;
  CutlassSass sass = CutlassSass::as_compiled;
  bool operator==(const CutlassKernel&) const = default;
};
const char* cutlass_schedule_name(CutlassSchedule s);
const char* cutlass_fold_name(CutlassFold f);
const char* cutlass_raster_name(CutlassRaster r);
const char* cutlass_cluster_name(CutlassCluster c);
const char* cutlass_sass_name(CutlassSass s);

// A compiled kernel: kernels/cutlass_kernels.def's line (raster and swizzle are launch arguments,
// left at their defaults here); fp32: built for fp32 output as well as bf16.
struct CutlassBuiltKernel {
  ScaleKind kind;
  CutlassKernel kernel;
  bool fp32;
};
// Every compiled kernel, in cutlass_kernels.def's order (empty where CUTLASS was not found).
std::span<const CutlassBuiltKernel> cutlass_built_kernels();
// Whether the kernel of `k` (any raster and swizzle) is compiled for `kind` and output `out`.
bool cutlass_built(ScaleKind kind, const CutlassKernel& k, OutDtype out);
// Whether `k`'s act_weight tiles straddle weight blocks (a width not a multiple of 128): its
// CutlassGroup::sfb is then the weight-block scales as quantized, (ceil(n/128), k/128) row-major.
constexpr bool cutlass_straddles(ScaleKind kind, int tile_n) { return kind == ScaleKind::act_weight && tile_n % 128 != 0; }

// The straddling widths verified bitwise on a device: 208 and 224 compiled and computed wrong
// outputs on the H100 (results/bench/2026-12-07-cutlass-round14; cause not found), so a new width
// needs a device round (scripts/gpu_round.sh ... cutlass FILTER: its test_kernels_cutlass) before it
// goes here. The one list: kernels/CMakeLists.txt reads the next line at configure time (to refuse
// a .def line early, by name), cutlass_gemm.cuh's Config asserts it, test_kernels_layout checks
// the built table against it.
inline constexpr int kCutlassVerifiedStraddling[] = {160, 192};
constexpr bool cutlass_straddling_verified(int tile_n) {
  for (const int w : kCutlassVerifiedStraddling) {
    if (w == tile_n) return true;
  }
  return false;
}

struct CutlassGroup {
  int m = 0, n = 0, k = 0;
  const std::uint8_t* a = nullptr;
  std::int64_t lda = 0;  // elements between rows of A
  const std::uint8_t* b = nullptr;
  std::int64_t ldb = 0;
  void* d = nullptr;
  std::int64_t ldd = 0;
  const float* sfa = nullptr;
  const float* sfb = nullptr;  // MN-major as above, or as quantized where cutlass_straddles
};

// Buffers a CutlassGrouped keeps between launches (they only grow), and its last launch's CUTLASS
// kernel object: a launch whose configuration and groups (shapes, pointers, strides) equal the
// last one's runs that object again, without uploading the argument arrays or initializing.
struct CutlassScratch {
  DeviceBuffer<std::uint8_t> args;       // the groups' argument arrays
  DeviceBuffer<std::uint8_t> workspace;  // CUTLASS's workspace
  DeviceBuffer<float> expanded;          // B's weight-block scales repeated (tile widths not a multiple of 128)
  std::vector<std::uint8_t> host;        // staging of `args`
  int sm_count = 0;                      // the device's SMs, asked once
  struct LastLaunch {
    std::shared_ptr<void> object;   // the initialized CUTLASS object (with what it points to)
    const void* type = nullptr;     // its configuration (one tag per instantiation)
    std::vector<std::uint8_t> key;  // its `host` bytes, raster, swizzle and SM count
  } last;
  std::int64_t reused = 0;  // launches that reran `last` (tests and the bench report it)
};

// What CUTLASS ran (for messages and the bench): tile, cluster, schedule, fold, raster, scales.
std::string cutlass_config_name(ScaleKind kind, const CutlassKernel& k);
// The bench's row label of `k`: schedule co|pp, fold cl (CUTLASS's) | ov (under the next wgmma) |
// f1 (fp8moe's, one partial) | hv (two half-width partials), raster M|N and swizzle, then /2x1 for cluster 2x1x1, /n<width>
// for a tile not 128 wide and /ya, /yn or /yh for the fold's SASS patched yield_all, yield_none or yield_head:
// "co/ov/M2", "co/f1/N1/n192", "co/f1/M2/2x1/n192/ya"; without the walk (raster and swizzle) where `walk`
// is false: "co/f1/n192" (what a .def line fixes).
std::string cutlass_short_name(const CutlassKernel& k, bool walk = true);

// Launches the grouped GEMM on `stream`; an Error names `what` and CUTLASS's refusal or status.
// out: bf16 or fp32 (fp64 is refused by the caller).
// Throws (an Error naming `what`) for a configuration outside the ones built (cutlass_built) or a
// swizzle other than 1, 2, 4, 8.
void cutlass_grouped_gemm(ScaleKind kind, const CutlassKernel& k, OutDtype out, std::span<const CutlassGroup> groups,
                          CutlassScratch& s, cudaStream_t stream, const std::string& what);

}  // namespace fp8moe::kernels
