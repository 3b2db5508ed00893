#pragma once
// How a case's ranks run (`--mesh` of fp8moe sweep/run): the kinds of mesh runtime.
//
//   fake      every rank in this process, on the CPU (FakeCommunicator)
//   fake-gpu  every rank in this process, collectives as device copies and deterministic
//             reductions on one GPU (issue 5)
//   mpi       one process per rank under mpirun/srun, CPU buffers (MpiCommunicator, issue 7);
//             the MPI part is an optional plugin so the CLI never needs libmpi to start
//   nccl      one GPU per rank: one process per rank under mpirun (NCCL id shared through MPI), or
//             one process with one thread per GPU without a launcher (issue 7)
//
// A runtime spans the whole sweep (MPI is initialised once); a case asks it to `run` the case's
// SPMD body on the case's mesh. Ranks of the launch beyond the mesh's world sit the case out.
// Only the root process (rank 0 of the launch) writes results; every process runs every case.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sim/comm/communicator.hpp"
#include "sim/mesh/mesh.hpp"

namespace fp8moe::sim {

enum class MeshKind : std::uint8_t { fake, fake_gpu, mpi, nccl };
const char* mesh_kind_name(MeshKind k);
// "fake", "fake-gpu", "mpi", "nccl"; anything else throws naming the allowed values.
MeshKind parse_mesh_kind(const std::string& s);
std::vector<std::string> mesh_kind_names();

struct RuntimeOptions {
  double timeout_s = 600;  // a collective that does not finish within this ends the run (nccl, mpi)
};

class MeshRuntime {
 public:
  virtual ~MeshRuntime() = default;
  virtual MeshKind kind() const = 0;
  // Ranks of the launch (1 for the fake kinds and for nccl's thread mode, which has one process)
  // and this process's rank in it.
  virtual int launch_world() const = 0;
  virtual int launch_rank() const = 0;
  bool is_root() const { return launch_rank() == 0; }

  // Why this launch cannot run a case on `mesh` (e.g. "mesh dp=2,tp=2 needs 4 ranks but mpirun
  // started 2"), or "" when it can. Asked for every case before the sweep starts.
  virtual std::string cannot_run(const Mesh& mesh) const = 0;

  // Runs `body` for one case on `mesh`: once per rank-set this process drives, each call with a
  // communicator for the mesh (the fake kinds: one call holding every rank; mpi: one call on the
  // first mesh.world() processes, none on the others; nccl threads: one call per GPU thread, in
  // parallel). Returns when every call has returned. An exception on any rank ends the case on
  // every rank (the others' collectives are aborted, never left hanging) and is rethrown here,
  // on every process, with the rank that raised it in the message.
  virtual void run(const Mesh& mesh, const std::function<void(Communicator&)>& body) = 0;

  // Launch-wide helpers for the sweep driver (no-ops on one process): every process waits;
  // the root's value reaches every process; did any process see `local` true.
  virtual void barrier() = 0;
  virtual std::string broadcast(const std::string& from_root) = 0;
  virtual bool any(bool local) = 0;

  // Provenance written by the root as HDF5 root attributes: world size, hosts and devices per
  // rank, library versions (e.g. {"mesh_runtime","mpi"}, {"launch_world","4"},
  // {"rank_hosts","0:node1,1:node1,..."}, {"mpi_version","Open MPI v4.1.4"}, {"nccl_version",...}).
  virtual std::vector<std::pair<std::string, std::string>> provenance() const = 0;
};

// The runtime of `kind`. Throws with the reason (and the fix) when it is not available: a build
// without CUDA for fake-gpu/nccl, the MPI plugin missing, or --runtime mpi started without a
// launcher on a multi-rank mesh.
std::unique_ptr<MeshRuntime> make_mesh_runtime(MeshKind kind, const RuntimeOptions& opt = {});

// True when this process was started by a launcher (mpirun/srun: OMPI_COMM_WORLD_SIZE,
// PMI_SIZE, PMIX_RANK, SLURM_NTASKS > 1 ...) with more than one rank. A launch of several copies
// of fp8moe without --runtime mpi|nccl is refused (it would run N independent copies).
bool launched_with_ranks();

// main() records its arguments so that a runtime can re-execute the process (the plain fp8moe
// hands --runtime mpi over to fp8moe-mpi, the same CLI linked with MPI, next to it).
void remember_argv(int argc, char** argv);
const std::vector<std::string>& process_argv();

}  // namespace fp8moe::sim
