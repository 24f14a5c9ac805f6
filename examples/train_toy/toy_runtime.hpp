// SPDX-License-Identifier: Apache-2.0
//! \file
//! The toy trainer's runtime loop: what it prices, how it plans a batch (sample,
//! pack over the cost model, simulate the schedule), how model snapshots reach the
//! planning thread, and how every rank learns every op time.
//!
//! Cost model of the toy: every model stage is one layer of an LLM-like module
//! (`{llm, layer}` at TP 1) over the microbatch's toy tokens (a sample of L LLM
//! tokens has max(1, L / divisor) of them), so the model prices the batch's
//! "toy view": each sample with its toy tokens as `llm_tokens`.
#pragma once

#include "emulated_device.hpp"

#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/error.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/step_result.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/pack/cost_matrix.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/workload/sample.hpp>
#include <dflop/workload/sampling.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
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
  view.llm_tokens = s.llm_tokens / divisor > 0 ? s.llm_tokens / divisor : 1;
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

//! What planning prices with: the per-op curve, and the time a message hop adds on
//! top of the ops (latency and wake-up; fitted from whole steps, `fit_hop_seconds`).
struct model_snapshot {
  fitted_cost_model ops;   //!< the stage curve
  double hop_seconds = 0;  //!< added to every cross-rank dependency

  explicit model_snapshot(fitted_cost_model op_model, double hop = 0) : ops(std::move(op_model)), hop_seconds(hop) {}
};

//! One planned batch: its samples, their microbatches, and the prediction made before it ran.
struct planned_batch {
  std::uint64_t index = 0;                               //!< batch (= step) index
  std::vector<sample> samples;                           //!< what the stages run on
  std::vector<sample> priced;                            //!< the same in the cost model's view
  std::vector<std::vector<std::uint32_t>> microbatches;  //!< replica-major index lists
  double predicted_seconds = 0;                          //!< simulated step time (slowest replica)
  double planning_seconds = 0;                           //!< time planning took (on the planning thread)
  double hop_seconds = 0;                                //!< the model's hop time in the prediction

  //! The executor's view of it.
  [[nodiscard]] step_batch batch() const { return {samples, microbatches}; }
  //! Replica `replica`'s microbatch `j` (of `m`) in the cost model's view.
  [[nodiscard]] microbatch_view priced_view_of(std::uint32_t replica, std::uint32_t j, std::uint32_t m) const {
    return step_batch{priced, microbatches}.view(replica, j, m);
  }
};

//! Everything planning a batch reads; constant while the trainer runs.
struct plan_setup {
  std::span<const sample> pool;            //!< workload the batches are drawn from
  std::size_t batch_size = 64;             //!< samples per global batch
  std::uint64_t seed = 1;                  //!< batch k is drawn with seed + k (and packed with it)
  std::uint32_t replicas = 1;              //!< data-parallel replicas
  std::uint32_t microbatches = 8;          //!< microbatches per replica
  const pipeline_schedule* schedule = nullptr;  //!< the schedule every replica runs
  std::int64_t divisor = 256;              //!< LLM tokens per toy token
};

//! The samples of `lists` (an index list) copied out of `samples`.
[[nodiscard]] inline std::vector<sample> gather(std::span<const sample> samples, std::span<const std::uint32_t> list) {
  std::vector<sample> out;
  out.reserve(list.size());
  for (auto i : list) out.push_back(samples[i]);
  return out;
}

//! Plans batches: a pure function of (batch index, model), so every rank plans the
//! same, whatever thread or timing. Keeps its buffers between calls.
class batch_planner {
public:
  explicit batch_planner(plan_setup setup) : setup_(setup) {}

  //! Draws batch `index`, packs it into replicas x m microbatches with the refined
  //! packer over `model`'s per-sample costs, and simulates the schedule with the
  //! model's per-op costs and hop time: the predicted step time is the slowest replica's makespan.
  [[nodiscard]] planned_batch plan(std::uint64_t index, const model_snapshot& snapshot) {
    const fitted_cost_model& model = snapshot.ops;
    const auto start = std::chrono::steady_clock::now();
    planned_batch out;
    out.index = index;
    out.samples = sample_batch(setup_.pool, setup_.batch_size, batch_mode::without_replacement, setup_.seed + index);
    out.priced.reserve(out.samples.size());
    for (const auto& s : out.samples) out.priced.push_back(priced_view(s, setup_.divisor));

    // The packer balances what grows with a sample: the constant of the curve is
    // paid once per microbatch whatever the packing, so it is left out of the
    // per-sample price (pricing each sample alone would count it once per sample).
    const fitted_curve* curve = nullptr;
    for (const auto& c : model.curves())
      if (c.piece == stage_piece && c.tp == 1) curve = &c;
    if (!curve) throw error("dflop-train-toy: the cost model has no 'llm' curve at tp 1");
    std::vector<double> costs(out.priced.size());
    for (std::size_t i = 0; i < costs.size(); ++i) {
      const auto n = static_cast<double>(out.priced[i].llm_tokens);
      costs[i] = std::max(0.0, (curve->forward.b + curve->backward.b) * n + (curve->forward.c + curve->backward.c) * n * n);
    }
    const std::size_t bins = static_cast<std::size_t>(setup_.replicas) * setup_.microbatches;
    const std::size_t count = costs.size();
    refined_packer{}.pack(cost_matrix(count, 1, std::move(costs)), bins, {.seed = setup_.seed + index}, workspace_,
                          packing_);
    out.microbatches.assign(bins, {});
    for (std::size_t b = 0; b < bins; ++b)
      for (std::size_t i : packing_.bin(b)) out.microbatches[b].push_back(static_cast<std::uint32_t>(i));

    out.predicted_seconds = predict(out, snapshot);
    if (!(out.predicted_seconds > 0))
      throw error("dflop-train-toy: the cost model predicts no time for batch " + std::to_string(index) +
                  ": its curve is <= 0 at every microbatch size of the batch (profile over the toy-token range "
                  "the microbatches use)");
    out.hop_seconds = snapshot.hop_seconds;
    out.planning_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  //! The simulated step time of `batch` (as packed) under `snapshot`: the slowest
  //! replica's makespan with the model's per-op costs and hop time.
  [[nodiscard]] double predict(const planned_batch& batch, const model_snapshot& snapshot) {
    price_ops(batch, snapshot.ops);
    return makespan(snapshot.hop_seconds);
  }

  //! The hop time with which `snapshot.ops` (its hop time ignored) predicts the step
  //! `batch` took `measured` seconds: what the modelled ops do not explain (message
  //! latency, waking a waiting rank, the final reductions, the longest of noisy
  //! paths), spread over the critical path's cross-rank hops. 0 when the ops alone
  //! predict `measured` or more, or no op crosses ranks. Bisection: the makespan
  //! grows with the hop time.
  [[nodiscard]] double fit_hop_seconds(const planned_batch& batch, const fitted_cost_model& ops, double measured) {
    price_ops(batch, ops);
    if (makespan(0) >= measured || makespan(measured) < measured) return 0;
    double low = 0, high = measured;
    for (int i = 0; i < 40; ++i) {
      const double middle = 0.5 * (low + high);
      (makespan(middle) < measured ? low : high) = middle;
    }
    return 0.5 * (low + high);
  }

private:
  // Per replica, the per-op costs of `batch` under `model` (every stage is one layer).
  void price_ops(const planned_batch& batch, const fitted_cost_model& model) {
    const std::uint32_t m = setup_.microbatches, stages = setup_.schedule->stages();
    op_costs_.resize(setup_.replicas);
    for (std::uint32_t r = 0; r < setup_.replicas; ++r) {
      pipeline_costs& costs = op_costs_[r];
      costs.microbatches = m;
      costs.stages = stages;
      costs.forward.resize(static_cast<std::size_t>(m) * stages);
      costs.backward.resize(costs.forward.size());
      for (std::uint32_t j = 0; j < m; ++j) {
        const auto members = gather(batch.priced, batch.microbatches[static_cast<std::size_t>(r) * m + j]);
        const pass_time t = model.estimate_part(stage_piece, 1, shape_of(module_kind::llm, members));
        for (std::uint32_t s = 0; s < stages; ++s) {
          costs.forward[costs.at(j, s)] = t.forward;
          costs.backward[costs.at(j, s)] = t.backward;  // B ops run the whole backward (W is 0)
        }
      }
    }
  }

  // The slowest replica's makespan with the priced ops and `hop` per cross-rank dependency.
  [[nodiscard]] double makespan(double hop) {
    double slowest = 0;
    for (auto& costs : op_costs_) {
      if (hop > 0) costs.transfer.assign(costs.forward.size(), hop);
      else costs.transfer.clear();
      simulator_.simulate(*setup_.schedule, costs, simulated_);
      slowest = std::max(slowest, simulated_.makespan);
    }
    return slowest;
  }

  plan_setup setup_;
  pack_workspace workspace_;
  packing packing_;
  std::vector<pipeline_costs> op_costs_;
  pipeline_simulator simulator_;
  simulation_result simulated_;
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

//! Where op (microbatch j, model stage s, pass) sits in the shared op-time vector.
[[nodiscard]] inline std::size_t op_slot(std::uint32_t j, std::uint32_t s, std::uint32_t stages, bool backward) noexcept {
  return (static_cast<std::size_t>(j) * stages + s) * 2 + (backward ? 1 : 0);
}

//! A number that differs between two packings of a batch (exact in a double).
[[nodiscard]] inline double plan_fingerprint(const planned_batch& batch) {
  double sum = 0;
  for (std::size_t b = 0; b < batch.microbatches.size(); ++b)
    for (std::size_t p = 0; p < batch.microbatches[b].size(); ++p)
      sum += static_cast<double>((batch.microbatches[b][p] + 1) * (b * 1009 + p + 1) % 1000003);
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
//! 	hrows dflop::error when a rank planned the batch differently from rank 0.
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
  shared[ops + 3 * rank + 1] = batch.predicted_seconds;
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
