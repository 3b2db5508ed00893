// Failure paths of the MPI runtime that end (or refuse) a job, driven by check_mpi_abort.cmake:
//   mpi_probe sleep     under mpirun -np 2, timeout 1 s: rank 1 sleeps 60 s before an all_gather
//                       that rank 0 waits in; rank 0's watchdog must end the job within seconds,
//                       naming rank 0 and the all_gather.
//   mpi_probe throw     under mpirun -np 2: rank 1 raises an error only it sees while rank 0
//                       waits in an all_gather; the job must end, the message carrying the error.
//   mpi_probe singleton without mpirun: --runtime mpi on a mesh of 2 ranks must be refused with a
//                       message naming mpirun (exit 0 when it is, 1 otherwise).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "reference/error.hpp"
#include "sim/comm/runtime.hpp"

using namespace fp8moe;
using namespace fp8moe::sim;

int main(int argc, char** argv) {
  remember_argv(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  RuntimeOptions opt;
  opt.timeout_s = 1;
  try {
    auto rt = make_mesh_runtime(MeshKind::mpi, opt);
    const int me = rt->launch_rank();
    if (mode == "singleton") {
      const std::string why = rt->cannot_run(Mesh::parse("tp=2"));
      std::printf("cannot_run: %s\n", why.c_str());
      std::string thrown;
      try {
        rt->run(Mesh::parse("tp=2"), [](Communicator&) {});
      } catch (const Error& e) {
        thrown = e.what();
      }
      const bool ok = rt->launch_world() == 1 && why.find("mpirun -np 2") != std::string::npos &&
                      why.find("without a launcher") != std::string::npos && thrown == why;
      std::printf("%s\n", ok ? "singleton refused as expected" : "UNEXPECTED");
      return ok ? 0 : 1;
    }
    if (mode != "sleep" && mode != "throw") {
      std::fprintf(stderr, "usage: mpi_probe sleep|throw|singleton\n");
      return 2;
    }
    rt->run(Mesh::parse("tp=2"), [&](Communicator& comm) {
      if (me == 1) {
        if (mode == "throw") fail("boom: an error only rank 1 sees");
        std::this_thread::sleep_for(std::chrono::seconds(60));
      } else if (mode == "throw") {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1's agreement times out first
      }
      std::vector<std::byte> s(4), r(8);
      std::vector<ConstBytes> send(2);
      std::vector<Bytes> recv(2);
      send[static_cast<std::size_t>(me)] = s;
      recv[static_cast<std::size_t>(me)] = r;
      comm.all_gather({0, 1}, send, recv);
    });
    std::printf("rank %d: the case returned: the watchdog did not end the job\n", me);
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 0;  // an exception is not the abort the checker wants either: it checks the output
  }
}
