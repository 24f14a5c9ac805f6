// SPDX-License-Identifier: Apache-2.0
#include <dflop/workload/sampling.hpp>
#include <dflop/workload/streaming_sampling.hpp>
#include <dflop/workload/trace.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using dflop::batch_mode;
using dflop::modality;
using dflop::sample;

namespace {

std::vector<sample> numbered_workload(std::size_t count) {
  std::vector<sample> samples;
  for (std::size_t i = 0; i < count; ++i) {
    std::string id = "s";
    id.append(std::to_string(i));  // append: GCC 12 -O3 warns falsely (-Wrestrict) on "s" + to_string(i)
    samples.push_back({std::move(id), modality::text, 0, 0, static_cast<std::int64_t>(i + 1)});
  }
  return samples;
}

std::set<std::string> ids_of(const std::vector<sample>& batch) {
  std::set<std::string> ids;
  for (const auto& s : batch) ids.insert(s.id);
  return ids;
}

std::string trace_of(const std::vector<sample>& samples) {
  std::ostringstream out;
  dflop::write_trace(out, samples);
  return out.str();
}

}  // namespace

TEST_CASE("the same seed gives the same batches, a different seed different ones", "[workload]") {
  const auto workload = numbered_workload(500);
  for (batch_mode mode : {batch_mode::with_replacement, batch_mode::without_replacement, batch_mode::epochs}) {
    INFO(dflop::to_string(mode));
    const auto first = dflop::sample_batches(workload, 64, 10, mode, 1);
    CHECK(first == dflop::sample_batches(workload, 64, 10, mode, 1));
    CHECK(first != dflop::sample_batches(workload, 64, 10, mode, 2));
    REQUIRE(first.size() == 10);
    for (const auto& batch : first) CHECK(batch.size() == 64);
    CHECK(dflop::sample_batch(workload, 64, mode, 9) == dflop::sample_batch(workload, 64, mode, 9));
  }
}

TEST_CASE("without replacement, no sample repeats within a batch; epochs repeat none until all are used",
          "[workload]") {
  const auto workload = numbered_workload(100);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    for (const auto& batch : dflop::sample_batches(workload, 100, 3, batch_mode::without_replacement, seed))
      CHECK(ids_of(batch).size() == 100);  // a full-size batch is a permutation
    for (const auto& batch : dflop::sample_batches(workload, 37, 5, batch_mode::without_replacement, seed))
      CHECK(ids_of(batch).size() == 37);
  }
  // Epochs of 100 samples in batches of 30: 3 batches per epoch (10 skipped), then a reshuffle.
  dflop::batch_sampler sampler(100, 30, batch_mode::epochs, 5);
  for (int epoch = 1; epoch <= 4; ++epoch) {
    std::set<std::size_t> seen;
    for (int batch = 0; batch < 3; ++batch) {
      for (std::size_t index : sampler.next()) CHECK(seen.insert(index).second);
      CHECK(sampler.epoch() == static_cast<std::size_t>(epoch));
    }
    CHECK(seen.size() == 90);
  }
}

TEST_CASE("with replacement draws every index about equally often", "[workload]") {
  dflop::batch_sampler sampler(50, 100, batch_mode::with_replacement, 3);
  std::vector<int> hits(50, 0);
  for (int batch = 0; batch < 100; ++batch)
    for (std::size_t index : sampler.next()) ++hits[index];
  // 10000 draws over 50 indices: expect 200 each, standard deviation ~14.
  for (int count : hits) CHECK((count > 130 && count < 270));
}

TEST_CASE("batch requests a workload cannot serve are rejected clearly", "[workload]") {
  const auto workload = numbered_workload(10);
  CHECK_THROWS_WITH(dflop::sample_batch(workload, 11, batch_mode::without_replacement, 0),
                    Catch::Contains("batch size 11 is larger than the workload (10 samples)"));
  CHECK_THROWS_AS(dflop::sample_batch(workload, 11, batch_mode::epochs, 0), dflop::input_error);
  CHECK(dflop::sample_batch(workload, 11, batch_mode::with_replacement, 0).size() == 11);
  CHECK_THROWS_WITH(dflop::sample_batch(workload, 0, batch_mode::with_replacement, 0),
                    Catch::Contains("must be at least 1"));
  CHECK_THROWS_WITH(dflop::sample_batch({}, 1, batch_mode::with_replacement, 0), Catch::Contains("empty workload"));
}

TEST_CASE("reservoir sampling keeps every item with equal probability", "[workload]") {
  constexpr int items = 100;
  constexpr std::size_t capacity = 10;
  constexpr int trials = 4000;
  std::vector<int> hits(items, 0);
  for (int trial = 0; trial < trials; ++trial) {
    dflop::reservoir_sampler<int> reservoir(capacity, static_cast<std::uint64_t>(trial));
    for (int item = 0; item < items; ++item) reservoir.offer(item);
    REQUIRE(reservoir.items().size() == capacity);
    std::set<int> distinct(reservoir.items().begin(), reservoir.items().end());
    REQUIRE(distinct.size() == capacity);
    for (int item : reservoir.items()) ++hits[static_cast<std::size_t>(item)];
  }
  // Expect 400 hits each (sd ~19); a biased sampler (e.g. one that favours early or
  // late items) fails the per-item bound or the first-half/second-half balance.
  double chi_square = 0;
  for (int count : hits) {
    CHECK((count > 300 && count < 500));
    chi_square += (count - 400.0) * (count - 400.0) / 400.0;
  }
  CHECK(chi_square < 160);  // 99 degrees of freedom: mean 99, sd 14
  const int first_half = std::accumulate(hits.begin(), hits.begin() + items / 2, 0);
  CHECK(std::abs(first_half - trials * static_cast<int>(capacity) / 2) < 600);
}

TEST_CASE("streaming a trace gives a deterministic batch of distinct samples from it", "[workload]") {
  const auto workload = numbered_workload(300);
  const std::string text = trace_of(workload);
  const auto stream_batch = [&](std::size_t batch_size, std::uint64_t seed) {
    std::istringstream in(text);
    return dflop::stream_sample_batch(in, "trace.jsonl", batch_size, seed);
  };
  const auto batch = stream_batch(40, 11);
  CHECK(batch == stream_batch(40, 11));
  CHECK(batch != stream_batch(40, 12));
  CHECK(ids_of(batch).size() == 40);
  for (const auto& s : batch) CHECK(std::find(workload.begin(), workload.end(), s) != workload.end());
  CHECK(ids_of(stream_batch(300, 1)).size() == 300);  // the whole trace

  std::istringstream short_trace(text);
  CHECK_THROWS_WITH(dflop::stream_sample_batch(short_trace, "trace.jsonl", 301, 0),
                    "trace.jsonl: the trace holds 300 samples, fewer than the batch size 301 (sampling without "
                    "replacement)");
  std::istringstream bad_trace(text + "{\"id\":\"x\"}\n");
  CHECK_THROWS_WITH(dflop::stream_sample_batch(bad_trace, "trace.jsonl", 5, 0),
                    "trace.jsonl:301: missing field 'modality'");

  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/workload_sampling_stream.jsonl";
  dflop::write_trace_file(path, workload);
  CHECK(dflop::stream_sample_batch_file(path, 40, 11) == batch);
}
