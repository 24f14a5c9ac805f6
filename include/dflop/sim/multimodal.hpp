// SPDX-License-Identifier: Apache-2.0
//! \file
//! One training iteration of a multimodal model as one dependency graph across
//! replicas: encoder stages then LLM stages in one logical pipeline, each module
//! with its own data-parallel degree. LLM replica r's microbatch k waits for the
//! encoder replicas that hold its samples of slot k; their backward of slot k waits
//! for the LLM gradients of all those samples; a ring all-reduce per module and
//! stage closes the iteration. Linear in the number of ops; reuses its buffers.
#pragma once

#include <dflop/plan/world_layout.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/validate.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/detail/op_graph.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/sim/result.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! Costs of one module (encoder or LLM) over all its data-parallel replicas.
//! Tables are indexed [(replica * m + microbatch) * stages + stage], `stage` local to
//! the module. `weight` and `transfer` may be empty (zeros).
struct module_costs {
  std::uint32_t stages = 0;            //!< pipeline stages of this module (0: no such module)
  std::uint32_t replicas = 1;          //!< data-parallel degree
  std::vector<double> forward;         //!< F times
  std::vector<double> backward;        //!< B times (whole backward when the schedule does not split)
  std::vector<double> weight;          //!< W times (added to B when the schedule does not split)
  std::vector<double> transfer;        //!< time to pass stage s's output to stage s+1 of the same replica
  std::vector<double> gradient_bytes;  //!< per stage: gradient bytes all-reduced over the replicas (empty: none)
  link gradient_link;                  //!< link the all-reduce runs over
  //! The distributed optimizer, per stage: parameter bytes each replica gathers
  //! at the step's start (empty: the optimizer is not sharded). With it, a stage's
  //! gradients are reduce-scattered instead of all-reduced (half the traffic; in
  //! buckets as `multimodal_costs::gradient_bucket_bytes` says) and each
  //! replica's first op waits for the gather, as the multimodal executor runs
  //! stages that expose `parameters()`.
  std::vector<double> sharded_parameter_bytes;

  //! Index of (replica, microbatch, stage) for `microbatches` microbatches.
  [[nodiscard]] std::size_t at(std::uint32_t replica, std::uint32_t microbatch, std::uint32_t stage,
                               std::uint32_t microbatches) const noexcept {
    return (static_cast<std::size_t>(replica) * microbatches + microbatch) * stages + stage;
  }

  //! Whether the optimizer is sharded: the distributed optimizer, over more than one replica.
  [[nodiscard]] bool sharded_optimizer() const noexcept { return replicas > 1 && !sharded_parameter_bytes.empty(); }

  //! Seconds of stage `stage`'s parameter all-gather at the step's start (0 unless sharded).
  [[nodiscard]] double parameter_gather_seconds(std::uint32_t stage) const noexcept {
    return sharded_optimizer() ? ring_reduce_scatter_seconds(sharded_parameter_bytes[stage], replicas, gradient_link)
                               : 0.0;
  }

  //! A stage's gradient reduction: how many buckets, and one bucket's seconds.
  struct gradient_reduction_shape {
    std::uint32_t buckets = 0;  //!< 0: nothing to reduce (no gradient bytes, or one replica)
    double bucket_seconds = 0;  //!< one bucket's all-reduce (reduce-scatter when sharded)
  };

  //! Most buckets a stage's gradients may be reduced in (more is a bucket size by mistake).
  static constexpr double max_gradient_buckets = 1e6;

  //! Stage `stage`'s gradient reduction in buckets of `bucket_bytes` (0: one
  //! reduction of all its bytes), the simulator's and the emulated stages' alike.
  //! \throws dflop::error when the bucket size splits the stage's bytes into more
  //! than `max_gradient_buckets`.
  [[nodiscard]] gradient_reduction_shape gradient_reduction(std::uint32_t stage, double bucket_bytes) const {
    const double bytes = gradient_bytes.empty() ? 0.0 : gradient_bytes[stage];
    if (bytes <= 0 || replicas <= 1) return {};
    const double buckets = bucket_bytes > 0 ? std::ceil(bytes / bucket_bytes) : 1.0;
    if (buckets > max_gradient_buckets)
      throw error("multimodal_costs: gradient_bucket_bytes " + std::to_string(bucket_bytes) + " splits stage " +
                  std::to_string(stage) + "'s " + std::to_string(bytes) + " gradient bytes into more than " +
                  std::to_string(static_cast<int>(max_gradient_buckets)) + " buckets");
    return {static_cast<std::uint32_t>(buckets),
            gradient_reduction_seconds(bytes / buckets, replicas, gradient_link, sharded_optimizer())};
  }

  friend bool operator==(const module_costs&, const module_costs&) = default;
};

//! Whether an encoder replica's output for a slot feeds an LLM replica, and how
//! long the activation (and, backwards, its gradient) takes to move.
struct handoff {
  bool feeds = false;  //!< the encoder replica holds samples of this LLM replica's microbatch
  double seconds = 0;  //!< transfer time of those samples' activations (and gradients)

  friend bool operator==(const handoff&, const handoff&) = default;
};

//! Everything the multimodal simulator needs for one global batch: m slots,
//! per-module costs, and the encoder-to-LLM hand-off pattern
//! `handoffs[(encoder_replica * m + slot) * llm.replicas + llm_replica]`
//! (may be empty when there is no encoder).
struct multimodal_costs {
  std::uint32_t microbatches = 0;  //!< m: microbatches per LLM replica = encoder slots
  module_costs encoder;            //!< the modality encoder (stages first in the pipeline)
  module_costs llm;                //!< the LLM
  std::vector<handoff> handoffs;   //!< encoder replica x slot x LLM replica
  //! Gradient all-reduce bucket size in bytes (0: one all-reduce per stage once
  //! every replica has finished). With buckets, a stage's gradients become
  //! final evenly over its last gradient-producing op (the last B, or the last W
  //! when the schedule splits the backward), as the backward walks its layers;
  //! each bucket is reduced as soon as every replica has it and the previous
  //! bucket is done, overlapping the reduction with that op (as Megatron-LM's
  //! and DDP's overlapped gradient reduction do).
  double gradient_bucket_bytes = 0;

  //! Index into `handoffs`.
  [[nodiscard]] std::size_t handoff_at(std::uint32_t encoder_replica, std::uint32_t slot,
                                       std::uint32_t llm_replica) const noexcept {
    return (static_cast<std::size_t>(encoder_replica) * microbatches + slot) * llm.replicas + llm_replica;
  }
  //! Pipeline positions: encoder stages + LLM stages.
  [[nodiscard]] std::uint32_t positions() const noexcept { return encoder.stages + llm.stages; }
  //! Ranks (timeline tracks): encoder stages x replicas + LLM stages x replicas.
  [[nodiscard]] std::uint32_t ranks() const noexcept {
    return encoder.stages * encoder.replicas + llm.stages * llm.replicas;
  }
  //! The ranks as a `world_layout` with one rank per TP group (TP ranks run the
  //! same ops at the same times): rank r here is the world layout's rank r, so
  //! tracks are numbered as the planner places GPUs and the executors run ranks.
  [[nodiscard]] world_layout layout() const {
    return world_layout({1, static_cast<int>(encoder.stages), static_cast<int>(encoder.replicas)},
                        {1, static_cast<int>(llm.stages), static_cast<int>(llm.replicas)});
  }
  //! Rank of encoder stage `stage`, replica `replica` (`layout().rank_of(encoder, stage, replica, 0)`).
  [[nodiscard]] std::uint32_t encoder_rank(std::uint32_t stage, std::uint32_t replica) const noexcept {
    return replica * encoder.stages + stage;
  }
  //! Rank of LLM stage `stage`, replica `replica` (`layout().rank_of(llm, stage, replica, 0)`).
  [[nodiscard]] std::uint32_t llm_rank(std::uint32_t stage, std::uint32_t replica) const noexcept {
    return encoder.stages * encoder.replicas + replica * llm.stages + stage;
  }
  //! Pipeline position (encoder stages first) of rank `rank`.
  [[nodiscard]] std::uint32_t position_of(std::uint32_t rank) const noexcept {
    const std::uint32_t encoder_ranks = encoder.stages * encoder.replicas;
    return rank < encoder_ranks ? rank % encoder.stages : encoder.stages + (rank - encoder_ranks) % llm.stages;
  }
  //! Data-parallel replica (within its module) of rank `rank`.
  [[nodiscard]] std::uint32_t replica_of(std::uint32_t rank) const noexcept {
    const std::uint32_t encoder_ranks = encoder.stages * encoder.replicas;
    return rank < encoder_ranks ? rank / encoder.stages : (rank - encoder_ranks) / llm.stages;
  }
  //! Readable rank name: "encoder s0 r1", "llm s2 r3".
  [[nodiscard]] std::string rank_name(std::uint32_t rank) const {
    const std::uint32_t position = position_of(rank);
    const bool in_encoder = position < encoder.stages;
    std::string text(in_encoder ? "encoder s" : "llm s");
    text.append(std::to_string(in_encoder ? position : position - encoder.stages))
        .append(" r")
        .append(std::to_string(replica_of(rank)));
    return text;
  }

  //! Throws `dflop::error` when a table has the wrong size or a negative entry.
  void check() const {
    const auto check_module = [&](const module_costs& module, const char* which) {
      const std::size_t n = static_cast<std::size_t>(module.replicas) * microbatches * module.stages;
      const auto table = [&](const std::vector<double>& values, const char* what, bool optional, std::size_t size) {
        if (values.size() != size && !(optional && values.empty()))
          throw error(std::string("multimodal_costs: ") + which + "." + what + " has " + std::to_string(values.size()) +
                      " entries, expected " + std::to_string(size));
        for (double value : values)
          if (!(value >= 0)) throw error(std::string("multimodal_costs: ") + which + "." + what + " has a negative or NaN entry");
      };
      if (module.stages > 0 && module.replicas == 0)
        throw error(std::string("multimodal_costs: ") + which + " has stages but no replicas");
      table(module.forward, "forward", false, n);
      table(module.backward, "backward", false, n);
      table(module.weight, "weight", true, n);
      table(module.transfer, "transfer", true, n);
      table(module.gradient_bytes, "gradient_bytes", true, module.stages);
      table(module.sharded_parameter_bytes, "sharded_parameter_bytes", true, module.stages);
    };
    if (llm.stages == 0) throw error("multimodal_costs: the LLM needs at least one stage");
    check_module(encoder, "encoder");
    check_module(llm, "llm");
    const std::size_t links = static_cast<std::size_t>(encoder.replicas) * microbatches * llm.replicas;
    if (encoder.stages > 0 && handoffs.size() != links)
      throw error("multimodal_costs: handoffs has " + std::to_string(handoffs.size()) + " entries, expected " +
                  std::to_string(links));
    for (const auto& link : handoffs)
      if (!(link.seconds >= 0)) throw error("multimodal_costs: a handoff has a negative or NaN time");
    if (!(gradient_bucket_bytes >= 0) || !std::isfinite(gradient_bucket_bytes))
      throw error("multimodal_costs: gradient_bucket_bytes must be finite and >= 0");
  }

  friend bool operator==(const multimodal_costs&, const multimodal_costs&) = default;
};

//! Simulates multimodal iterations. Keep one per thread; after the first call of
//! a given size it allocates nothing.
//!
//! Every replica of a position runs the same op list, and every edge between two
//! ranks' ops joins the same two ops of the one-replica schedule. So one
//! topological order of the schedule's own operations, taken once per `bind`,
//! orders every rank's ops, and a simulation is one pass over the ops and their
//! incoming edges: no per-run graph, no ready queue. An order search binds once
//! and simulates each candidate slot order against the bound schedule and costs.
//! Inside a run the replicas of one schedule operation sit side by side in
//! memory, since the walk visits them together; `simulate` lays its result out
//! by rank.
class multimodal_simulator {
public:
  //! Simulates one iteration. `schedule` is a one-chunk schedule over
  //! `costs.positions()` stages (encoder stages first) and `costs.microbatches`
  //! microbatches; every replica of position p runs `schedule.rank_ops[p]`.
  //! `order`, when given, maps schedule position j to the slot whose costs and
  //! hand-offs it uses. Result ranks follow `multimodal_costs::encoder_rank` /
  //! `llm_rank`; `gradient_sync` holds each rank's all-reduce. Throws
  //! `schedule_error` (bad or deadlocking schedule) or `dflop::error` (bad costs).
  //! Binds `schedule` and `costs` (see `bind`).
  void simulate(const pipeline_schedule& schedule, const multimodal_costs& costs, simulation_result& result,
                std::span<const std::uint32_t> order = {}) {
    bind(schedule, costs);
    run(order, std::numeric_limits<double>::infinity());
    finish(result);
  }

  //! The makespan `simulate(schedule, costs, order)` would give, or +infinity as
  //! soon as the simulation proves it is at least `cutoff` (the rest is then not
  //! simulated). For order searches, which only keep an order shorter than their
  //! best so far: most candidates are not, and many show it early. Binds
  //! `schedule` and `costs` (see `bind`).
  [[nodiscard]] double makespan_below(const pipeline_schedule& schedule, const multimodal_costs& costs,
                                      std::span<const std::uint32_t> order, double cutoff) {
    bind(schedule, costs);
    return bound_makespan_below(order, cutoff);
  }

  //! Checks `schedule` and `costs` (throwing as `simulate` does) and prepares all
  //! that does not depend on the slot order: op indices, the schedule's
  //! topological order, the hand-off lists and the gradient reductions. Both must
  //! stay alive and unchanged while bound, that is until the next `bind`,
  //! `simulate` or `makespan_below`.
  void bind(const pipeline_schedule& schedule, const multimodal_costs& costs) {
    schedule_ = nullptr;
    costs_ = nullptr;
    check_shapes(schedule, costs);
    index_operations(schedule, costs);
    order_operations(schedule);
    lay_out_replicas(costs);
    index_handoffs(costs);
    model_syncs(schedule, costs);
    schedule_ = &schedule;
    costs_ = &costs;
  }

  //! `makespan_below(schedule, costs, order, cutoff)` for the bound schedule and
  //! costs. Throws `dflop::error` when nothing is bound or `order` is malformed.
  [[nodiscard]] double bound_makespan_below(std::span<const std::uint32_t> order, double cutoff) {
    if (schedule_ == nullptr) throw error("multimodal_simulator: bound_makespan_below needs a bind() first");
    if (!run(order, cutoff)) return std::numeric_limits<double>::infinity();
    double makespan = 0;
    for (std::uint32_t p = 0; p < costs_->positions(); ++p) {
      if (position_begin_[p] < position_begin_[p + 1])  // a rank's ends never decrease
        for (std::uint32_t q = 0, last = replica_base_[position_begin_[p + 1] - 1]; q < replicas_of(p); ++q)
          makespan = std::max(makespan, end_[last + q]);
      makespan = std::max(makespan, reduction_of(p).end);
    }
    return makespan;
  }

  //! Convenience: simulates into a fresh result.
  [[nodiscard]] simulation_result simulate(const pipeline_schedule& schedule, const multimodal_costs& costs,
                                           std::span<const std::uint32_t> order = {}) {
    simulation_result result;
    simulate(schedule, costs, result, order);
    return result;
  }

  //! The pipeline position (schedule rank) that result rank `rank` runs.
  [[nodiscard]] static std::uint32_t position_of(const multimodal_costs& costs, std::uint32_t rank) noexcept {
    return costs.position_of(rank);
  }

private:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  // A position's gradient reduction: `buckets` reductions of `bucket_seconds` each.
  using sync_model = module_costs::gradient_reduction_shape;

  // Schedule operations ("position ops") are numbered position-major: position
  // p's i-th op is `position_begin_[p] + i`. Each gets its dependencies as
  // position ops, tagged with how the replicas wait for them. A run's arrays
  // hold replica q of position op g at `replica_base_[g] + q`.
  void index_operations(const pipeline_schedule& schedule, const multimodal_costs& costs) {
    const std::uint32_t positions = costs.positions();
    index_in_rank_.assign(3 * static_cast<std::size_t>(costs.microbatches) * positions, none);
    position_begin_.assign(1, 0);
    position_of_op_.clear();
    for (std::uint32_t p = 0; p < positions; ++p) {
      for (std::size_t i = 0; i < schedule.rank_ops[p].size(); ++i) {
        auto& slot = index_in_rank_[detail::op_slot(schedule, schedule.rank_ops[p][i])];
        if (slot != none) validate(schedule);
        slot = static_cast<std::uint32_t>(i);
        position_of_op_.push_back(p);
      }
      position_begin_.push_back(static_cast<std::uint32_t>(position_of_op_.size()));
    }
    need_begin_.assign(1, 0);
    needs_.clear();
    const std::uint32_t encoder_stages = costs.encoder.stages;
    for (std::uint32_t p = 0; p < positions; ++p)
      for (const auto& op : schedule.rank_ops[p]) {
        for (const auto& need : dependencies(schedule, op)) {
          const std::uint32_t index = index_in_rank_[detail::op_slot(schedule, need)];
          if (index == none) validate(schedule);
          const bool same_module = (need.stage < encoder_stages) == (p < encoder_stages);
          const need_kind kind = !same_module             ? (p < encoder_stages ? need_kind::fed_llm_replicas
                                                                                : need_kind::feeding_encoder_replicas)
                                 : need.stage != op.stage ? need_kind::same_replica_after_transfer
                                                          : need_kind::same_replica;
          needs_.push_back({position_begin_[need.stage] + index, kind});
        }
        need_begin_.push_back(static_cast<std::uint32_t>(needs_.size()));
      }
  }

  // Where each position op's replicas sit in the run's arrays: replica q of
  // position op g at `replica_base_[g] + q`.
  void lay_out_replicas(const multimodal_costs& costs) {
    const std::size_t n = position_of_op_.size();
    replica_base_.resize(n + 1);
    replica_base_[0] = 0;
    for (std::size_t g = 0; g < n; ++g) replica_base_[g + 1] = replica_base_[g] + replicas_of(costs, position_of_op_[g]);
    const std::size_t nodes = replica_base_[n];
    duration_.resize(nodes);
    delay_.resize(nodes);
    start_.resize(nodes);
    end_.resize(nodes);
    still_to_come_.resize(nodes);
  }

  // A topological order of the position ops over rank order and dependencies
  // (Kahn's algorithm, first in first out). A cycle is a deadlock of the
  // schedule itself, which `validate` reports.
  void order_operations(const pipeline_schedule& schedule) {
    const std::size_t n = position_of_op_.size();
    waiting_.assign(n, 0);
    next_begin_.assign(n + 1, 0);
    for (std::size_t g = 0; g < n; ++g) {
      const bool first_of_position = g == position_begin_[position_of_op_[g]];
      waiting_[g] = need_begin_[g + 1] - need_begin_[g] + (first_of_position ? 0U : 1U);
      for (std::uint32_t e = need_begin_[g]; e < need_begin_[g + 1]; ++e) ++next_begin_[needs_[e].op + 1];
    }
    for (std::size_t g = 0; g < n; ++g) next_begin_[g + 1] += next_begin_[g];
    nexts_.resize(needs_.size());
    fill_at_.assign(next_begin_.begin(), next_begin_.end() - 1);
    for (std::uint32_t g = 0; g < n; ++g)
      for (std::uint32_t e = need_begin_[g]; e < need_begin_[g + 1]; ++e) nexts_[fill_at_[needs_[e].op]++] = g;
    topological_.clear();
    for (std::uint32_t g = 0; g < n; ++g)
      if (waiting_[g] == 0) topological_.push_back(g);
    for (std::size_t at = 0; at < topological_.size(); ++at) {
      const std::uint32_t g = topological_[at];
      const bool last_of_position = g + 1 == position_begin_[position_of_op_[g] + 1];
      if (!last_of_position && --waiting_[g + 1] == 0) topological_.push_back(g + 1);
      for (std::uint32_t e = next_begin_[g]; e < next_begin_[g + 1]; ++e)
        if (--waiting_[nexts_[e]] == 0) topological_.push_back(nexts_[e]);
    }
    if (topological_.size() != n) {
      validate(schedule);
      throw schedule_error("multimodal schedule '" + schedule.name + "': deadlock");
    }
  }

  // Each position's gradient reduction (an all-reduce or, sharded, a
  // reduce-scatter, in buckets) and what each rank surely adds after its last
  // op: one bucket's reduction when that op produces gradients (the last bucket
  // is final when it ends; the shipped schedules all end so), else nothing.
  void model_syncs(const pipeline_schedule& schedule, const multimodal_costs& costs) {
    const std::uint32_t positions = costs.positions();
    position_sync_.resize(positions);
    gather_seconds_.resize(positions);
    for (std::uint32_t p = 0; p < positions; ++p) {
      const bool in_encoder = p < costs.encoder.stages;
      const module_costs& module = in_encoder ? costs.encoder : costs.llm;
      const std::uint32_t local = in_encoder ? p : p - costs.encoder.stages;
      gather_seconds_[p] = module.parameter_gather_seconds(local);
      position_sync_[p] = module.gradient_reduction(local, costs.gradient_bucket_bytes);
    }
    const op_kind producer = schedule.split_backward ? op_kind::weight : op_kind::backward;
    rank_sync_.resize(costs.ranks());
    for (std::uint32_t r = 0; r < costs.ranks(); ++r) {
      const std::uint32_t p = costs.position_of(r);
      const bool ends_producing = !schedule.rank_ops[p].empty() && schedule.rank_ops[p].back().kind == producer;
      rank_sync_[r] = position_sync_[p].buckets <= 1 || ends_producing ? position_sync_[p].bucket_seconds : 0.0;
    }
  }

  // Under `order`: every op's duration, the transfer before it from its
  // neighbour stage on the same replica (if it waits for one), and, for bounded
  // runs, its rank's later ops plus its sync tail.
  void price_operations(std::span<const std::uint32_t> order, bool bounded) {
    const pipeline_schedule& schedule = *schedule_;
    const multimodal_costs& costs = *costs_;
    const std::uint32_t m = costs.microbatches;
    for (std::uint32_t p = 0; p < costs.positions(); ++p) {
      const bool in_encoder = p < costs.encoder.stages;
      const module_costs& module = in_encoder ? costs.encoder : costs.llm;
      const std::uint32_t local = in_encoder ? p : p - costs.encoder.stages;
      const bool with_weight = !module.weight.empty();
      const bool with_transfer = !module.transfer.empty();
      const auto& ops = schedule.rank_ops[p];
      for (std::uint32_t q = 0; q < module.replicas; ++q) {
        for (std::size_t i = 0; i < ops.size(); ++i) {
          const pipeline_op& op = ops[i];
          const std::uint32_t node = replica_base_[position_begin_[p] + i] + q;
          const std::uint32_t k = order.empty() ? op.microbatch : order[op.microbatch];
          const std::size_t at = module.at(q, k, local, m);
          double transfer = 0;  // F(s) waits for F(s-1)'s output, B(s) for B(s+1)'s gradient
          switch (op.kind) {
            case op_kind::forward:
              duration_[node] = module.forward[at];
              if (with_transfer && local > 0) transfer = module.transfer[at - 1];
              break;
            case op_kind::backward:
              duration_[node] = module.backward[at] + (with_weight && !schedule.split_backward ? module.weight[at] : 0.0);
              if (with_transfer && local + 1 < module.stages) transfer = module.transfer[at];
              break;
            case op_kind::weight: duration_[node] = with_weight ? module.weight[at] : 0.0; break;
          }
          delay_[node] = transfer;
        }
        if (!bounded) continue;
        double after = rank_sync_[rank_of(costs, p, q)];
        for (std::size_t i = ops.size(); i-- > 0;) {
          const std::uint32_t node = replica_base_[position_begin_[p] + i] + q;
          still_to_come_[node] = after;
          after += duration_[node];
        }
      }
    }
  }

  // Start and end of every op under `order`, position ops in topological
  // order, each over its replicas: an op starts when its rank's previous op and
  // each dependency (plus its transfer) have ended; same-module dependencies are
  // on the same replica, an LLM first stage's forward waits for the encoder
  // replicas holding its samples, an encoder last stage's backward for every LLM
  // replica it fed. False when it stopped because an op proved the makespan at
  // least `cutoff` (its end, its rank's later ops and its sync tail).
  bool run(std::span<const std::uint32_t> order, double cutoff) {
    const multimodal_costs& costs = *costs_;
    check_order(costs, order);
    const bool bounded = cutoff < std::numeric_limits<double>::infinity();
    price_operations(order, bounded);
    const std::uint32_t m = costs.microbatches;
    const std::uint32_t llm_replicas = costs.llm.replicas;
    for (const std::uint32_t g : topological_) {
      const std::uint32_t p = position_of_op_[g];
      const bool first_of_rank = g == position_begin_[p];
      const std::uint32_t base = replica_base_[g];
      const std::uint32_t previous = first_of_rank ? 0 : replica_base_[g - 1];
      const std::uint32_t replicas = replica_base_[g + 1] - base;
      const pipeline_op& op = schedule_->rank_ops[p][g - position_begin_[p]];
      const std::uint32_t k = order.empty() ? op.microbatch : order[op.microbatch];
      for (std::uint32_t q = 0; q < replicas; ++q) {
        const std::uint32_t node = base + q;
        double begin = first_of_rank ? gather_seconds_[p] : end_[previous + q];
        for (std::uint32_t e = need_begin_[g]; e < need_begin_[g + 1]; ++e) {
          const std::uint32_t from = replica_base_[needs_[e].op];
          switch (needs_[e].kind) {
            case need_kind::same_replica: begin = std::max(begin, end_[from + q]); break;
            case need_kind::same_replica_after_transfer: begin = std::max(begin, end_[from + q] + delay_[node]); break;
            case need_kind::feeding_encoder_replicas: {  // the encoder replicas holding this microbatch's samples
              const std::size_t key = static_cast<std::size_t>(k) * llm_replicas + q;
              for (std::uint32_t j = fed_by_begin_[key]; j < fed_by_begin_[key + 1]; ++j)
                begin = std::max(begin, end_[from + fed_by_[j].encoder_replica] + fed_by_[j].seconds);
              break;
            }
            case need_kind::fed_llm_replicas: {  // every LLM replica this encoder part fed
              const std::size_t key = static_cast<std::size_t>(q) * m + k;
              for (std::uint32_t j = feeds_begin_[key]; j < feeds_begin_[key + 1]; ++j)
                begin = std::max(begin, end_[from + links_[j].llm_replica] + links_[j].seconds);
              break;
            }
          }
        }
        start_[node] = begin;
        end_[node] = begin + duration_[node];
        if (bounded && end_[node] + still_to_come_[node] >= cutoff) return false;
      }
    }
    return true;
  }

  // The result of a finished run: op times, per-rank peaks, and each position's
  // all-reduce.
  void finish(simulation_result& result) {
    const multimodal_costs& costs = *costs_;
    const std::uint32_t ranks = costs.ranks();
    sizes_.clear();
    for (std::uint32_t r = 0; r < ranks; ++r) sizes_.push_back(schedule_->rank_ops[costs.position_of(r)].size());
    graph_.reset(sizes_);
    graph_.start.resize(graph_.ops());
    graph_.end.resize(graph_.ops());
    for (std::uint32_t r = 0; r < ranks; ++r) {
      const std::uint32_t p = costs.position_of(r), q = costs.replica_of(r);
      for (std::uint32_t i = 0, id = graph_.rank_begin[r]; id < graph_.rank_begin[r + 1]; ++i, ++id) {
        const std::uint32_t node = replica_base_[position_begin_[p] + i] + q;
        graph_.duration[id] = duration_[node];
        graph_.start[id] = start_[node];
        graph_.end[id] = end_[node];
      }
    }
    detail::summarize(graph_, result);
    peak_activations(*schedule_, position_peaks_);
    result.peak_activations.resize(result.ranks());
    result.gradient_sync.resize(result.ranks());
    result.parameter_gather.assign(result.ranks(), op_timing{});
    for (std::uint32_t p = 0; p < costs.positions(); ++p) {
      const op_timing reduced = reduction_of(p);
      const std::uint32_t replicas = p < costs.encoder.stages ? costs.encoder.replicas : costs.llm.replicas;
      for (std::uint32_t q = 0; q < replicas; ++q) {
        result.peak_activations[rank_of(costs, p, q)] = position_peaks_[p];
        result.gradient_sync[rank_of(costs, p, q)] = reduced;
        result.parameter_gather[rank_of(costs, p, q)] = {0.0, gather_seconds_[p]};
      }
      result.makespan = std::max(result.makespan, reduced.end);
    }
    detail::finish_bubble(result);
  }

  // Position p's gradient all-reduce after a finished run: one all-reduce once
  // every replica is done, or buckets (`bucketed_sync`).
  [[nodiscard]] op_timing reduction_of(std::uint32_t p) const {
    const multimodal_costs& costs = *costs_;
    const std::uint32_t replicas = p < costs.encoder.stages ? costs.encoder.replicas : costs.llm.replicas;
    const sync_model& sync = position_sync_[p];
    if (sync.buckets > 1) {
      const op_kind producer = schedule_->split_backward ? op_kind::weight : op_kind::backward;
      return bucketed_sync(*schedule_, p, replicas, producer, sync);
    }
    double ready = 0;
    for (std::uint32_t g = position_begin_[p]; g < position_begin_[p + 1]; ++g)
      for (std::uint32_t q = 0; q < replicas; ++q) ready = std::max(ready, end_[replica_base_[g] + q]);
    return {ready, ready + sync.bucket_seconds};
  }

  // Bucket i of n is final on a replica at s + (i + 1) T / n, where [s, s + T)
  // is the replica's last `producer` op; its reduction starts when every
  // replica has it and bucket i - 1 is reduced. Returns [first start, last end].
  op_timing bucketed_sync(const pipeline_schedule& schedule, std::uint32_t p, std::uint32_t replicas, op_kind producer,
                          const sync_model& sync) const {
    const auto& ops = schedule.rank_ops[p];
    std::size_t last = ops.size();
    for (std::size_t i = ops.size(); i-- > 0;)
      if (ops[i].kind == producer) {
        last = i;
        break;
      }
    double first_start = 0;
    double done = 0;
    for (std::uint32_t b = 0; b < sync.buckets; ++b) {
      double ready = 0;
      for (std::uint32_t q = 0; q < replicas; ++q) {
        if (last == ops.size()) {  // no such op (cannot happen for a valid schedule): after the rank's end
          ready = std::max(ready, end_[replica_base_[position_begin_[p + 1] - 1] + q]);
          continue;
        }
        const std::uint32_t op = replica_base_[position_begin_[p] + last] + q;
        const double fraction = static_cast<double>(b + 1) / sync.buckets;
        ready = std::max(ready, b + 1 == sync.buckets ? end_[op] : start_[op] + fraction * (end_[op] - start_[op]));
      }
      const double start = std::max(ready, done);
      if (b == 0) first_start = start;
      done = start + sync.bucket_seconds;
    }
    return {first_start, done};
  }

  // Data-parallel replicas of pipeline position `position`.
  static std::uint32_t replicas_of(const multimodal_costs& costs, std::uint32_t position) noexcept {
    return position < costs.encoder.stages ? costs.encoder.replicas : costs.llm.replicas;
  }
  [[nodiscard]] std::uint32_t replicas_of(std::uint32_t position) const noexcept { return replicas_of(*costs_, position); }

  // Result rank of pipeline position `position`, replica `replica`.
  static std::uint32_t rank_of(const multimodal_costs& costs, std::uint32_t position, std::uint32_t replica) noexcept {
    return position < costs.encoder.stages ? costs.encoder_rank(position, replica)
                                           : costs.llm_rank(position - costs.encoder.stages, replica);
  }

  static void check_shapes(const pipeline_schedule& schedule, const multimodal_costs& costs) {
    costs.check();
    if (schedule.ranks == 0 || schedule.rank_ops.size() != schedule.ranks) validate(schedule);
    if (schedule.chunks != 1) throw error("simulate: multimodal pipelines take one-chunk schedules (no interleaving)");
    if (schedule.ranks != costs.positions() || schedule.microbatches != costs.microbatches)
      throw error("simulate: costs are for " + std::to_string(costs.microbatches) + " microbatches x " +
                  std::to_string(costs.positions()) + " stages, the schedule has " +
                  std::to_string(schedule.microbatches) + " x " + std::to_string(schedule.ranks));
    std::size_t ops = 0;
    for (const auto& list : schedule.rank_ops) ops += list.size();
    if (ops != schedule.op_count()) validate(schedule);
    for (std::uint32_t p = 0; p < schedule.ranks; ++p)
      for (const auto& op : schedule.rank_ops[p])
        if (op.microbatch >= schedule.microbatches || op.stage != p) validate(schedule);
  }

  static void check_order(const multimodal_costs& costs, std::span<const std::uint32_t> order) {
    if (!order.empty() && order.size() != costs.microbatches)
      throw error("simulate: the slot order has " + std::to_string(order.size()) + " entries, expected " +
                  std::to_string(costs.microbatches));
    for (auto j : order)
      if (j >= costs.microbatches) throw error("simulate: slot order entry out of range");
  }

  // One hand-off that carries data: encoder replica e feeds LLM replica r in a slot.
  struct feeding {
    std::uint32_t encoder_replica = 0;
    std::uint32_t llm_replica = 0;
    double seconds = 0;
  };

  // The hand-offs that carry data, as lists: `links_` in (encoder replica, slot,
  // LLM replica) order with `feeds_begin_[e * m + k]` where (e, k)'s start, and
  // `fed_by_` (the same links, encoder replicas ascending) with
  // `fed_by_begin_[k * llm replicas + r]`. The table is dense but an LLM
  // microbatch holds samples of few encoder replicas: one pass over it replaces a
  // scan of every replica per op. Predecessors are added in the scan's order.
  void index_handoffs(const multimodal_costs& costs) {
    const std::uint32_t m = costs.microbatches;
    const std::size_t encoder_keys = static_cast<std::size_t>(costs.encoder.stages > 0 ? costs.encoder.replicas : 0) * m;
    const std::size_t llm_keys = static_cast<std::size_t>(m) * costs.llm.replicas;
    links_.clear();
    feeds_begin_.assign(encoder_keys + 1, 0);
    fed_by_begin_.assign(llm_keys + 1, 0);
    if (encoder_keys == 0) return;
    for (std::uint32_t e = 0; e < costs.encoder.replicas; ++e)
      for (std::uint32_t k = 0; k < m; ++k) {
        feeds_begin_[static_cast<std::size_t>(e) * m + k] = static_cast<std::uint32_t>(links_.size());
        for (std::uint32_t r = 0; r < costs.llm.replicas; ++r)
          if (const handoff& link = costs.handoffs[costs.handoff_at(e, k, r)]; link.feeds) {
            links_.push_back({e, r, link.seconds});
            ++fed_by_begin_[static_cast<std::size_t>(k) * costs.llm.replicas + r + 1];
          }
      }
    feeds_begin_[encoder_keys] = static_cast<std::uint32_t>(links_.size());
    for (std::size_t key = 0; key < llm_keys; ++key) fed_by_begin_[key + 1] += fed_by_begin_[key];
    fed_by_.resize(links_.size());
    fill_at_.assign(fed_by_begin_.begin(), fed_by_begin_.end() - 1);
    for (std::uint32_t e = 0, j = 0; e < costs.encoder.replicas; ++e)
      for (std::uint32_t k = 0; k < m; ++k)
        for (const std::uint32_t end = feeds_begin_[static_cast<std::size_t>(e) * m + k + 1]; j < end; ++j)
          fed_by_[fill_at_[static_cast<std::size_t>(k) * costs.llm.replicas + links_[j].llm_replica]++] = links_[j];
  }

  // Bound by `bind`: the schedule and costs, and what follows from them alone.
  const pipeline_schedule* schedule_ = nullptr;
  const multimodal_costs* costs_ = nullptr;
  // How a position op waits for one of its dependencies.
  enum class need_kind : std::uint8_t {
    same_replica,                 // on the same replica, same stage
    same_replica_after_transfer,  // on the same replica, a neighbour stage's output
    feeding_encoder_replicas,     // an LLM first stage waits for the encoder replicas feeding it
    fed_llm_replicas,             // an encoder last stage waits for the LLM replicas it fed
  };
  struct position_need {
    std::uint32_t op = 0;  // the position op needed
    need_kind kind = need_kind::same_replica;
  };
  std::vector<std::uint32_t> position_begin_, position_of_op_;  // position ops
  std::vector<std::uint32_t> need_begin_;                       // their dependencies
  std::vector<position_need> needs_;
  std::vector<std::uint32_t> replica_base_;                     // their replicas in the run's arrays
  std::vector<std::uint32_t> topological_;                       // their order
  std::vector<std::uint32_t> next_begin_, nexts_, waiting_;      // Kahn's workspace
  std::vector<feeding> links_;
  std::vector<feeding> fed_by_;
  std::vector<std::uint32_t> feeds_begin_, fed_by_begin_, fill_at_;
  std::vector<std::size_t> sizes_;
  std::vector<std::uint32_t> index_in_rank_;
  std::vector<sync_model> position_sync_;
  std::vector<double> gather_seconds_;  // per position: the parameter all-gather before its first op (0: none)
  std::vector<double> rank_sync_;
  // Per run, replica-minor (see `lay_out_replicas`).
  std::vector<double> duration_, delay_, start_, end_, still_to_come_;
  // A finished run by rank, for `detail::summarize` (rank and time arrays only).
  detail::op_graph graph_;
  std::vector<std::uint32_t> position_peaks_;
};

//! Simulates one multimodal iteration (see `multimodal_simulator::simulate`).
[[nodiscard]] inline simulation_result simulate(const pipeline_schedule& schedule, const multimodal_costs& costs,
                                                std::span<const std::uint32_t> order = {}) {
  return multimodal_simulator{}.simulate(schedule, costs, order);
}

}  // namespace dflop
