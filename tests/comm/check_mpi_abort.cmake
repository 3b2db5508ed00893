# Runs mpi_probe MODE under mpirun -np 2 and checks that the job was ended by the watchdog:
# a non-zero exit, the output matching EXPECT, within MAX_SECONDS (the probe's sleeping rank
# would take 60 s). Usage (see CMakeLists.txt):
#   cmake -DMPIEXEC=mpirun -DFLAGS=--oversubscribe,--allow-run-as-root -DPROBE=mpi_probe
#         -DMODE=sleep "-DEXPECT=regex" -DMAX_SECONDS=30 -P check_mpi_abort.cmake
string(REPLACE "," ";" FLAGS "${FLAGS}")
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${MPIEXEC} -np 2 ${FLAGS} ${PROBE} ${MODE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
string(TIMESTAMP t1 "%s")
math(EXPR dt "${t1} - ${t0}")
message("---- mpirun output (exit ${rc}, ${dt} s) ----\n${out}${err}----")
if("${rc}" STREQUAL "0")
  message(FATAL_ERROR "the job exited 0: the watchdog did not end it")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match '${EXPECT}'")
endif()
if(dt GREATER MAX_SECONDS)
  message(FATAL_ERROR "the job took ${dt} s (more than ${MAX_SECONDS}): not ended by the watchdog")
endif()
message("ok: ended by the watchdog after ${dt} s")
