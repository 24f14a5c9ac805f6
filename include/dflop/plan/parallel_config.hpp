// SPDX-License-Identifier: Apache-2.0
//! \file
//! A 3D parallel configuration: tensor, pipeline and data parallel degrees per
//! module (encoder and LLM may differ), and how many microbatches each LLM
//! replica runs per iteration. Ranks are laid out TP fastest, then PP, then DP,
//! encoder GPUs first.
#pragma once

#include <dflop/cost/memory_model.hpp>

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

namespace dflop {

//! Degrees of one module: `tp * pp * dp` GPUs.
struct module_parallelism {
  int tp = 1;  //!< tensor-parallel degree (GPUs sharing each layer)
  int pp = 1;  //!< pipeline stages
  int dp = 1;  //!< data-parallel replicas
  //! Activation recomputation: a recomputed layer keeps only its input and redoes
  //! its forward inside its backward (less memory, one more forward of time).
  bool recompute = false;
  //! Distributed optimizer (ZeRO-1): optimizer states split over the dp replicas.
  //! Its reduce-scatter + all-gather moves no more than the all-reduce it replaces.
  bool distributed_optimizer = false;
  //! With `recompute`: how many of each stage's layers recompute, its first ones
  //! (Megatron-LM's block method, `--recompute-num-layers`); 0: all of them. The
  //! planner recomputes the fewest with which the plan fits, since every
  //! recomputed layer costs its forward again.
  int recompute_layers = 0;

  //! GPUs the module occupies.
  [[nodiscard]] constexpr int gpus() const noexcept { return tp * pp * dp; }

  friend bool operator==(const module_parallelism&, const module_parallelism&) = default;
  friend auto operator<=>(const module_parallelism&, const module_parallelism&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const module_parallelism& degrees) {
  out << "tp" << degrees.tp << " pp" << degrees.pp << " dp" << degrees.dp;
  if (degrees.recompute) out << " recompute";
  if (degrees.recompute && degrees.recompute_layers > 0) out << "(" << degrees.recompute_layers << " per stage)";
  if (degrees.distributed_optimizer) out << " dist-opt";
  return out;
}

//! The memory-saving choices `degrees` asks the memory model to price.
[[nodiscard]] constexpr memory_choices memory_choices_of(const module_parallelism& degrees) noexcept {
  return {degrees.recompute, degrees.distributed_optimizer ? degrees.dp : 1, degrees.recompute_layers};
}

//! How many of a stage's `stage_layers` layers `degrees` recomputes.
[[nodiscard]] constexpr std::int64_t recomputed_layers(const module_parallelism& degrees,
                                                       std::int64_t stage_layers) noexcept {
  return recomputed_layers(memory_choices_of(degrees), stage_layers);
}

//! Both modules' degrees and the microbatch count.
struct parallel_config {
  module_parallelism encoder;  //!< the modality encoder (+ projector)
  module_parallelism llm;      //!< the decoder LLM
  int microbatches = 1;        //!< m: microbatches per LLM replica (= encoder slots) per iteration
  //! Forwards each encoder position runs ahead of the schedule's own warm-up
  //! (`with_run_ahead`, schedule/run_ahead.hpp): under 1F1B and ZB-H1 an encoder
  //! position's next forward waits for a backward to come back from the LLM,
  //! so an LLM replica can wait for its next part; running ahead holds that many
  //! more encoder microbatches in flight. 0: the schedule as it is.
  int encoder_run_ahead = 0;

  //! GPUs in all.
  [[nodiscard]] constexpr int gpus() const noexcept { return encoder.gpus() + llm.gpus(); }
  //! Stages of the combined pipeline (encoder stages, then LLM stages).
  [[nodiscard]] constexpr int stages() const noexcept { return encoder.pp + llm.pp; }
  //! Whether there is an encoder module (`encoder.pp == 0`: an LLM-only pipeline).
  [[nodiscard]] constexpr bool has_encoder() const noexcept { return encoder.pp > 0; }
  //! Bins one global batch is packed into: one per (LLM replica, microbatch).
  [[nodiscard]] constexpr int bins() const noexcept { return llm.dp * microbatches; }

  friend bool operator==(const parallel_config&, const parallel_config&) = default;
  friend auto operator<=>(const parallel_config&, const parallel_config&) = default;
};

//! `config` with recomputation and the distributed optimizer off in both modules.
[[nodiscard]] constexpr parallel_config without_memory_savers(parallel_config config) noexcept {
  for (module_parallelism* degrees : {&config.encoder, &config.llm}) {
    degrees->recompute = false;
    degrees->recompute_layers = 0;
    degrees->distributed_optimizer = false;
  }
  return config;
}

//! `config` recomputing every layer of each module that recomputes any (its
//! `recompute_layers` back to 0): the full-recomputation memory variant.
[[nodiscard]] constexpr parallel_config fully_recomputing(parallel_config config) noexcept {
  config.encoder.recompute_layers = 0;
  config.llm.recompute_layers = 0;
  return config;
}

inline std::ostream& operator<<(std::ostream& out, const parallel_config& config) {
  out << "encoder(" << config.encoder << ") llm(" << config.llm << ") m" << config.microbatches;
  if (config.encoder_run_ahead > 0) out << " encoder ahead " << config.encoder_run_ahead;
  return out;
}

//! Every (tp, pp, dp) with tp * pp * dp = `gpus`, where tp divides
//! `gpus_per_node` (a TP group stays in one node) and `head_count` (heads split
//! evenly), and pp <= `max_stages`. Ordered by (tp, pp, dp).
[[nodiscard]] inline std::vector<module_parallelism> module_parallelisms(int gpus, int gpus_per_node,
                                                                        std::int64_t head_count, int max_stages) {
  std::vector<module_parallelism> result;
  for (int tp = 1; tp <= gpus && tp <= gpus_per_node; ++tp) {
    if (gpus % tp != 0 || gpus_per_node % tp != 0 || head_count % tp != 0) continue;
    for (int pp = 1; pp <= gpus / tp && pp <= max_stages; ++pp)
      if ((gpus / tp) % pp == 0) result.push_back({tp, pp, gpus / tp / pp});
  }
  return result;
}

}  // namespace dflop
