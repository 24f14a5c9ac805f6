// SPDX-License-Identifier: Apache-2.0
//! \file
//! The settings of a plan search: batch size and sampling, memory headroom,
//! microbatch counts, the simulation budget, the schedules searched, baselines
//! and threads.
#pragma once

#include <dflop/cost/throughput_curve.hpp>
#include <dflop/plan/batch_options.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace dflop {

//! Settings of a plan search.
struct planner_options {
  int global_batch = 512;                //!< samples per iteration
  int batches = 4;                       //!< sampled global batches every candidate is scored on
  std::uint64_t seed = 0;                //!< batch sampling and packing seed
  batch_options batch;                   //!< per-batch policies (slot assignment, order, budget)
  //! Fraction of GPU memory kept free (CUDA context, fragmentation); the rest
  //! is the plan's memory budget (`batch_options::memory_budget_bytes`, set by
  //! the planner: leave `batch.memory_budget_bytes` 0 or equal to it).
  double memory_headroom = 0.10;
  std::vector<int> microbatch_counts;    //!< m values to try; empty: 1, 2, 3, 4, 6, 8, 12, 16, ... up to the batch
  std::size_t max_simulated = 48;        //!< most fitting candidates scored by simulation (0: no limit)
  //! Best scanned candidates scored again with the full order policy. 4: in 11
  //! benchmark cases (5 mixtures; 7B to 72B on 64-1024 GPUs) the winner was
  //! always among the scan's best 4 (same plan with 8), at half the final cost.
  std::size_t finalists = 4;
  bool prune_by_bound = true;            //!< skip candidates whose lower bound cannot win
  //! Stop scoring a scanned candidate when its mean over the first half of the
  //! sampled batches is over 2% above the scan's `finalists + 2`-th fastest
  //! (it cannot become a finalist), and a (finalist, schedule) pair when it is
  //! over 2% above the best pair so far (it cannot win). On the 7B and 32B at
  //! 1024 GPUs that half's mean was within 1% of the mean over all batches.
  //! false: every candidate and pair is scored on all batches.
  bool give_up_on_slow = true;
  //! The one-chunk schedules a planner with `named_schedule("auto")` chooses
  //! among. The scan ranks configurations under the first; the final scoring
  //! scores its finalists under each (each with its own in-flight memory
  //! peaks) and keeps the fastest (configuration, schedule); ties go to the
  //! earlier schedule. ZB-H1 first: it holds 1F1B's peaks with fewer bubbles,
  //! so it ranks best; it assumes stages with a separate weight-gradient pass
  //! (`weight(ctx)`): without one, force "1f1b".
  std::vector<std::string> schedule_candidates{"zb-h1", "1f1b"};
  //! Let the chosen plan's encoder run ahead of the schedule's warm-up where
  //! that is faster and fits (`parallel_config::encoder_run_ahead`: 2, 8, 32,
  //! ... forwards, up to m, scored on the winner after the final scoring; the
  //! fastest that fits is kept). Not searched on large batches
  //! (`batch_scheduler::large_order_search`), where it bought nothing
  //! measurable. false: every plan runs its schedule's own warm-up.
  bool encoder_run_ahead = true;
  //! Where a module must recompute activations, recompute only the fewest of
  //! each stage's layers with which the plan fits (`module_parallelism::
  //! recompute_layers`; the stage functors must recompute that many, the first
  //! ones). false: all of a stage's layers or none, for stages that can only
  //! checkpoint whole stages.
  bool partial_recompute = true;
  //! Plan without the samples no configuration can hold even alone (their ids
  //! land in `plan::excluded_samples`); false: `make_plan` throws
  //! `unfittable_samples_error` naming them. Nothing is dropped unless asked.
  bool exclude_unfittable = false;
  //! Heaviest global batches (by encoder and by LLM tokens, of 64 times as
  //! many drawn) that a finalist's batches must pack within the memory budget:
  //! the tail the scoring batches rarely show. 0: none.
  std::size_t tail_batches = 16;
  //! Fresh global batches packed after the search to estimate how often the
  //! memory budget acts on the chosen plan (`plan::memory_cap`); 0: none.
  std::size_t cap_check_batches = 128;
  bool baselines = true;                 //!< also choose and score data_blind and dflop_reference
  std::size_t baseline_attempts = 64;    //!< a baseline's choices tried before it turns on memory savers
  unsigned threads = 0;                  //!< threads scoring the sampled batches (0: the hardware's); same plan for any count
  double ideal_efficiency = throughput_curve{}.max_efficiency;  //!< best fraction of peak any kernel reaches
  std::ostream* progress = nullptr;      //!< progress output (null: none)
  bool progress_interactive = false;     //!< redraw in place (a terminal) or print lines
};

}  // namespace dflop
