# MPI for fp8moe-mpi and the MPI tests: Open MPI from Debian's packages (libopenmpi-dev,
# openmpi-bin; scripts/setup.sh installs them). Optional: without it the plain fp8moe builds
# as before, fp8moe-mpi is not built and the MPI tests report why they are skipped.
#   FP8MOE_HAVE_MPI     ON when the MPI C library was found
#   MPI::MPI_C          the imported target (made global, so tests/ can link it)
#   MPIEXEC_EXECUTABLE  mpirun, for ctest
#   FP8MOE_MPIEXEC_VERSION  the first line of `mpiexec --version` ("mpiexec (Open MPI) 4.1.4")
# Included from sim/CMakeLists.txt and tests/comm/CMakeLists.txt; the second include reuses the
# first one's result.
option(FP8MOE_ENABLE_MPI "Build fp8moe-mpi and the MPI tests when MPI is found" ON)
if(FP8MOE_ENABLE_MPI AND NOT TARGET MPI::MPI_C)
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND AND TARGET MPI::MPI_C)
    set_target_properties(MPI::MPI_C PROPERTIES IMPORTED_GLOBAL TRUE)
    if(MPIEXEC_EXECUTABLE AND NOT FP8MOE_MPIEXEC_VERSION)
      execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _v ERROR_QUIET TIMEOUT 30)
      string(REGEX REPLACE "\n.*" "" _v "${_v}")
      set(FP8MOE_MPIEXEC_VERSION "${_v}" CACHE INTERNAL "first line of mpiexec --version")
    endif()
    message(STATUS "MPI ${MPI_C_VERSION}: ${FP8MOE_MPIEXEC_VERSION} (${MPIEXEC_EXECUTABLE}): building fp8moe-mpi")
  else()
    message(STATUS "MPI not found (apt-get install libopenmpi-dev openmpi-bin): no fp8moe-mpi, MPI tests skipped")
  endif()
endif()
if(TARGET MPI::MPI_C)
  set(FP8MOE_HAVE_MPI ON)
else()
  set(FP8MOE_HAVE_MPI OFF)
endif()
