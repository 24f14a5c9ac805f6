# SPDX-License-Identifier: Apache-2.0
# Dependencies, package first: FIND_PACKAGE_ARGS makes FetchContent use an installed
# package (Debian's) and fetch only where none is found, so offline machines work.
find_package(Threads REQUIRED)

FetchContent_Declare(nlohmann_json
  GIT_REPOSITORY https://github.com/nlohmann/json.git GIT_TAG v3.11.2
  FIND_PACKAGE_ARGS 3.11 CONFIG)
FetchContent_MakeAvailable(nlohmann_json)

if(DFLOP_BUILD_TOOLS OR DFLOP_BUILD_EXAMPLES OR DFLOP_BUILD_TESTS OR DFLOP_BUILD_BENCHMARKS)
  FetchContent_Declare(CLI11
    GIT_REPOSITORY https://github.com/CLIUtils/CLI11.git GIT_TAG v2.3.2
    FIND_PACKAGE_ARGS 2 CONFIG)
  FetchContent_Declare(range-v3
    GIT_REPOSITORY https://github.com/ericniebler/range-v3.git GIT_TAG 0.12.0
    FIND_PACKAGE_ARGS CONFIG)
  FetchContent_MakeAvailable(CLI11 range-v3)
endif()

if(DFLOP_BUILD_TESTS)
  FetchContent_Declare(Catch2
    GIT_REPOSITORY https://github.com/catchorg/Catch2.git GIT_TAG v2.13.10
    FIND_PACKAGE_ARGS 2 CONFIG)
  FetchContent_MakeAvailable(Catch2)
  # Catch.cmake (catch_discover_tests) lives beside the package config or in the fetched tree.
  if(Catch2_DIR)
    list(APPEND CMAKE_MODULE_PATH "${Catch2_DIR}")
  elseif(catch2_SOURCE_DIR)
    list(APPEND CMAKE_MODULE_PATH "${catch2_SOURCE_DIR}/contrib")
  endif()
  find_package(MPI QUIET COMPONENTS CXX)
endif()

if(DFLOP_BUILD_BENCHMARKS)
  set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
  FetchContent_Declare(benchmark
    GIT_REPOSITORY https://github.com/google/benchmark.git GIT_TAG v1.7.1
    FIND_PACKAGE_ARGS 1.7 CONFIG)
  FetchContent_MakeAvailable(benchmark)
endif()
