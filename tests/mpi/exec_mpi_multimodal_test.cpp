// SPDX-License-Identifier: Apache-2.0
// The multimodal executor over MPI (run under `mpirun -np 4`): encoder and LLM
// with different data-parallel degrees match the multimodal sequential reference
// within 1e-12 and send exactly the expected messages (pipeline edges, one
// hand-off per encoder/LLM replica pair sharing samples, both directions).
// Every rank runs every test case; each checks its own stage.
#include "mpi_catch_main.hpp"
#include "../exec_multimodal_support.hpp"

#include <dflop/exec/mpi_communicator.hpp>
#include <dflop/exec/multimodal_executor.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/schedule.hpp>

#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace dflop;

namespace {

using test::world_size;

void check_against_reference(const world_layout& layout, const pipeline_schedule& schedule) {
  const std::uint32_t m = schedule.microbatches;
  const auto data = test::make_batch(36, 19, m, layout.replicas(module_kind::encoder), layout.replicas(module_kind::llm));
  std::vector<test::toy_encoder_stage> encoder;
  std::vector<test::toy_llm_stage> llm;
  for (std::uint32_t s = 0; s < layout.stages(module_kind::encoder); ++s) encoder.emplace_back(s);
  for (std::uint32_t s = 0; s < layout.stages(module_kind::llm); ++s)
    llm.emplace_back(layout.stages(module_kind::encoder) + s, layout.positions(), layout.stages(module_kind::encoder));
  const double expected = run_sequential(encoder, llm, data.view(), m);

  using toy_executor = multimodal_executor<mpi_communicator, test::toy_encoder_stage, test::toy_llm_stage>;
  mpi_communicator world(MPI_COMM_WORLD, 20);
  const auto role = layout.role(world.rank());
  toy_executor::stage_type stage = test::toy_encoder_stage(role.position);
  if (!role.encoder()) stage = test::toy_llm_stage(role.position, layout.positions(), layout.stages(module_kind::encoder));
  toy_executor run(world, layout, std::move(stage), {.watchdog_seconds = 20});
  const auto result = run.step(schedule, data.view());
  CHECK(std::abs(result.loss - expected) <= 1e-12 * std::abs(expected));

  const auto got = std::visit([](auto& s) { return s.gradients(); }, run.stage());
  const auto want = role.encoder() ? encoder[role.stage].gradients() : llm[role.stage].gradients();
  REQUIRE(got.size() == want.size());
  const auto [scale, diff] = test::compare_gradients(got, want);
  INFO("position " << role.position << " replica " << role.replica);
  CHECK(scale > 0);
  CHECK(diff <= 1e-12 * scale);

  unsigned long counts[2] = {result.messages_sent, result.messages_received};
  MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
  const std::size_t messages = test::expected_messages(data, m, layout.stages(module_kind::encoder), layout.replicas(module_kind::encoder), 1,
                                                       layout.stages(module_kind::llm), layout.replicas(module_kind::llm), 1);
  CHECK(counts[0] == messages);
  CHECK(counts[1] == messages);
}

}  // namespace

TEST_CASE("MPI: encoder and LLM data-parallel degrees differ, within 1e-12 of the reference", "[exec][mpi]") {
  if (world_size() != 4) return;
  const std::uint32_t m = 4;
  for (const world_layout layout : {world_layout({1, 1, 2}, {1, 2, 1}), world_layout({1, 2, 1}, {1, 1, 2})})
    for (const auto& schedule : {one_f_one_b{}.make({3, m}), zero_bubble_h1{}.make({3, m})}) {
      INFO(schedule.name << ", encoder " << layout.replicas(module_kind::encoder) << "x" << layout.stages(module_kind::encoder) << ", llm "
                         << layout.replicas(module_kind::llm) << "x" << layout.stages(module_kind::llm));
      check_against_reference(layout, schedule);
    }
}
