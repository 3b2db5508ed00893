#pragma once
// The MPI communicator (--runtime mpi): one process per rank, CPU buffers. A RankCommunicator over
// MpiTransport: the size agreement is an MPI_Allgather on the mesh's communicator (the first
// mesh.world() ranks of the launch), the data moves on one sub-communicator per group
// (MPI_Comm_create_group, cached per group vector): all_gather with MPI_Allgatherv (uneven
// sizes), all_to_all with MPI_Alltoallv on bytes (uneven splits), broadcast with MPI_Bcast. The
// reductions are rank_communicator.cpp's (contributions to the owner, reduce_chunk), never
// MPI_Reduce, whose order is unspecified.
//
// Also here, because every MPI call of fp8moe goes through them: the checked call (an error
// names the call, MPI's message, the rank and the sizes) and the watchdog that ends a job stuck
// in a call. Only fp8moe-mpi and the MPI tests compile this file (it includes <mpi.h>).
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sim/comm/rank_communicator.hpp"

namespace fp8moe::sim::mpi {

// Throws fp8moe::Error naming `call`, MPI's error string, the rank and `ctx` unless rc is
// MPI_SUCCESS (the communicators use MPI_ERRORS_RETURN).
void check(int rc, const char* call, int rank, const std::string& ctx);

// One thread that watches the blocking MPI calls of this process. While a Scope is alive, its
// call must return within timeout_s; when it does not, the watchdog prints "fp8moe-mpi: rank R
// (host): <call> did not finish within T s ..." (with the rank's pending error, if any) and ends
// the job with MPI_Abort, which mpirun turns into the end of every process. Never a hang.
class Watchdog {
 public:
  Watchdog(int rank, std::string host);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  class Scope {
   public:
    Scope(Watchdog* w, std::string what, double timeout_s, std::string pending);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog* w_;
    bool was_armed_;
    std::string what_, pending_;
    double timeout_;
    std::chrono::steady_clock::time_point start_;
  };
  // timeout_s <= 0: not watched.
  Scope watch(std::string what, double timeout_s, std::string pending = {}) {
    return Scope(timeout_s > 0 ? this : nullptr, std::move(what), timeout_s, std::move(pending));
  }

 private:
  void loop();
  int rank_;
  std::string host_;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  std::string what_, pending_;
  double timeout_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::thread thread_;
};

// The sub-communicators of one mesh communicator, per group vector (members only create them,
// so a group's members always agree whether it exists).
struct GroupComms {
  std::map<Group, MPI_Comm> comms;
};

// A communicator for `mesh` on `mesh_comm` (whose rank r is mesh rank r), this process `rank`.
std::unique_ptr<Communicator> make_mpi_communicator(const Mesh& mesh, int rank, MPI_Comm mesh_comm, GroupComms& groups,
                                                    Watchdog& watchdog, double timeout_s);

}  // namespace fp8moe::sim::mpi
