#pragma once
// Raw-PTX FP8 wgmma, m64nNk32 with f32 accumulators in registers, shared by the wgmma probe
// (kernels/wgmma_probe.cu) and the fold-overlap probe (kernels/bench/fold_probe.cu). Macros, since
// an asm statement's operand list is fixed text: FP8MOE_WGMMA_ASM(NN, R, IA, IB, IS, TA, TB, SD)
// expands to one `wgmma.mma_async.sync.aligned.m64n<NN>k32.f32.<TA>.<TB>` whose R = NN/2
// accumulator operands are the array `d` (read and written), whose descriptors are the variables
// `da` and `db` (operands IA = R, IB = R+1) and whose scale-d is the int expression SD (operand
// IS = R+2; 0: D = A B, nonzero: D = A B + D). imm-scale-a = imm-scale-b = 1 (no negation). FP8
// wgmma has no transpose operands: both operands K-major (PTX ISA 9.7.15.5.2, "wgmma.mma_async",
// FP8 floating point type syntax). sm_90a only: the caller guards it with __CUDA_ARCH_FEAT_SM90_ALL.
#define FP8MOE_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FP8MOE_WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FP8MOE_WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define FP8MOE_WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FP8MOE_WG_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FP8MOE_WG_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FP8MOE_WG_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define FP8MOE_WG_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FP8MOE_WG_REGS4 "{%0, %1, %2, %3}"
#define FP8MOE_WG_REGS32 "{" FP8MOE_WG_R0 ", " FP8MOE_WG_R1 "}"
#define FP8MOE_WG_REGS48 "{" FP8MOE_WG_R0 ", " FP8MOE_WG_R1 ", " FP8MOE_WG_R2 "}"
#define FP8MOE_WG_REGS64 "{" FP8MOE_WG_R0 ", " FP8MOE_WG_R1 ", " FP8MOE_WG_R2 ", " FP8MOE_WG_R3 "}"
#define FP8MOE_WG_REGS96 \
  "{" FP8MOE_WG_R0 ", " FP8MOE_WG_R1 ", " FP8MOE_WG_R2 ", " FP8MOE_WG_R3 ", " FP8MOE_WG_R4 ", " FP8MOE_WG_R5 "}"
#define FP8MOE_WG_REGS128                                                                                      \
  "{" FP8MOE_WG_R0 ", " FP8MOE_WG_R1 ", " FP8MOE_WG_R2 ", " FP8MOE_WG_R3 ", " FP8MOE_WG_R4 ", " FP8MOE_WG_R5 \
  ", " FP8MOE_WG_R6 ", " FP8MOE_WG_R7 "}"
#define FP8MOE_WG_D4(o) "+f"(d[(o) + 0]), "+f"(d[(o) + 1]), "+f"(d[(o) + 2]), "+f"(d[(o) + 3])
#define FP8MOE_WG_D8(o) FP8MOE_WG_D4(o), FP8MOE_WG_D4((o) + 4)
#define FP8MOE_WG_D32(o) FP8MOE_WG_D8(o), FP8MOE_WG_D8((o) + 8), FP8MOE_WG_D8((o) + 16), FP8MOE_WG_D8((o) + 24)
#define FP8MOE_WG_D64(o) FP8MOE_WG_D32(o), FP8MOE_WG_D32((o) + 32)
#define FP8MOE_WG_OUTS4 FP8MOE_WG_D4(0)
#define FP8MOE_WG_OUTS32 FP8MOE_WG_D32(0)
#define FP8MOE_WG_OUTS48 FP8MOE_WG_D32(0), FP8MOE_WG_D8(32), FP8MOE_WG_D8(40)
#define FP8MOE_WG_OUTS64 FP8MOE_WG_D64(0)
#define FP8MOE_WG_OUTS96 FP8MOE_WG_D64(0), FP8MOE_WG_D32(64)
#define FP8MOE_WG_OUTS128 FP8MOE_WG_D64(0), FP8MOE_WG_D64(64)

#define FP8MOE_WGMMA_ASM(NN, R, IA, IB, IS, TA, TB, SD)                                                    \
  asm volatile(                                                                                              \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS ", 0;\n"                                                      \
      "wgmma.mma_async.sync.aligned.m64n" #NN "k32.f32." #TA "." #TB " " FP8MOE_WG_REGS##R ", %" #IA ", %" #IB \
      ", p, 1, 1;\n}\n"                                                                                      \
      : FP8MOE_WG_OUTS##R                                                                                    \
      : "l"(da), "l"(db), "r"(SD)                                                                            \
      : "memory")

namespace fp8moe::kernels {

// Keep the accumulators in place across the asynchronous wgmma (CUTLASS warpgroup_fence_operand):
// an empty asm that "reads and writes" each register stops the compiler from moving or reusing
// them between the mma and wgmma.wait_group.
template <int R>
__device__ __forceinline__ void wgmma_fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace fp8moe::kernels
