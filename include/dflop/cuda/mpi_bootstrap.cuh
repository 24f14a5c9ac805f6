// SPDX-License-Identifier: Apache-2.0
//! \file
//! NCCL communicators from MPI, the standard way: rank 0 makes the unique id and
//! broadcasts it as bytes, each process picks its GPU by its rank among the
//! processes of its host (a host-name hash), and the communicator is created
//! inside a group call. A fault ends the MPI job after ncclCommAbort.
//! Optional: the only CUDA header that includes <mpi.h>; link MPI::MPI_CXX too.
#pragma once

#include <dflop/cuda/config.cuh>
#include <dflop/cuda/error.cuh>
#include <dflop/cuda/nccl_communicator.cuh>
#include <dflop/exec/failure.hpp>

#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! This process's rank among the processes of `comm` on the same host.
[[nodiscard]] inline int local_rank(MPI_Comm comm) {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a of the host name
  for (char c : std::string_view(name)) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(size));
  hashes[static_cast<std::size_t>(rank)] = hash;
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hashes.data(), 1, MPI_UINT64_T, comm);
  int local = 0;
  for (int r = 0; r < rank; ++r) local += hashes[static_cast<std::size_t>(r)] == hash ? 1 : 0;
  return local;
}

//! Selects this process's GPU (local rank modulo the devices) and creates the NCCL
//! communicator over `comm`'s ranks; stages run on `compute` (made on that device
//! by the caller, or 0 to create one). A fault ends the job with MPI_Abort.
[[nodiscard]] inline nccl_communicator nccl_from_mpi(MPI_Comm comm, cudaStream_t compute = nullptr,
                                                     double watchdog_seconds = default_watchdog_seconds) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int devices = 0;
  DFLOP_CUDA_TRY(cudaGetDeviceCount(&devices));
  DFLOP_CUDA_TRY(cudaSetDevice(local_rank(comm) % devices));
  if (compute == nullptr) DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  ncclUniqueId id;
  if (rank == 0) DFLOP_NCCL_TRY(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
  ncclComm_t nccl = nullptr;
  DFLOP_NCCL_TRY(ncclGroupStart());
  DFLOP_NCCL_TRY(ncclCommInitRank(&nccl, size, id, rank));
  DFLOP_NCCL_TRY(ncclGroupEnd());
  nccl_communicator result(nccl, compute, watchdog_seconds);
  result.set_abort_handler([](const std::string&) { MPI_Abort(MPI_COMM_WORLD, 1); });
  return result;
}

}  // namespace dflop
