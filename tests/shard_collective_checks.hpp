// SPDX-License-Identifier: Apache-2.0
// Checks of a communicator's shard collectives (`shards_gradients`), run by every
// member of `comm` together: on buffers of every size from 0 to 3 x members + 2
// (shards of 0 or more elements, remainders of 0 to members - 1), the
// reduce-scatter leaves this member's shard and the remainder equal, bit for bit,
// to what all_reduce_sum gives the same values; the all-gather then gives every
// member each owner's shard and keeps the remainder. Where the communicator
// starts reduce-scatters (`starts_reduce_scatter`), two started at once leave the
// same values. Doubles and floats.
// Returns what failed, in words, instead of asserting: Catch's assertions are
// not thread-safe, and in-process members are threads (assert after the join).
#pragma once

#include <dflop/exec/communicator.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace dflop::test {

// Member `member`'s value of element `j` in trial `count` (distinct, not exactly summable in any order).
template <class T>
T shard_test_value(int member, std::size_t j, std::size_t count) {
  return static_cast<T>(0.1 * (member + 1) + 0.37 * static_cast<double>(j) + 1.0 / (3.0 + static_cast<double>(count)));
}

template <class T, class Communicator>
void check_shard_collectives_of(Communicator& comm, std::vector<std::string>& failures) {
  const int members = comm.size();
  const int me = comm.rank();
  for (std::size_t count = 0; count <= 3 * static_cast<std::size_t>(members) + 2; ++count) {
    const auto fail = [&](const std::string& what, std::size_t j) {
      failures.push_back(std::to_string(members) + " members, " + std::to_string(count) + " elements (" +
                         (sizeof(T) == 8 ? "double" : "float") + "), member " + std::to_string(me) + ": " + what +
                         " at element " + std::to_string(j));
    };
    std::vector<T> mine(count), summed(count);
    for (std::size_t j = 0; j < count; ++j) mine[j] = summed[j] = shard_test_value<T>(me, j, count);
    const std::vector<T> before = mine;
    comm.all_reduce_sum(gradient_buffer::of(std::span<T>(summed)), comm.resource());
    comm.reduce_scatter_sum(gradient_buffer::of(std::span<T>(mine)), comm.resource());
    const gradient_shard shard = shard_of(count, members, me);
    if (shard.end - shard.begin != count / static_cast<std::size_t>(members)) fail("shard size", shard.begin);
    for (std::size_t j = shard.begin; j < shard.end; ++j)
      if (mine[j] != summed[j]) fail("reduce-scatter differs from the all-reduce in the shard", j);
    for (std::size_t j = shard.common_begin; j < count; ++j)
      if (mine[j] != summed[j]) fail("reduce-scatter differs from the all-reduce in the remainder", j);
    if constexpr (starts_reduce_scatter<Communicator>) {
      // Two started at once and waited for in reverse order: each leaves what the blocking one does.
      std::vector<T> first = before, second = before;
      auto first_request = comm.reduce_scatter_sum_start(gradient_buffer::of(std::span<T>(first)), comm.resource());
      auto second_request = comm.reduce_scatter_sum_start(gradient_buffer::of(std::span<T>(second)), comm.resource());
      comm.wait(second_request, comm.resource());
      comm.wait(first_request, comm.resource());
      for (const std::vector<T>* started : {&first, &second}) {
        for (std::size_t j = shard.begin; j < shard.end; ++j)
          if ((*started)[j] != summed[j]) fail("started reduce-scatter differs from the all-reduce in the shard", j);
        for (std::size_t j = shard.common_begin; j < count; ++j)
          if ((*started)[j] != summed[j]) fail("started reduce-scatter differs from the all-reduce in the remainder", j);
      }
    }

    // All-gather: each owner's shard values (its own, distinct from the sums) reach everyone.
    std::vector<T> gathered = before;
    for (std::size_t j = shard.begin; j < shard.end; ++j) gathered[j] = -summed[j] - static_cast<T>(me);
    comm.all_gather(gradient_buffer::of(std::span<T>(gathered)), comm.resource());
    for (int owner = 0; owner < members; ++owner) {
      const gradient_shard theirs = shard_of(count, members, owner);
      for (std::size_t j = theirs.begin; j < theirs.end; ++j)
        if (gathered[j] != -summed[j] - static_cast<T>(owner)) fail("all-gather lost member " + std::to_string(owner) + "'s shard", j);
    }
    for (std::size_t j = shard.common_begin; j < count; ++j)
      if (gathered[j] != before[j]) fail("all-gather changed the remainder", j);
  }
}

//! Every check for doubles and floats; what failed, in words (empty: all passed).
template <class Communicator>
  requires shards_gradients<Communicator>
std::vector<std::string> shard_collective_failures(Communicator& comm) {
  std::vector<std::string> failures;
  check_shard_collectives_of<double>(comm, failures);
  check_shard_collectives_of<float>(comm, failures);
  return failures;
}

}  // namespace dflop::test
