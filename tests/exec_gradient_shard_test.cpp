// SPDX-License-Identifier: Apache-2.0
// shard_of tiles a buffer (closed form against a brute-force split), and the
// in-process communicator's reduce-scatter and all-gather (shard_collective_checks.hpp)
// on groups of 1 to 5 members, also on groups split from a larger world.
#include "shard_collective_checks.hpp"

#include <dflop/exec/gradient_shard.hpp>
#include <dflop/exec/inproc_communicator.hpp>

#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

using namespace dflop;

TEST_CASE("shard_of: the members' shards tile the first n floor(c / n) elements, the rest is common", "[exec]") {
  for (int members = 1; members <= 7; ++members)
    for (std::size_t count = 0; count <= 40; ++count) {
      std::vector<int> owner(count, -1);  // -1: common
      std::size_t covered = 0;
      for (int i = 0; i < members; ++i) {
        const gradient_shard shard = shard_of(count, members, i);
        CHECK(shard.count == count);
        CHECK(shard.common_begin == shard_of(count, members, 0).common_begin);
        for (std::size_t j = shard.begin; j < shard.end; ++j) {
          CHECK(owner[j] == -1);
          owner[j] = i;
        }
        covered += shard.end - shard.begin;
      }
      // Equal shards as large as can be: fewer than `members` elements are left over.
      CHECK(count - covered < static_cast<std::size_t>(members));
      for (int i = 0; i + 1 < members; ++i)
        CHECK(shard_of(count, members, i).end - shard_of(count, members, i).begin ==
              shard_of(count, members, i + 1).end - shard_of(count, members, i + 1).begin);
      for (std::size_t j = 0; j < count; ++j) CHECK((owner[j] == -1) == (j >= covered));
    }
}

TEST_CASE("in-process reduce-scatter and all-gather equal all_reduce_sum on each member's shard", "[exec]") {
  static_assert(starts_reduce_scatter<inproc_communicator>, "the started reduce-scatter is checked too");
  // Members are threads: each collects what failed, asserted after the join.
  std::mutex mutex;
  std::vector<std::string> failures;
  const auto record = [&](std::vector<std::string> found) {
    std::lock_guard lock(mutex);
    failures.insert(failures.end(), found.begin(), found.end());
  };
  for (int members = 1; members <= 5; ++members)
    run_inproc(members, [&](inproc_communicator& comm) { record(test::shard_collective_failures(comm)); });
  // Groups of 2 and 3 split from a world of 5: each group's members only.
  run_inproc(5, [&](inproc_communicator& world) {
    inproc_communicator group = world.split(world.rank() < 2 ? 0 : 1, world.rank());
    record(test::shard_collective_failures(group));
  });
  for (const auto& failure : failures) FAIL_CHECK(failure);
  CHECK(failures.empty());
}

TEST_CASE("in-process shard collectives refuse members' buffers of different sizes", "[exec]") {
  std::mutex mutex;
  std::vector<std::string> errors;  // per member and collective, what it threw (asserted after the join)
  run_inproc(2, [&](inproc_communicator& comm) {
    std::vector<double> values(comm.rank() == 0 ? 4 : 6, 1.0);
    const gradient_buffer buffer = gradient_buffer::of(std::span<double>(values));
    for (const bool scatter : {true, false}) {
      std::string what = "nothing";
      try {
        if (scatter) comm.reduce_scatter_sum(buffer, comm.resource());
        else comm.all_gather(buffer, comm.resource());
      } catch (const error& e) {
        what = e.what();
      }
      std::lock_guard lock(mutex);
      errors.push_back(what);
    }
  });
  REQUIRE(errors.size() == 4);
  int scatter = 0, gather = 0;
  for (const auto& what : errors) {
    INFO(what);
    scatter += what.find("reduce_scatter_sum: rank") != std::string::npos;
    gather += what.find("all_gather: rank") != std::string::npos;
  }
  CHECK(scatter == 2);
  CHECK(gather == 2);
}
