// SPDX-License-Identifier: Apache-2.0
// Checks of a communicator's shard collectives (`shards_gradients`), run by every
// member of `comm` together: on buffers of every size from 0 to 3 x members + 2
// (shards of 0 or more elements, remainders of 0 to members - 1), the
// reduce-scatter leaves this member's shard and the remainder equal, bit for bit,
// to what all_reduce_sum gives the same values, and leaves every other element
// as it was; the all-gather then gives every member each owner's shard and keeps
// the remainder. Doubles and floats.
#pragma once

#include <dflop/exec/communicator.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace dflop::test {

// Member `member`'s value of element `j` in trial `count` (distinct, not exactly summable in any order).
template <class T>
T shard_test_value(int member, std::size_t j, std::size_t count) {
  return static_cast<T>(0.1 * (member + 1) + 0.37 * static_cast<double>(j) + 1.0 / (3.0 + static_cast<double>(count)));
}

template <class T, class Communicator>
void check_shard_collectives_of(Communicator& comm) {
  const int members = comm.size();
  const int me = comm.rank();
  for (std::size_t count = 0; count <= 3 * static_cast<std::size_t>(members) + 2; ++count) {
    INFO(members << " members, " << count << " elements, member " << me);
    std::vector<T> mine(count), summed(count);
    for (std::size_t j = 0; j < count; ++j) mine[j] = summed[j] = shard_test_value<T>(me, j, count);
    const std::vector<T> before = mine;
    comm.all_reduce_sum(gradient_buffer::of(std::span<T>(summed)), comm.resource());
    comm.reduce_scatter_sum(gradient_buffer::of(std::span<T>(mine)), comm.resource());
    const gradient_shard shard = shard_of(count, members, me);
    CHECK(shard.end - shard.begin == count / static_cast<std::size_t>(members));
    CHECK(shard.common_begin == count / static_cast<std::size_t>(members) * static_cast<std::size_t>(members));
    for (std::size_t j = shard.begin; j < shard.end; ++j) CHECK(mine[j] == summed[j]);
    for (std::size_t j = shard.common_begin; j < count; ++j) CHECK(mine[j] == summed[j]);

    // All-gather: each owner's shard values (its own, distinct from the sums) reach everyone.
    std::vector<T> gathered = before;
    for (std::size_t j = shard.begin; j < shard.end; ++j) gathered[j] = -summed[j] - static_cast<T>(me);
    comm.all_gather(gradient_buffer::of(std::span<T>(gathered)), comm.resource());
    for (int owner = 0; owner < members; ++owner) {
      const gradient_shard theirs = shard_of(count, members, owner);
      for (std::size_t j = theirs.begin; j < theirs.end; ++j) CHECK(gathered[j] == -summed[j] - static_cast<T>(owner));
    }
    for (std::size_t j = shard.common_begin; j < count; ++j) CHECK(gathered[j] == before[j]);
  }
}

template <class Communicator>
  requires shards_gradients<Communicator>
void check_shard_collectives(Communicator& comm) {
  check_shard_collectives_of<double>(comm);
  check_shard_collectives_of<float>(comm);
}

}  // namespace dflop::test
