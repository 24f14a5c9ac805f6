// SPDX-License-Identifier: Apache-2.0
//! What every MPI test program shares: Catch2 run between MPI_Init and
//! MPI_Finalize (include once, from the program's one source file, before the
//! test cases), and the world's size.
#pragma once

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

namespace dflop::test {

//! Ranks in MPI_COMM_WORLD.
inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace dflop::test

//! Every rank runs every test case; the program fails when any case fails on this rank.
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int failed = Catch::Session().run(argc, argv);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
