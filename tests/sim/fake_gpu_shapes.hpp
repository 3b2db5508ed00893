#pragma once
// The device-memory estimate's view of a case run on the GPU fake mesh (--runtime fake-gpu):
// CudaCaseShape from an op scenario or a layer config, for the suites that hold the staging arena
// against cuda_case_device_bytes() (test_cuda_fake_comm.cpp on the GPU, test_fake_gpu_staging.cpp
// on the CPU).
#include "sim/backend/cuda_backend.hpp"
#include "sim/mesh/mesh.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/runner/op_runner.hpp"

namespace fp8moe::sim {

inline CudaCaseShape fake_gpu_op_shape(const CaseSpec& sc, const Mesh& m) {
  CudaCaseShape s;
  s.pass = sc.pass;
  s.experts = sc.op_shape().E;
  s.tokens = sc.op_shape().M;
  s.n = sc.op_shape().N;
  s.k = sc.op_shape().K;
  s.world = m.world();
  s.fake_gpu = true;
  s.gemm = sc.gemm;
  return s;
}

inline CudaCaseShape fake_gpu_layer_shape(const CaseSpec& c, const Mesh& m) {
  CudaCaseShape s;
  s.layer = true;
  s.experts = c.experts;
  s.tokens = c.tokens;
  s.dim = c.dim;
  s.hidden = c.hidden;
  s.world = m.world();
  s.fake_gpu = true;
  s.gemm = c.gemm;
  return s;
}

}  // namespace fp8moe::sim
