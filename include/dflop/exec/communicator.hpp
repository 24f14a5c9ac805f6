// SPDX-License-Identifier: Apache-2.0
//! \file
//! The `communicator` concept: how the executor moves activations and gradients
//! between ranks and reduces gradients over data-parallel groups. Three models
//! ship: `inproc_communicator` (threads), `mpi_communicator` (processes, host
//! memory) and `nccl_communicator` (CUDA memory, in dflop/cuda/).
//!
//! Semantics the executor relies on:
//! - `send(peer, tag, bytes, resource)` / `receive(peer, tag, bytes, resource)`
//!   start a transfer and return a request; the receive's size is known in advance
//!   (no shape handshake) and a size mismatch is an error. A send is ordered after
//!   the work already issued on `resource`.
//! - `wait(request, resource)` makes `resource` wait for the transfer: host models
//!   block the thread; device models order the stream (no host synchronization).
//!   `test(request)` says whether it has finished, without waiting.
//! - Every wait gives up after the watchdog (`set_watchdog`), throwing
//!   `watchdog_timeout`; after `abort(failure)` on any rank, waits everywhere
//!   throw `pipeline_aborted` (threads) or the job ends (MPI, NCCL + MPI);
//!   `failure` is the original exception, so in-process runs can rethrow it.
//! - `split(color, key)` is MPI_Comm_split; `all_reduce_sum` sums a gradient
//!   buffer in place over all ranks, in an order that does not depend on timing.
//! - `allocate` / `deallocate` give memory the communicator can move.
//! - Optionally (`shards_gradients`), `reduce_scatter_sum` and `all_gather` split a
//!   buffer over the members as `shard_of` says (the distributed optimizer's sum
//!   of each member's shard, and the gather of the updated shards), and
//!   (`starts_reduce_scatter`) `reduce_scatter_sum_start` starts the former.
#pragma once

#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/gradient_shard.hpp>

#include <concepts>
#include <cstddef>
#include <exception>
#include <span>

namespace dflop {

//! A communicator model (see the file comment for the semantics).
template <class C>
concept communicator = std::movable<C> && requires(C& comm, const C& const_comm, int peer, int tag,
                                                   std::span<const std::byte> out, std::span<std::byte> in,
                                                   typename C::request& request, gradient_buffer gradient,
                                                   std::exception_ptr failure, std::size_t bytes, std::byte* pointer,
                                                   double seconds, typename C::resource_type resource) {
  typename C::request;
  typename C::resource_type;
  { const_comm.rank() } -> std::same_as<int>;
  { const_comm.size() } -> std::same_as<int>;
  { const_comm.max_tag() } -> std::same_as<int>;
  { comm.resource() } -> std::same_as<typename C::resource_type>;
  { comm.send(peer, tag, out, resource) } -> std::same_as<typename C::request>;
  { comm.receive(peer, tag, in, resource) } -> std::same_as<typename C::request>;
  { comm.test(request) } -> std::same_as<bool>;
  comm.wait(request, resource);
  comm.all_reduce_sum(gradient, resource);
  { comm.all_reduce_value(seconds) } -> std::same_as<double>;
  { comm.split(peer, tag) } -> std::same_as<C>;
  comm.abort(failure);
  comm.set_watchdog(seconds);
  { comm.allocate(bytes) } -> std::same_as<std::byte*>;
  comm.deallocate(pointer, bytes);
};

//! Whether `C` can start a gradient sum and return at once (`all_reduce_sum_start`,
//! completed by `wait`): what overlapping the data-parallel reduction with the
//! last backward needs. The buffer stays untouched until the wait; every member
//! starts the same sums in the same order. Models without it sum at the step's end.
template <class C>
concept starts_all_reduce = communicator<C> && requires(C& comm, gradient_buffer gradient,
                                                        typename C::resource_type resource) {
  { comm.all_reduce_sum_start(gradient, resource) } -> std::same_as<typename C::request>;
};

//! Whether `C` can split a gradient buffer over its members (exec/gradient_shard.hpp):
//! after `reduce_scatter_sum(buffer, resource)` this member's shard and the common
//! remainder (`shard_of(buffer.count, size(), rank())`) hold the sum over the
//! members, in an order that does not depend on timing, and the rest of the buffer
//! is unspecified; after `all_gather(buffer, resource)` each member's shard holds
//! that member's values everywhere (the remainder is left as it is). Together they
//! cost what one all-reduce does, and the gather can wait for the next step.
template <class C>
concept shards_gradients = communicator<C> && requires(C& comm, gradient_buffer gradient,
                                                       typename C::resource_type resource) {
  { comm.reduce_scatter_sum(gradient, resource) } -> std::same_as<void>;
  { comm.all_gather(gradient, resource) } -> std::same_as<void>;
};

//! Whether `C` can start a reduce-scatter and return at once
//! (`reduce_scatter_sum_start`, completed by `wait`): what overlapping the
//! distributed optimizer's reduction with the last backward needs. After the wait
//! the buffer holds what `reduce_scatter_sum` leaves; until then it stays
//! untouched by the caller. Every member starts the same ones in the same order.
template <class C>
concept starts_reduce_scatter = shards_gradients<C> && requires(C& comm, gradient_buffer gradient,
                                                                typename C::resource_type resource) {
  { comm.reduce_scatter_sum_start(gradient, resource) } -> std::same_as<typename C::request>;
};

//! Whether `C` matches messages between two ranks in posting order instead of by
//! tag (NCCL): the executor then posts every receive in its sender's send order.
template <class C>
inline constexpr bool matches_in_order = requires { requires C::matches_in_order; };

}  // namespace dflop
