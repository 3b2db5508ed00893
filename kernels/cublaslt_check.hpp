#pragma once
// Checked cuBLASLt calls: FP8MOE_CUBLASLT_CHECK(call, context...) throws fp8moe::Error with the
// call's text, the status name, file:line and the caller's context (shapes), like
// FP8MOE_CUDA_CHECK (kernels/check.hpp).
#include <cublasLt.h>

#include "reference/error.hpp"

namespace fp8moe::kernels {

template <class... Ctx>
[[noreturn]] void cublaslt_fail(cublasStatus_t st, const char* call, const char* file, int line, const Ctx&... ctx) {
  fail("cuBLASLt error at ", file, ":", line, ": ", call, " returned ", cublasLtGetStatusName(st), " (",
       cublasLtGetStatusString(st), ")", (sizeof...(ctx) ? " [" : ""), ctx..., (sizeof...(ctx) ? "]" : ""));
}

}  // namespace fp8moe::kernels

#define FP8MOE_CUBLASLT_CHECK(call, ...)                                                                    \
  do {                                                                                                      \
    const cublasStatus_t fp8moe_st_ = (call);                                                               \
    if (fp8moe_st_ != CUBLAS_STATUS_SUCCESS) {                                                              \
      ::fp8moe::kernels::cublaslt_fail(fp8moe_st_, #call, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__);   \
    }                                                                                                       \
  } while (0)
