// SPDX-License-Identifier: Apache-2.0
//! \file
//! Memory of every pipeline stage of a layout, priced by a memory model: each
//! stage holds its layers and keeps the schedule's in-flight peak of
//! microbatches. The planner prices its tail microbatches this way; a scheduled
//! batch is priced with its heaviest microbatch per stage, so a trainer sees
//! before running a batch whether it fits.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/workload/sample.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dflop {

//! Memory of one GPU of every stage of `encoder` then `llm`, when the stage at
//! pipeline position p (encoder stages first) keeps `in_flight[p]` microbatches
//! like the module's `encoder_microbatch` / `llm_microbatch` alive, with the
//! memory savers of each module's degrees.
template <memory_model Memory>
[[nodiscard]] std::vector<stage_memory> price_stage_memories(const Memory& memory, const module_plan& encoder,
                                                             const module_plan& llm,
                                                             std::span<const std::uint32_t> in_flight,
                                                             std::span<const sample> encoder_microbatch,
                                                             std::span<const sample> llm_microbatch) {
  std::vector<stage_memory> stages;
  stages.reserve(static_cast<std::size_t>(encoder.degrees.pp + llm.degrees.pp));
  for (module_kind kind : all_module_kinds) {
    const bool is_encoder = kind == module_kind::encoder;
    const module_plan& plan = is_encoder ? encoder : llm;
    const auto microbatch = is_encoder ? encoder_microbatch : llm_microbatch;
    for (int s = 0; s < plan.degrees.pp; ++s) {
      const auto position = static_cast<std::size_t>(is_encoder ? s : encoder.degrees.pp + s);
      const int held = static_cast<int>(in_flight[position]);
      stages.push_back({kind, s, held,
                        estimate_memory_with(memory, kind, plan.degrees.tp, plan.slice(s), held, microbatch,
                                             memory_choices_of(plan.degrees))});
    }
  }
  return stages;
}

//! Memory of every stage of `layout` for one scheduled batch (`batch` as given
//! to the scheduler): each stage priced with the module microbatch (LLM
//! microbatch, encoder part) that needs the most memory there, at the
//! schedule's in-flight peak. A module with no work in the batch (an encoder
//! for text only) is priced with an empty microbatch: weights and optimizer.
template <memory_model Memory>
[[nodiscard]] std::vector<stage_memory> heaviest_stage_memories(const Memory& memory, const plan_layout& layout,
                                                                const batch_schedule& scheduled,
                                                                std::span<const sample> batch) {
  const auto in_flight = peak_activations(layout.schedule);
  std::vector<stage_memory> heaviest =
      price_stage_memories(memory, layout.encoder, layout.llm, in_flight, {}, {});
  std::vector<sample> members;
  for (const bool encoder : {true, false}) {
    const auto& groups = encoder ? scheduled.encoder_parts : scheduled.llm_microbatches;
    for (const auto& group : groups) {
      if (group.empty()) continue;
      members.clear();
      for (std::uint32_t i : group) members.push_back(batch[i]);
      const auto priced = price_stage_memories(memory, layout.encoder, layout.llm, in_flight,
                                               encoder ? std::span<const sample>(members) : std::span<const sample>{},
                                               encoder ? std::span<const sample>{} : std::span<const sample>(members));
      for (std::size_t p = 0; p < priced.size(); ++p) {
        const bool own_module = (priced[p].module == module_kind::encoder) == encoder;
        if (own_module && priced[p].bytes.total() > heaviest[p].bytes.total()) heaviest[p] = priced[p];
      }
    }
  }
  return heaviest;
}

}  // namespace dflop
