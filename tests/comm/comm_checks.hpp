#pragma once
// Checks of a real communicator (one rank per process or thread) against the FakeCommunicator,
// shared by the MPI and NCCL suites. Each runs inside the runtime's body on every rank, computes
// the fake mesh's answer for all ranks on the same data, and notes every difference (bitwise,
// buffers and CommStats) with the seed, mesh, group and element in a CheckLog; the suite asserts
// on the log afterwards (so no doctest assertion runs on a worker thread).
#include <cstdint>
#include <string>
#include <vector>

#include "sim/comm/communicator.hpp"

namespace fp8moe::test {

struct CheckLog {
  std::vector<std::string> problems;
  int calls = 0;            // collective calls compared
  int order_sensitive = 0;  // reductions whose ascending and ring results differ (the data can tell)
  void bad(std::string s) { problems.push_back(std::move(s)); }
  void merge(const CheckLog& o);
  std::string summary() const;  // the first problems, one a line
};

// Every collective on every group of every dim of comm.mesh() (and on the whole mesh as one
// group): uneven all_gather and all_to_all (empty pieces too), broadcast from every root,
// reduce_scatter and all_reduce in both orders and both dtypes with uneven counts, on random data
// from `seed`. Buffers of non-local ranks are empty spans, as the SPMD code passes them.
void check_collectives(sim::Communicator& comm, std::uint64_t seed, CheckLog& log);

// A size mismatch on one rank is an Error on every rank, with the fake's message, and the
// communicator still works afterwards.
void check_size_errors(sim::Communicator& comm, CheckLog& log);

// A device-memory variant (NCCL): the same all_gather / all_to_all / all_reduce with the local
// buffers in `alloc`ated memory; `to_host`/`from_host` move bytes. Used by the NCCL suite.
struct DeviceMemory {
  void* (*alloc)(std::size_t) = nullptr;
  void (*release)(void*) = nullptr;
  void (*to_device)(void* dst, const void* src, std::size_t n) = nullptr;
  void (*to_host)(void* dst, const void* src, std::size_t n) = nullptr;
};
void check_device_buffers(sim::Communicator& comm, std::uint64_t seed, const DeviceMemory& mem, CheckLog& log);

// run_op with Partial outputs (and redistributions) through `comm` equals the fake mesh's run bitwise
// (outputs, report, comm bytes), for op scenarios that fit comm.mesh().
void check_op_runs(sim::Communicator& comm, std::uint64_t seed, CheckLog& log);

// run_layer for `plan` on comm.mesh() through `comm` equals the fake mesh's run bitwise (every
// output, every TensorReport, comm bytes).
void check_layer_run(sim::Communicator& comm, const std::string& plan, std::uint64_t seed, CheckLog& log);

}  // namespace fp8moe::test
