#pragma once
// fp8moe's mainloop for CUTLASS's sm90 ptr-array blockwise-FP8 grouped GEMM: the same arithmetic
// as CUTLASS's collective (kernels/cutlass_gemm.cuh), scheduled so that the tensor cores do not
// wait for the promotion.
//
// CUTLASS's collective runs each 128-K block as: wgmma into a partial P (from zero), wait for it,
// then fold P into the fp32 accumulator with the block's scales on the CUDA cores. While it folds,
// the warpgroup has no wgmma in flight, so every k-block costs the MMA time plus the fold's (one
// FMA per accumulator element, the scale loads and the wait's drain). This mainloop keeps two
// partials: k-block i's wgmma is issued into one before k-block i-1's, held in the other, is waited
// for and folded, so the fold runs under the next block's MMAs. Per output element nothing changes:
// P from the same chained wgmma (ScaleOut::Zero, then One), the same fold in the same k order,
//   act_weight: s = fl(sa * sb), acc = fma(P, s, acc)
//   act_act:    acc = fma(fl(P * sa), sb, acc)
// written as the same C++ expressions (the FFMA contraction of nvcc's default --fmad=true), with
// the accumulator starting at +0 (the reference model's start; CUTLASS's collective leaves it to
// the register allocator). Costs: one more partial in registers (64 floats a thread for a 64x128
// warpgroup tile). A k-block's scales are read from shared memory just before its fold, while its
// stage is still held.
//
// With kPartials = 1 the same mainloop folds each k-block right after its own wgmma, as CUTLASS's
// collective does, but reads B's per-column scales from shared memory as it folds instead of
// copying a k-block's scales into registers first: CUTLASS's collective spills with a 192-wide tile
// (96 accumulator floats, 96 partial floats and a register copy of the per-column scales a thread);
// this one fits (cutlass_kernels.def, SPEC 15.5). A fwd/dgrad tile whose width is not a multiple
// of 128 (160, 192) straddles two 128x128 weight blocks; it reads B's scales at gcd(width, 128)
// columns (each weight-block scale repeated on the device: cutlass_gemm.cuh's Config), a few
// registers a thread, and folds them with act_weight's arithmetic, fl(sa * sb) first.
//
// With one partial the per-row scales (and a 128-wide act_weight tile's one B scale and their
// products) are read before the wait for the wgmma they scale, so that their shared-memory latency
// is not exposed after it (round 4 measured this mainloop 3-7 % behind CUTLASS's at 128x128 when
// it read them after the wait; round 5 measured no change from reading them before: SPEC 15.5);
// with two partials the fold runs under the next wgmma anyway.
//
// With kHalves (two partials, each half the tile's width) every k-block is issued as two wgmma
// chains, one per half of the tile's columns (m64n96k32 for a 192-wide tile), committed
// separately: the left half's partial is folded while the right half's chain runs, then the next
// k-block's left half is issued and the right half's partial folded under it. The fold never
// leaves the tensor cores without a wgmma of the same warpgroup, in the registers of one partial
// of the whole width (a 192-wide tile: 96 accumulator + 2 x 48 partial floats a thread, where two
// whole partials would need 288); each chain reads the tile's A once more. A wgmma's C fragment
// holds whole groups of 8 columns, a half's in the same order as the whole tile's second half
// (element j of the right half is accumulator element size(accum)/2 + j), so the fold is the
// same expression on the same elements: same bits.
//
// The class derives from CUTLASS's collective and replaces only mma(): the producer side (TMA
// loads of A, B and the scales), the pipeline, the tensormaps and the kernel are CUTLASS's.
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include "kernels/cutlass_gemm.hpp"

namespace fp8moe::kernels::cutlass_impl {

// kSass: only a tag (cutlass_gemm.cuh's Config): the build patches the fold's scheduling bits of
// a kernel tagged other than as_compiled after nvcc; the code is the same.
template <class Base, int kPartials, ScaleKind kKind, bool kHalves,
          CutlassSass kSass>
struct FoldMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutSFA;
  using typename Base::SmemLayoutSFB;
  using typename Base::TensorStorage;
  using typename Base::TileShape;
  using typename Base::TiledMma;
  using Scale = typename Base::ElementBlockScale;

  // B's scales in shared memory: one per tile along N (a 128-wide act_weight tile), one per output
  // column (act_act's), or one per Base::ScaleGranularityN columns (act_weight's for a tile whose
  // width is not a multiple of 128, each weight-block scale repeated: cutlass_gemm.cuh's Config).
  static constexpr bool kActWeight = kKind == ScaleKind::act_weight;
  static constexpr bool kBOnePerTile = Base::ScaleNsPerTile == 1;
  static constexpr bool kBPerColumn = Base::ScaleGranularityN == 1;
  static_assert(Base::ScaleMsPerTile > 1, "fp8moe's mainloop covers per-row A scales only (1x128 activations)");
  static_assert(kActWeight || kBPerColumn, "act_act has a B scale per column");
  // A thread's C fragment holds whole groups of 8 adjacent columns, so that a granularity of a
  // multiple of 8 gives each element's scale at a compile-time register (stride-0 layouts).
  static_assert(kBOnePerTile || kBPerColumn || Base::ScaleGranularityN % 8 == 0,
                "B scales per column group need groups of a multiple of 8 columns");
  static_assert(Base::ScalePromotionInterval == 4, "one fold per 128-K block (a k-tile of 128)");
  static_assert(kPartials == 1 || kPartials == 2, "the fold after its own wgmma (1) or under the next one (2)");
  static_assert(!kHalves || kPartials == 2, "the halves are two partials");
  static constexpr int kTileM = decltype(cute::size<0>(TileShape{}))::value;
  static constexpr int kTileN = decltype(cute::size<1>(TileShape{}))::value;
  static_assert(!kHalves || kTileN % 32 == 0, "halves of a multiple of 16 columns (wgmma's N)");

  template <class Accum>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, Accum& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const& /*mainloop_params*/) {
    using namespace cute;
    // The stage buffers, and the scales broadcast to the output tile (zero strides along the
    // dimension a scale does not vary in), as (BLK_M, BLK_N, (BLK_K, PIPE)).
    auto sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    auto sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    const auto sfa_layout = make_layout(
        make_shape(shape<0>(SmemLayoutSFA{}), get<1>(TileShape{}), make_shape(shape<1>(SmemLayoutSFA{}), shape<2>(SmemLayoutSFA{}))),
        make_stride(stride<0>(SmemLayoutSFA{}), _0{}, make_stride(stride<1>(SmemLayoutSFA{}), stride<2>(SmemLayoutSFA{}))));
    const auto sfb_layout = make_layout(
        make_shape(get<0>(TileShape{}), shape<0>(SmemLayoutSFB{}), make_shape(shape<1>(SmemLayoutSFB{}), shape<2>(SmemLayoutSFB{}))),
        make_stride(_0{}, stride<0>(SmemLayoutSFB{}), make_stride(stride<1>(SmemLayoutSFB{}), stride<2>(SmemLayoutSFB{}))));
    auto sSFA = make_tensor(make_smem_ptr(shared_tensors.smem_SFA.data()), sfa_layout);
    auto sSFB = make_tensor(make_smem_ptr(shared_tensors.smem_SFB.data()), sfb_layout);

    constexpr int kWg = cutlass::NumThreadsPerWarpGroup;
    constexpr int kWarpGroups = size(TiledMma{}) / kWg;
    const Layout wg_layout = make_layout(Int<kWarpGroups>{}, Int<kWg>{});
    const int wg = __shfl_sync(0xffffffff, thread_idx / kWg, 0);
    TiledMma tiled_mma;
    auto wg_mma = tiled_mma.get_slice(wg_layout(wg));
    auto tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);  // (MMA, MMA_M, MMA_N, (MMA_K, PIPE))
    auto tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    auto tCrA = wg_mma.make_fragment_A(wg_mma.partition_A(sA));  // descriptors (MMA, MMA_M, MMA_K, PIPE)
    auto tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sB));
    CUTE_STATIC_ASSERT_V(size<1>(tCrA) == size<1>(accum));
    CUTE_STATIC_ASSERT_V(size<1>(tCrB) == size<2>(accum));

    auto sfa = make_tensor_like<Scale>(tCsSFA(_, _, _, _0{}));  // one k-block's row scales, as the accumulator
    // B's scales in registers where they are few (one a tile, or one a column group); a column's
    // are read from shared memory in the fold instead.
    auto sfb = [&] {
      if constexpr (kBPerColumn) {
        return cute::tuple<>{};
      } else {
        return make_tensor_like<Scale>(tCsSFB(_, _, _, _0{}));
      }
    }();
    clear(accum);
    if (k_tile_count <= 0) return;
    // The partials are cleared too (below), though each wgmma chain starts from zero: an undefined
    // partial lets the compiler seed the loop's copy of one from a register of the other while that
    // one's wgmma is in flight, and ptxas then serializes the wgmmas.

    // One commit batch: a k-block's chain of k32 wgmmas of `mma` into the partial p from zero
    // (ScaleOut::Zero, then One), step kb's operands a(kb) and b(kb).
    constexpr int kSteps = decltype(size<2>(tCrA))::value;
    const auto issue_chain = [](auto& mma, auto& p, auto const& a, auto const& b) {
      mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(p);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < kSteps; ++kb) {
        cute::gemm(mma, a(kb), b(kb), p);
        mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(p);
    };
    // k-block at `stage` into the partial p (the whole tile's width), from zero.
    const auto issue = [&](auto& p, int stage) {
      issue_chain(tiled_mma, p, [&](int kb) { return tCrA(_, _, kb, stage); },
                  [&](int kb) { return tCrB(_, _, kb, stage); });
    };
    // The row scales of the k-block at `stage` into sfa (times its one B scale where B has one
    // per tile: act_weight's fl(sa * sb); B's few scales into sfb where it has one per column
    // group), before the wait for its wgmma.
    const auto row_scales = [&](int stage) {
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), sfa);
      if constexpr (kBOnePerTile) {
        copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), sfb);
        const Scale sb = sfb(_0{});
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(filter_zeros(sfa)); ++i) filter_zeros(sfa)(i) = filter_zeros(sfa)(i) * sb;
      } else if constexpr (!kBPerColumn) {
        copy(filter_zeros(tCsSFB(_, _, _, make_coord(_0{}, stage))), filter_zeros(sfb));
      }
    };
    // The finished partial p of the k-block at `stage` into the accumulator elements from `at` on
    // (0: p is the whole tile's; size(accum)/2: the right half's), its stage still held and sfa
    // holding its row scales.
    const auto fold = [&](auto& p, int stage, auto at) {
      warpgroup_fence_operand(p);
      if constexpr (kBOnePerTile) {
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < size(p); ++j) {
          const int i = at + j;
          accum(i) += p(j) * sfa(i);
        }
      } else if constexpr (!kBPerColumn) {
        // act_weight, one B scale per column group: sfa and sfb repeat along the fragment (stride
        // 0), so the products fl(sa * sb) are as many as a thread's rows times groups (the
        // compiler keeps one of each).
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < size(p); ++j) {
          const int i = at + j;
          accum(i) += p(j) * (sfa(i) * sfb(i));
        }
      } else {
        // B's scales, one per output column: a thread's accumulator elements come in pairs of
        // adjacent columns (elements 2j, 2j+1 of wgmma's C fragment), so one 64-bit load reads a
        // pair's two scales: half the shared-memory loads of one per element (ncu: this fold's
        // scale loads made the L1/shared pipe wgrad's busiest unit).
        const auto b_scales = tCsSFB(_, _, _, make_coord(_0{}, stage));
        CUTE_STATIC_ASSERT_V((stride<0, 0>(b_scales) == Int<1>{}));
        static_assert(decltype(size(p))::value % 2 == 0, "C fragments hold column pairs");
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < size(p); j += 2) {
          const int i = at + j;
          const float2 sb = *reinterpret_cast<const float2*>(&b_scales(i));
          if constexpr (kActWeight) {
            accum(i) += p(j) * (sfa(i) * sb.x);
            accum(i + 1) += p(j + 1) * (sfa(i + 1) * sb.y);
          } else {
            accum(i) += p(j) * sfa(i) * sb.x;
            accum(i + 1) += p(j + 1) * sfa(i + 1) * sb.y;
          }
        }
      }
      warpgroup_fence_operand(accum);
      // The scales must be read before the stage goes back to the producer: CUTLASS's release
      // (mbarrier.arrive) is inline asm without a memory clobber, so without this the compiler may
      // move the shared-memory loads above after it, and the producer's next TMA can overwrite the
      // scales first (a wrong scale on a few outputs, never a crash).
      asm volatile("" ::: "memory");
    };

    // Waits for the next stage's buffers and issues its k-block into the partial p; its stage.
    // Whether the stage after it has arrived is tested (mbarrier.test_wait, which never blocks)
    // right after the issue, while the wgmma runs, so that the next k-block usually finds its
    // answer at hand instead of paying the barrier's latency after the fold (ncu, round 8: the
    // 128x192 kernel's consumers spent about 6 % of their time on the try-wait right before their
    // wgmmas; round 9 measured fwd and dgrad 1-2 % faster with the test ahead).
    auto token = pipeline.consumer_test_wait(smem_pipe_read);
    // Waits for the next stage's buffers (its full barrier tested after the previous issue); its index.
    const auto wait_stage = [&] {
      pipeline.consumer_wait(smem_pipe_read, token);
      const int stage = smem_pipe_read.index();
      ++smem_pipe_read;
      return stage;
    };
    const auto next_block = [&](auto& p) {
      const int stage = wait_stage();
      issue(p, stage);
      token = pipeline.consumer_test_wait(smem_pipe_read);
      return stage;
    };
    // Stage i's buffers go back to the producer once k-block i's wgmma has finished; the last
    // k-block's stage is released by mma_tail (the kernel's contract with CUTLASS's collective).
    PipelineState release = smem_pipe_read;
    if constexpr (kHalves) {
      // The same wgmma at half the tile's width, on the same warpgroups.
      using HalfMma = decltype(make_tiled_mma(
          GMMA::ss_op_selector<typename Base::ElementA, typename Base::ElementB, float,
                               Shape<Int<kTileM>, Int<kTileN / 2>, decltype(size<2>(TileShape{}))>, GMMA::Major::K,
                               GMMA::Major::K>(),
          Layout<Shape<Int<kWarpGroups>, _1, _1>>{}));
      HalfMma half_mma;
      auto wg_half = half_mma.get_slice(wg_layout(wg));
      auto tHrA = wg_half.make_fragment_A(wg_half.partition_A(sA));  // (MMA, 1, MMA_K, PIPE)
      auto tHrB = wg_half.make_fragment_B(wg_half.partition_B(sB));  // (MMA, 2: the halves, MMA_K, PIPE)
      CUTE_STATIC_ASSERT_V(size<1>(tHrA) == Int<1>{});
      CUTE_STATIC_ASSERT_V(size<1>(tHrB) == Int<2>{});
      CUTE_STATIC_ASSERT_V(size<2>(tHrA) == Int<kSteps>{});  // issue_chain's k32 steps, as the whole tile's
      // The halves' partials, as the half-width wgmma's C fragment (MMA).
      auto pl = make_fragment_like(partition_fragment_C(half_mma, Shape<Int<kTileM>, Int<kTileN / 2>>{})(_, 0, 0));
      auto pr = make_fragment_like(pl);
      static_assert(decltype(size(pl))::value * 2 == decltype(size(accum))::value, "a half is half the accumulator");
      // Zeroed where the compiler cannot see the value: a partial register known to hold 0 becomes
      // the source of other zeros (the accumulator's), read while the partial's wgmma is in
      // flight, and ptxas then serializes every wgmma (C7514).
      const auto opaque_clear = [](auto& p) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(p); ++i) asm volatile("mov.b32 %0, 0;" : "=f"(p(i)));
      };
      opaque_clear(pl);
      opaque_clear(pr);
      // k-block at `stage`, half h of the columns, into p from zero.
      const auto issue_half = [&](auto& p, int h, int stage) {
        issue_chain(half_mma, p, [&](int kb) { return tHrA(_, 0, kb, stage); },
                    [&](int kb) { return tHrB(_, h, kb, stage); });
      };
      constexpr auto kRight = Int<decltype(size(pl))::value>{};  // the right half's first accumulator element
      // One k-block at `stage`, its left half's chain in flight: issue the right half, wait for the
      // left one and fold it; then issue the next k-block's left half (`last`: none left) and wait
      // for the right one and fold it; release the stage.
      int stage = wait_stage();
      issue_half(pl, 0, stage);
      token = pipeline.consumer_test_wait(smem_pipe_read);
      const auto kblock = [&](auto last) {
        issue_half(pr, 1, stage);
        warpgroup_wait<1>();  // the left half of `stage` (its right one in flight)
        row_scales(stage);
        fold(pl, stage, _0{});
        int next = stage;
        if constexpr (decltype(last)::value) {
          warpgroup_wait<0>();
        } else {
          next = wait_stage();
          issue_half(pl, 0, next);
          token = pipeline.consumer_test_wait(smem_pipe_read);
          warpgroup_wait<1>();  // the right half of `stage` (next's left one in flight)
        }
        fold(pr, stage, kRight);
        if constexpr (!decltype(last)::value) {
          pipeline.consumer_release(release);
          ++release;
        }
        stage = next;
      };
      // Two k-blocks an iteration and the last one or two after the loop: the shape in which ptxas
      // keeps the chains asynchronous (one chain in flight at the loop's entry and back edge, and
      // every wait_group retiring a chain it can name). A loop of one k-block an iteration (or
      // the last k-block folded inside the loop behind a branch) makes ptxas serialize every wgmma
      // (C7514), as round 7 found.
      int left = k_tile_count - 1;  // k-blocks after `stage`
      CUTLASS_PRAGMA_NO_UNROLL
      while (left >= 2) {
        kblock(cute::false_type{});
        kblock(cute::false_type{});
        left -= 2;
      }
      if (left == 1) {
        kblock(cute::false_type{});
        kblock(cute::true_type{});
      } else {
        kblock(cute::true_type{});
      }
    } else if constexpr (kPartials == 1) {
      auto p0 = make_fragment_like(accum);  // the partial
      clear(p0);
      CUTLASS_PRAGMA_NO_UNROLL
      for (int left = k_tile_count; left > 0; --left) {
        const int stage = next_block(p0);
        row_scales(stage);
        warpgroup_wait<0>();
        fold(p0, stage, _0{});
        if (left > 1) {
          pipeline.consumer_release(release);
          ++release;
        }
      }
    } else {
      auto p0 = make_fragment_like(accum);  // the two partials
      auto p1 = make_fragment_like(accum);
      clear(p0);
      clear(p1);
      int held = next_block(p0);  // the stage of the partial in flight
      // One k-block: issue `next`, wait for `prev`'s wgmma, fold it, release its stage.
      const auto step = [&](auto& next, auto& prev) {
        const int stage = next_block(next);
        warpgroup_wait<1>();
        row_scales(held);  // (under the next wgmma anyway: read after the wait, as before)
        fold(prev, held, _0{});
        pipeline.consumer_release(release);
        ++release;
        held = stage;
      };
      int left = k_tile_count - 1;
      CUTLASS_PRAGMA_NO_UNROLL
      while (left >= 2) {
        step(p1, p0);
        step(p0, p1);
        left -= 2;
      }
      if (left == 1) {
        step(p1, p0);
        warpgroup_wait<0>();
        row_scales(held);
        fold(p1, held, _0{});
      } else {
        warpgroup_wait<0>();
        row_scales(held);
        fold(p0, held, _0{});
      }
    }
  }
};

}  // namespace fp8moe::kernels::cutlass_impl
