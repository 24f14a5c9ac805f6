// SPDX-License-Identifier: Apache-2.0
//! \file
//! The toy trainer's runtime loop: what it prices, how a batch is planned (by the
//! library's `batch_scheduler`, for the toy's LLM-only layout), how model
//! snapshots reach the planning thread, and how every rank learns every op time.
//!
//! Cost model of the toy: every model stage is one layer of an LLM-like module
//! (`{llm, layer}` at TP 1) over the microbatch's toy tokens (a sample of L LLM
//! tokens has max(1, L / divisor) of them), so the model prices the batch's
//! "toy view": each sample with its toy tokens as `llm_tokens`. To the library the
//! toy is a model without an encoder (encoder pp 0) whose LLM has one layer per
//! stage: LLM tp 1, pp = stages, dp = replicas, m microbatches.
#pragma once

#include "emulated_device.hpp"
#include "toy_model.hpp"

#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/error.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/handoff.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/step_result.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/workload/sample.hpp>
#include <dflop/workload/sampling.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

namespace dflop::toy {

//! What each toy stage is to the cost model: one LLM layer.
inline constexpr module_piece stage_piece{module_kind::llm, module_part::layer};

//! The cost model's view of `s`: its toy tokens as its LLM tokens.
[[nodiscard]] inline sample priced_view(const sample& s, std::int64_t divisor) {
  sample view = s;
  view.llm_tokens = static_cast<std::int64_t>(tokens(s, divisor));
  return view;
}

//! The known emulated curve (`--op-cost-us A,B`) as a fitted model: A + B n forward, twice that backward.
[[nodiscard]] inline fitted_cost_model known_model(const op_cost& cost) {
  const double a = cost.fixed_us * 1e-6, b = cost.per_token_us * 1e-6;
  return fitted_cost_model({{stage_piece, 1, profile_size::tokens, {a, b, 0, 1, 0, 0}, {2 * a, 2 * b, 0, 1, 0, 0}}});
}

//! The stage curve of a profile (`--cost-profile`), fitted. \throws input_error naming
//! the file when it has no `llm` curve at TP 1 (or fewer than 3 sizes).
[[nodiscard]] inline fitted_cost_model profiled_model(const profile& table) {
  const auto fitted = fitted_cost_model::from_profile(table);
  for (const auto& curve : fitted.curves())
    if (curve.piece == stage_piece && curve.tp == 1) return fitted_cost_model({curve});
  throw input_error(table.source, 0, "no 'llm' curve at tp 1 (write one with dflop-train-toy --profile)");
}

//! `model` with every coefficient times `scale`: a model `scale` times off.
[[nodiscard]] inline fitted_cost_model scaled_model(const fitted_cost_model& model, double scale) {
  std::vector<fitted_curve> curves(model.curves().begin(), model.curves().end());
  for (auto& curve : curves)
    for (quadratic_fit* fit : {&curve.forward, &curve.backward}) {
      fit->a *= scale;
      fit->b *= scale;
      fit->c *= scale;
    }
  return fitted_cost_model(std::move(curves));
}

//! The toy's memory model for the scheduler: no gradient bytes. A stage's weights
//! are (hidden + 1) x hidden doubles, so their all-reduce is one of the step's
//! final small reductions, which the fitted hop time accounts for with the rest.
struct toy_memory {
  //! See `memory_model`: nothing the scheduler needs to price.
  [[nodiscard]] memory_breakdown estimate_memory(module_kind, int, stage_slice, int, std::span<const sample>) const {
    return {};
  }
};
static_assert(memory_model<toy_memory>);

//! What planning prices with: the per-op curve, and the time a message hop adds on
//! top of the ops (latency and wake-up; fitted from whole steps, `fit_hop_seconds`).
struct model_snapshot {
  fitted_cost_model ops;   //!< the stage curve
  double hop_seconds = 0;  //!< added to every cross-rank dependency

  explicit model_snapshot(fitted_cost_model op_model, double hop = 0) : ops(std::move(op_model)), hop_seconds(hop) {}
};

//! Everything planning a batch reads; constant while the trainer runs.
struct plan_setup {
  std::span<const sample> pool;     //!< workload the batches are drawn from
  std::size_t batch_size = 64;      //!< samples per global batch
  std::uint64_t seed = 1;           //!< batch k is drawn with seed + k (and packed with it)
  std::uint32_t replicas = 1;       //!< data-parallel replicas
  std::uint32_t microbatches = 8;   //!< microbatches per replica
  std::uint32_t stages = 4;         //!< pipeline stages (one toy layer each)
  std::string schedule = "1f1b";    //!< one-chunk schedule every replica runs
  std::int64_t divisor = 256;       //!< LLM tokens per toy token
  std::size_t hidden = 16;          //!< width of every toy layer
};

//! The toy as the library sees it: no encoder (pp 0), an LLM of one layer per
//! stage at TP 1, `stages` deep and `replicas` wide, with `setup.schedule`.
//! \throws schedule_error for an unknown schedule name.
[[nodiscard]] inline plan_layout toy_layout(const plan_setup& setup) {
  const auto stages = static_cast<int>(setup.stages);
  const module_parallelism no_encoder{1, 0, 1};
  const module_parallelism llm{1, stages, static_cast<int>(setup.replicas)};
  module_plan layers{llm, {}};
  for (int s = 0; s <= stages; ++s) layers.first_layer.push_back(s);
  return make_plan_layout(parallel_config{no_encoder, llm, static_cast<int>(setup.microbatches)},
                          module_plan{no_encoder, {0}}, std::move(layers), named_schedule(setup.schedule));
}

//! The toy's shapes for the scheduler, which reads the LLM's hidden size (to size
//! activations; the toy's links ignore sizes, see `toy_cluster`) and layers.
[[nodiscard]] inline multimodal_spec toy_model_spec(const plan_setup& setup) {
  const auto hidden = static_cast<std::int64_t>(setup.hidden);
  const auto layers = static_cast<std::int64_t>(setup.stages);
  return combine(vit_spec{}, llm_spec{"toy-mlp", layers, hidden, hidden, 1, 1, 1, false}, "toy");
}

//! The toy's cluster: every rank on one node, links that take `hop_seconds` per
//! message whatever its size (the toy's activations are a few kilobytes; what a
//! hop costs is latency and waking the receiver, fitted from measured steps).
[[nodiscard]] inline cluster_spec toy_cluster(const plan_setup& setup, double hop_seconds) {
  const int ranks = static_cast<int>(setup.stages * setup.replicas);
  constexpr double unbounded = std::numeric_limits<double>::infinity();
  return {ranks, ranks, gpu_spec{"toy-rank", 0, 0, unbounded, unbounded, hop_seconds}};
}

//! How batch `index` is scheduled: packed with seed + index; no weight-gradient
//! share, since a toy stage does its whole emulated backward in B (its W is free).
[[nodiscard]] inline batch_options toy_batch_options(const plan_setup& setup, std::uint64_t index) {
  batch_options options;
  options.seed = setup.seed + index;
  options.weight_gradient_share = 0;
  return options;
}

//! One planned batch: its samples and the library's schedule of them, made before it ran.
struct planned_batch {
  std::uint64_t index = 0;      //!< batch (= step) index
  std::vector<sample> samples;  //!< what the stages run on
  std::vector<sample> priced;   //!< the same in the cost model's view (what was scheduled)
  batch_schedule schedule;      //!< microbatches, slot order, per-op costs and the prediction
  double planning_seconds = 0;  //!< time planning took (on the planning thread)
  double hop_seconds = 0;       //!< the model's hop time in the prediction

  //! The simulated step time.
  [[nodiscard]] double predicted_seconds() const noexcept { return schedule.predicted_seconds; }
  //! The multimodal executor's (and the sequential reference's) view of it.
  [[nodiscard]] multimodal_batch view() const { return executable_batch(schedule, samples); }
  //! In the cost model's view, the samples replica `replica` runs as schedule
  //! microbatch `j` (slot `slot_order[j]`): what its ops' measured times are of.
  [[nodiscard]] std::vector<sample> priced_members(std::uint32_t replica, std::uint32_t j) const {
    const auto slot = static_cast<int>(schedule.slot_order.empty() ? j : schedule.slot_order[j]);
    std::vector<sample> out;
    for (auto i : schedule.llm_microbatch(static_cast<int>(replica), slot)) out.push_back(priced[i]);
    return out;
  }
};

//! The library's scheduler over the toy's cost model snapshot and memory model.
using toy_scheduler = batch_scheduler<fitted_cost_model, toy_memory, refined_packer>;

//! Plans batches: a pure function of (batch index, model), so every rank plans the
//! same, whatever thread or timing. Draws the batch; the library packs, orders,
//! prices and simulates it.
class batch_planner {
public:
  //! \throws schedule_error for an unknown schedule name (`toy_layout`).
  explicit batch_planner(plan_setup setup)
      : setup_(std::move(setup)), layout_(toy_layout(setup_)), model_(toy_model_spec(setup_)) {}

  //! Draws batch `index` and schedules it with `batch_scheduler` for the toy's
  //! layout under `snapshot` (op curve, and hop time on every link): packed into
  //! replicas x m microbatches, slots ordered, predicted by the multimodal simulator.
  [[nodiscard]] planned_batch plan(std::uint64_t index, const model_snapshot& snapshot) const {
    const auto start = std::chrono::steady_clock::now();
    planned_batch out;
    out.index = index;
    out.samples = sample_batch(setup_.pool, setup_.batch_size, batch_mode::without_replacement, setup_.seed + index);
    out.priced.reserve(out.samples.size());
    for (const auto& s : out.samples) out.priced.push_back(priced_view(s, setup_.divisor));
    const cluster_spec cluster = toy_cluster(setup_, snapshot.hop_seconds);
    toy_scheduler(model_, cluster, snapshot.ops, memory_)
        .schedule(layout_, out.priced, toy_batch_options(setup_, index), out.schedule);
    if (!(out.predicted_seconds() > 0))
      throw error("dflop-train-toy: the cost model predicts no time for batch " + std::to_string(index) +
                  ": its curve is <= 0 at every microbatch size of the batch (profile over the toy-token range "
                  "the microbatches use)");
    out.hop_seconds = snapshot.hop_seconds;
    out.planning_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  //! The hop time with which `ops` predicts the step `batch` took `measured`
  //! seconds: what the modelled ops do not explain (message latency, waking a
  //! waiting rank, the final reductions, the longest of noisy paths), spread over
  //! the critical path's cross-rank hops. 0 when the ops alone predict `measured`
  //! or more, or no op crosses ranks. Bisection on `batch_scheduler::reprice` of
  //! the batch as planned (the makespan grows with the hop time).
  [[nodiscard]] double fit_hop_seconds(const planned_batch& batch, const fitted_cost_model& ops, double measured) {
    repriced_ = batch.schedule;
    const batch_options options = toy_batch_options(setup_, batch.index);
    const auto makespan = [&](double hop) {
      const cluster_spec cluster = toy_cluster(setup_, hop);
      toy_scheduler(model_, cluster, ops, memory_).reprice(layout_, batch.priced, options, repriced_);
      return repriced_.predicted_seconds;
    };
    if (makespan(0) >= measured || makespan(measured) < measured) return 0;
    double low = 0, high = measured;
    for (int i = 0; i < 40; ++i) {
      const double middle = 0.5 * (low + high);
      (makespan(middle) < measured ? low : high) = middle;
    }
    return 0.5 * (low + high);
  }

  //! The layout every batch is scheduled for (and the runner runs).
  [[nodiscard]] const plan_layout& layout() const noexcept { return layout_; }

private:
  plan_setup setup_;
  plan_layout layout_;
  multimodal_spec model_;
  toy_memory memory_;
  batch_schedule repriced_;  // fit_hop_seconds' scratch
};

//! Model snapshots published by the trainer after each step, read by the planning
//! thread: snapshot i is the model after learning from batch i.
class snapshot_board {
public:
  //! Publishes the snapshot after the next batch.
  void publish(model_snapshot snapshot) {
    {
      std::lock_guard lock(mutex_);
      published_.push_back(std::make_shared<const model_snapshot>(std::move(snapshot)));
    }
    changed_.notify_all();
  }
  //! Snapshot `index`, waiting until it is published; null when `stop` is requested first.
  [[nodiscard]] std::shared_ptr<const model_snapshot> wait_for(std::size_t index, std::stop_token stop) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, stop, [&] { return published_.size() > index; });
    return published_.size() > index ? published_[index] : nullptr;
  }

private:
  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::vector<std::shared_ptr<const model_snapshot>> published_;
};

//! Where op (schedule microbatch j, model stage s, pass) sits in the shared op-time
//! vector; j is the executor's `op.microbatch`, which runs slot `slot_order[j]`.
[[nodiscard]] inline std::size_t op_slot(std::uint32_t j, std::uint32_t s, std::uint32_t stages, bool backward) noexcept {
  return (static_cast<std::size_t>(j) * stages + s) * 2 + (backward ? 1 : 0);
}

//! A number that differs between two packings or slot orders of a batch (exact in a double).
[[nodiscard]] inline double plan_fingerprint(const planned_batch& batch) {
  const auto& lists = batch.schedule.llm_microbatches;
  double sum = 0;
  for (std::size_t b = 0; b < lists.size(); ++b)
    for (std::size_t p = 0; p < lists[b].size(); ++p)
      sum += static_cast<double>((lists[b][p] + 1) * (b * 1009 + p + 1) % 1000003);
  for (std::size_t j = 0; j < batch.schedule.slot_order.size(); ++j)
    sum += static_cast<double>((batch.schedule.slot_order[j] + 1) * (j + 7919) % 1000003);
  return sum;
}

//! One step as every rank saw it, after `share_step`.
struct shared_step {
  std::vector<double> op_seconds;  //!< m x stages x 2 (forward; backward = B + W), `op_slot` order
  double seconds = 0;              //!< the step's wall time, max over ranks
};

//! Shares one step's op times and wall times with every rank (one all-reduce of a
//! fixed-size vector: the op times, then per world rank its step time, predicted
//! time and plan fingerprint). Only replica 0's ranks contribute op times (other
//! replicas run other microbatches), so each entry has exactly one non-zero term:
//! the sum is exact and the same on every rank. Collective: all ranks call it.
//! \throws dflop::error when a rank planned the batch differently from rank 0.
template <class Communicator>
[[nodiscard]] shared_step share_step(Communicator& world, const step_result& result, const planned_batch& batch,
                                     bool contribute, std::uint32_t m, std::uint32_t stages) {
  const std::size_t ops = static_cast<std::size_t>(m) * stages * 2;
  const auto ranks = static_cast<std::size_t>(world.size()), rank = static_cast<std::size_t>(world.rank());
  std::vector<double> shared(ops + 3 * ranks, 0.0);
  if (contribute)
    for (const op_time& op : result.op_times)
      shared[op_slot(op.microbatch, op.stage, stages, op.kind != op_kind::forward)] += op.end - op.start;
  shared[ops + 3 * rank] = result.seconds;
  shared[ops + 3 * rank + 1] = batch.predicted_seconds();
  shared[ops + 3 * rank + 2] = plan_fingerprint(batch);
  world.all_reduce_sum(gradient_buffer::of(std::span<double>(shared)), world.resource());
  shared_step out;
  out.op_seconds.assign(shared.begin(), shared.begin() + static_cast<std::ptrdiff_t>(ops));
  for (std::size_t r = 0; r < ranks; ++r) {
    out.seconds = std::max(out.seconds, shared[ops + 3 * r]);
    if (shared[ops + 3 * r + 1] != shared[ops + 1] || shared[ops + 3 * r + 2] != shared[ops + 2])
      throw error("dflop-train-toy: rank " + std::to_string(r) + " planned batch " + std::to_string(batch.index) +
                  " differently from rank 0 (planning must be deterministic)");
  }
  return out;
}

}  // namespace dflop::toy
