# SPDX-License-Identifier: Apache-2.0
# dflop::cuda exists only where nvcc does: planning code never needs it.
include(CheckLanguage)
check_language(CUDA)
set(dflop_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(dflop_cuda_default ON)
endif()
option(DFLOP_ENABLE_CUDA "Build dflop::cuda (CUDA + NCCL executor parts)" ${dflop_cuda_default})

if(DFLOP_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "DFLOP_ENABLE_CUDA is ON but no CUDA compiler was found; "
                        "set CMAKE_CUDA_COMPILER or turn DFLOP_ENABLE_CUDA off.")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)   # Hopper; never "native": build machines have no GPU
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc 13's C++20 flag spelling.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  find_package(CUDAToolkit REQUIRED)
  find_package(NCCL REQUIRED)

  add_library(dflop_cuda INTERFACE)
  add_library(dflop::cuda ALIAS dflop_cuda)
  set_target_properties(dflop_cuda PROPERTIES EXPORT_NAME cuda)
  target_link_libraries(dflop_cuda INTERFACE dflop CUDA::cudart NCCL::nccl)
  # CMake 3.25 has no cuda_std_20 feature for nvcc 13, so the flag is spelled out.
  target_compile_options(dflop_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --extended-lambda>)
  file(GLOB_RECURSE dflop_cuda_headers CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/include/dflop/cuda/*.cuh")
  target_sources(dflop_cuda INTERFACE
    FILE_SET HEADERS BASE_DIRS "${CMAKE_CURRENT_SOURCE_DIR}/include" FILES ${dflop_cuda_headers})
endif()
