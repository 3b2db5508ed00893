#pragma once
// Internal to reference/ (and its tests): the fast CPU path of hopper-tc on e4m3 operands
// (block_gemm_tc.cpp), a vectorised re-statement of reference/tensor_core.hpp's tc_block_partial,
// promote and split-K runs, bitwise equal to block_gemm_scalar (tests/reference/test_block_gemm_tc.cpp).
#include <cstddef>
#include <span>
#include <vector>

#include "reference/gemm.hpp"

namespace fp8moe {

// The largest block the fast path takes: its exactness argument bounds a block partial by
// B * 448^2 < 2^26 (block_gemm_tc.cpp).
constexpr int kTcFastMaxBlock = 256;

// Which micro-kernel: best = AVX-512 where the CPU has it, else AVX2 (the binary's baseline,
// x86-64-v3). Tests force each one; asking for avx512 on a CPU without it is an error.
enum class TcIsa : std::uint8_t { best, avx2, avx512 };
bool tc_have_avx512();

// hopper-tc (opt.mode, opt.promotion, opt.out; opt.quant.block a multiple of 32 up to
// kTcFastMaxBlock) of every task, with its cuBLASLt split-K runs (GemmTask::splits). Operands must
// be e4m3. Returns the tasks it did not compute, leaving their outputs untouched, for the caller
// to run on the scalar path: those whose operands hold a NaN code (e4m3 has no Inf; the scalar
// path propagates NaN as tensor_core.hpp's tc_step defines), or every task in a build without AVX2.
std::vector<std::size_t> block_gemm_tc(std::span<const GemmTask> tasks, const GemmOptions& opt,
                                       TcIsa isa = TcIsa::best);

}  // namespace fp8moe
