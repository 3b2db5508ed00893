#pragma once
// The launch of processes that mpirun/srun started, as the rest of fp8moe sees it without
// including <mpi.h>: the plain fp8moe never links libmpi (the GPU machines' image may lack it),
// fp8moe-mpi links the MPI part (mpi_runtime.cpp, mpi_communicator.cpp).
//
// How the two binaries share one CLI: mpi_reexec.cpp (in fp8moe_sim) holds [[gnu::weak]]
// definitions of detail::make_mpi_runtime and detail::mpi_launch that re-execute the process as
// fp8moe-mpi (found next to /proc/self/exe, same arguments, same launcher environment);
// mpi_runtime.cpp, linked into fp8moe-mpi as object files, holds the strong ones. Object files
// given to the linker win over an archive member, and an archive member is only pulled in for a
// symbol still undefined, so fp8moe-mpi gets the MPI definitions and fp8moe the re-exec.
//
// MpiLaunch serves the MPI runtime (--runtime mpi) and the NCCL runtime's multi-process mode
// (--runtime nccl under mpirun: one GPU per process, the NCCL unique id broadcast through MPI).
// MPI is initialised once per process (MPI_THREAD_MULTIPLE) and finalised at exit. Every
// blocking MPI call is watched: one that has not returned after its timeout prints which rank
// waits in which call and ends the whole job with MPI_Abort (never a hang).
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/comm/runtime.hpp"

namespace fp8moe::sim {

class MpiLaunch {
 public:
  virtual ~MpiLaunch() = default;
  virtual int world() const = 0;
  virtual int rank() const = 0;
  // This process's index among the launch's processes on its host (for the GPU choice).
  virtual int local_rank() const = 0;
  // True when the process was started without a launcher (an MPI singleton of world 1).
  virtual bool singleton() const = 0;
  virtual const std::vector<std::string>& hosts() const = 0;  // (world) host name of each rank

  // Launch-wide, every process calls them in the same order. A call that does not return within
  // timeout_s ends the job (timeout_s <= 0: wait as long as it takes).
  virtual void barrier(const char* what, double timeout_s) = 0;
  virtual std::string broadcast(const std::string& from_root, int root, const char* what, double timeout_s) = 0;
  virtual bool any(bool local, const char* what, double timeout_s) = 0;
  virtual std::vector<std::string> all_gather(const std::string& mine, const char* what, double timeout_s) = 0;
  // The error agreement after a case's body: the lowest rank whose `error` is set and its
  // message, on every process (nullopt when no process had one). `error` travels in the
  // watchdog's message when a rank never arrives.
  virtual std::optional<std::pair<int, std::string>> first_error(const std::optional<std::string>& error,
                                                                 double timeout_s) = 0;

  // {"launch_world", "4"}, {"rank_hosts", "0:node1,1:node1,..."}, {"mpi_version", "Open MPI v4.1.4, ..."}
  virtual std::vector<std::pair<std::string, std::string>> provenance() const = 0;
};

// "0:host0,1:host0,2:host1"
std::string rank_list(const std::vector<std::string>& per_rank);

namespace detail {
// The MPI launch of this process (initialising MPI on the first call). In the plain fp8moe this
// re-executes the process as fp8moe-mpi and does not return (or throws when there is none).
std::shared_ptr<MpiLaunch> mpi_launch();
// Re-executes this process as fp8moe-mpi with the same arguments; throws saying why it cannot.
// `why` names the option that needs it ("--runtime mpi", "--runtime nccl under mpirun").
[[noreturn]] void reexec_as_mpi(const char* why);
}  // namespace detail

}  // namespace fp8moe::sim
