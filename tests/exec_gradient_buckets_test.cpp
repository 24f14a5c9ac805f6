// SPDX-License-Identifier: Apache-2.0
// gradient_buckets: on random unit layouts, the buckets tile the gradient memory
// in the order the units finish, each the shortest run of units that reaches the
// size (brute force: every shorter run is under it), and a last op says each
// bucket once, in order, after its last unit; other ops say nothing.
#include <dflop/exec/gradient_buckets.hpp>

#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <vector>

using namespace dflop;

namespace {

// Records what a stage's op says final.
struct recording_context {
  bool final_gradients = false;
  std::vector<gradient_buffer>* said = nullptr;
  void gradients_ready(const gradient_buffer& buffer) const { said->push_back(buffer); }
};

// Units of the given sizes laid out last first in memory (as a stage's layers
// finish: the last layer, at the top, first).
std::vector<gradient_unit> descending_units(const std::vector<std::size_t>& sizes) {
  std::size_t total = 0;
  for (std::size_t size : sizes) total += size;
  std::vector<gradient_unit> units;
  std::size_t end = total;
  for (std::size_t size : sizes) {
    units.push_back({end - size, end});
    end -= size;
  }
  return units;
}

}  // namespace

TEST_CASE("gradient buckets tile the memory in finishing order, each the shortest run reaching the size", "[exec]") {
  std::mt19937_64 random(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::size_t> sizes(1 + random() % 9);
    for (auto& size : sizes) size = 1 + random() % 50;
    std::size_t total = 0;
    for (std::size_t size : sizes) total += size;
    std::vector<double> memory(total);
    const gradient_buffer whole = gradient_buffer::of(std::span<double>(memory));
    const auto units = descending_units(sizes);
    const double bucket_bytes = static_cast<double>(8 * (1 + random() % 120));
    const gradient_buckets buckets(whole, units, bucket_bytes);
    INFO("trial " << trial << ", bucket " << bucket_bytes << " bytes, " << sizes.size() << " units");
    REQUIRE(buckets.overlapped());

    // Tiling: bucket i ends where bucket i - 1 begins; the first ends at the top, the last begins at 0.
    const auto buffers = buckets.buffers();
    REQUIRE(!buffers.empty());
    const double* top = memory.data() + total;
    std::size_t unit = 0;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const auto* begin = static_cast<double*>(buffers[i].data);
      CHECK(begin + buffers[i].count == top);
      top = begin;
      // The units this bucket holds: the shortest run from `unit` whose bytes reach the size.
      std::size_t elements = 0, run = 0;
      while (unit + run < sizes.size() && static_cast<double>(elements * 8) < bucket_bytes) elements += sizes[unit + run++];
      CHECK(buffers[i].count == elements);
      if (i + 1 < buffers.size()) CHECK(static_cast<double>(buffers[i].bytes()) >= bucket_bytes);
      unit += run;
    }
    CHECK(top == memory.data());
    CHECK(unit == sizes.size());

    // A last op that reaches every unit says each bucket once, in order; one that
    // reaches only some says the rest at its end; other ops say nothing.
    gradient_buckets stage = buckets;
    for (const std::size_t reached : {sizes.size(), sizes.size() / 2}) {
      std::vector<gradient_buffer> said;
      recording_context last{true, &said};
      stage.begin_op();
      for (std::size_t u = 0; u < reached; ++u) stage.unit_done(last);
      std::size_t said_so_far = said.size();
      stage.rest_done(last);
      REQUIRE(said.size() == buffers.size());
      for (std::size_t i = 0; i < said.size(); ++i) CHECK(said[i].data == buffers[i].data);
      if (reached == sizes.size()) CHECK(said_so_far == buffers.size());
      recording_context earlier{false, &said};
      said.clear();
      stage.begin_op();
      for (std::size_t u = 0; u < sizes.size(); ++u) stage.unit_done(earlier);
      stage.rest_done(earlier);
      CHECK(said.empty());
    }
  }
}

TEST_CASE("gradient buckets without a size are the whole buffer, never said final", "[exec]") {
  std::vector<double> memory(10);
  const gradient_buffer whole = gradient_buffer::of(std::span<double>(memory));
  const auto units = descending_units({4, 6});
  gradient_buckets buckets(whole, units, 0);
  CHECK_FALSE(buckets.overlapped());
  REQUIRE(buckets.buffers().size() == 1);
  CHECK(buckets.buffers()[0].data == memory.data());
  CHECK(buckets.buffers()[0].count == 10);
  std::vector<gradient_buffer> said;
  recording_context last{true, &said};
  buckets.begin_op();
  buckets.unit_done(last);
  buckets.rest_done(last);
  CHECK(said.empty());
}

TEST_CASE("gradient buckets refuse a bad size and units that are not adjacent ranges", "[exec]") {
  std::vector<float> memory(10);
  const gradient_buffer whole = gradient_buffer::of(std::span<float>(memory));
  const auto units = descending_units({4, 6});
  CHECK_THROWS_WITH(gradient_buckets(whole, units, -1), Catch::Contains("finite and >= 0"));
  CHECK_THROWS_WITH(gradient_buckets(whole, units, std::numeric_limits<double>::infinity()),
                    Catch::Contains("finite and >= 0"));
  const std::vector<gradient_unit> outside{{8, 12}};
  CHECK_THROWS_WITH(gradient_buckets(whole, outside, 4), Catch::Contains("not a range of the 10"));
  const std::vector<gradient_unit> gap{{6, 10}, {0, 4}};
  CHECK_THROWS_WITH(gradient_buckets(whole, gap, 4), Catch::Contains("not adjacent"));
  // Float elements: 4 bytes each, so 16 bytes is 4 elements, one unit per bucket here.
  const std::vector<gradient_unit> two{{6, 10}, {0, 6}};
  const gradient_buckets floats(whole, two, 16);
  REQUIRE(floats.buffers().size() == 2);
  CHECK(floats.buffers()[0].data == memory.data() + 6);
  CHECK(floats.buffers()[1].count == 6);
}
