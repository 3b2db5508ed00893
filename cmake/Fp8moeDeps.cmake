# Dependencies, all from Debian packages or the CUDA install (scripts/setup.sh installs them).
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(HDF5 REQUIRED COMPONENTS C)
# Static Boost.Program_options: the GPU machine's image has no Boost libraries (reference/SPEC.md 15.1).
set(Boost_USE_STATIC_LIBS ON)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(doctest REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # header-only: machine-readable output (fp8moe check --format json)

# CUDA is optional: the project configures, builds and tests without it.
set(FP8MOE_HAVE_CUDA OFF)
if(FP8MOE_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90a: wgmma and setmaxnreg need the arch-specific target (HOPPER.md).
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag (nvcc 13 has it): tell it, then ask for C++20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(FP8MOE_HAVE_CUDA ON)
  endif()
endif()
# CUTLASS 4.x headers (the cuda-cutlass backend): the pinned nvidia-cutlass wheel's C++ headers,
# which scripts/setup.sh unpacks into .deps/; FP8MOE_CUTLASS_DIR points anywhere else that has
# include/cutlass and tools/util/include. Without them (or without CUDA) the backend is not built.
set(FP8MOE_CUTLASS_DIR "${PROJECT_SOURCE_DIR}/.deps/cutlass-4.2.0.0" CACHE PATH
    "CUTLASS 4.x source tree or wheel headers (include/ and tools/util/include/)")
set(FP8MOE_HAVE_CUTLASS OFF)
if(FP8MOE_HAVE_CUDA AND FP8MOE_ENABLE_CUTLASS)
  set(_cutlass_version_h "${FP8MOE_CUTLASS_DIR}/include/cutlass/version.h")
  if(EXISTS "${_cutlass_version_h}" AND EXISTS "${FP8MOE_CUTLASS_DIR}/tools/util/include/cutlass/util/packed_stride.hpp")
    file(STRINGS "${_cutlass_version_h}" _cutlass_major REGEX "#define CUTLASS_MAJOR [0-9]+")
    string(REGEX MATCH "[0-9]+" _cutlass_major "${_cutlass_major}")
    if(_cutlass_major GREATER_EQUAL 4)
      set(FP8MOE_HAVE_CUTLASS ON)
    else()
      message(STATUS "CUTLASS at ${FP8MOE_CUTLASS_DIR} is version ${_cutlass_major}.x; cuda-cutlass needs 4.x (scripts/setup.sh installs 4.2.0.0): building without it")
    endif()
  else()
    message(STATUS "CUTLASS headers not found at FP8MOE_CUTLASS_DIR=${FP8MOE_CUTLASS_DIR}: building without the cuda-cutlass backend (scripts/setup.sh fetches them; or -DFP8MOE_CUTLASS_DIR=/path/to/cutlass)")
  endif()
endif()
find_package(NCCL)

# Python 3 runs the build's SASS patch (kernels/, scripts/sass_fold_yield.py) and the script tests.
# Found once here, for every folder below.
find_package(Python3 COMPONENTS Interpreter)

# fp8moe_python_with(<out> <cache var> "<imports>" "<what>"): the first of Python3_EXECUTABLE and
# /usr/bin/python3 that imports every module of <imports> (the python3 first on PATH may be a pyenv
# build without Debian's packages, which scripts/setup.sh installs for /usr/bin/python3), kept in
# <cache var> (a user sets it to override the choice). <out> is that interpreter, or, where none
# imports them, Python3_EXECUTABLE with a status line naming <what>: the tests still run and exit 77,
# which CTest shows as Skipped.
function(fp8moe_python_with out cache_var imports what)
  if(NOT ${cache_var})
    foreach(py IN ITEMS "${Python3_EXECUTABLE}" /usr/bin/python3)
      if(NOT ${cache_var} AND py AND EXISTS "${py}")
        execute_process(COMMAND "${py}" -c "import ${imports}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
        if(rc EQUAL 0)
          set(${cache_var} "${py}" CACHE FILEPATH "python3 that imports ${imports} (${what})")
        endif()
      endif()
    endforeach()
  endif()
  if(${cache_var})
    set(${out} "${${cache_var}}" PARENT_SCOPE)
  else()
    message(STATUS "no python3 imports ${imports}: ${what} will be skipped (scripts/setup.sh)")
    set(${out} "${Python3_EXECUTABLE}" PARENT_SCOPE)
  endif()
endfunction()
