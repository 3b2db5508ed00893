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
find_package(NCCL)
