// SPDX-License-Identifier: Apache-2.0
//! \file
//! Where a simulated iteration's GPU time goes: running ops, reducing
//! gradients where no op runs, or idle. What separates a plan from the ideal
//! bound splits into time the GPUs spend in ops above the ideal (TP
//! communication, recomputation, work below the best efficiency) and time they
//! spend outside ops (pipeline bubbles, waits between the modules, the gradient
//! reduction at the end): this says which, so the next lever is the right one.
#pragma once

#include <dflop/error.hpp>
#include <dflop/sim/timeline.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! Shares of GPU time (GPUs x makespan) of one simulated iteration; they add up to 1.
struct time_breakdown {
  double ops = 0;            //!< F, B and W ops running (their TP communication and recomputation included)
  double gradient_sync = 0;  //!< data-parallel gradient reduction while no op runs on the GPU
  double idle = 0;           //!< neither: pipeline bubbles, waits for the other module, GPUs no rank uses

  friend bool operator==(const time_breakdown&, const time_breakdown&) = default;
};

//! The breakdown of `line`, whose track t stands for `gpus_of_track[t]` GPUs (a
//! rank of the multimodal simulator is one TP group: its degree), out of `gpus`
//! in all (GPUs no track stands for count as idle). A gradient reduction that
//! overlaps an op on its track counts as the op's time. Throws `dflop::error`
//! when the sizes disagree, a track has no GPUs, the tracks stand for more than
//! `gpus`, or the makespan is not positive.
[[nodiscard]] inline time_breakdown breakdown_of(const timeline& line, std::span<const double> gpus_of_track,
                                                 double gpus) {
  if (gpus_of_track.size() != line.tracks.size())
    throw error("breakdown_of: " + std::to_string(gpus_of_track.size()) + " GPU counts for " +
                std::to_string(line.tracks.size()) + " tracks");
  double used = 0;
  for (double g : gpus_of_track) {
    if (!(g > 0)) throw error("breakdown_of: a track stands for no GPUs");
    used += g;
  }
  if (!(used <= gpus * (1 + 1e-12)))
    throw error("breakdown_of: the tracks stand for " + std::to_string(used) + " GPUs, more than the " +
                std::to_string(gpus) + " in all");
  if (!(line.makespan > 0) || !std::isfinite(line.makespan)) throw error("breakdown_of: the makespan must be positive");
  std::vector<double> busy(line.tracks.size(), 0.0), sync(line.tracks.size(), 0.0);
  std::vector<std::vector<const timeline_event*>> ops_of(line.tracks.size());
  for (const timeline_event& event : line.events) {
    if (event.track >= line.tracks.size())
      throw error("breakdown_of: an event on track " + std::to_string(event.track) + " of " +
                  std::to_string(line.tracks.size()));
    if (event.kind == timeline_kind::gradient_sync) continue;
    busy[event.track] += event.end - event.start;
    ops_of[event.track].push_back(&event);
  }
  for (const timeline_event& event : line.events) {
    if (event.kind != timeline_kind::gradient_sync) continue;
    double uncovered = event.end - event.start;  // a track's ops never overlap each other
    for (const timeline_event* op : ops_of[event.track])
      uncovered -= std::max(0.0, std::min(op->end, event.end) - std::max(op->start, event.start));
    sync[event.track] += std::max(0.0, uncovered);
  }
  time_breakdown out;
  const double total = gpus * line.makespan;
  for (std::size_t t = 0; t < busy.size(); ++t) {
    out.ops += gpus_of_track[t] * busy[t] / total;
    out.gradient_sync += gpus_of_track[t] * sync[t] / total;
  }
  out.idle = std::max(0.0, 1.0 - out.ops - out.gradient_sync);
  return out;
}

//! GPUs each rank of a multimodal simulation stands for: its module's TP degree
//! (encoder ranks first, as `multimodal_costs::ranks` numbers them).
[[nodiscard]] inline std::vector<double> gpus_per_rank(const multimodal_costs& costs, int encoder_tp, int llm_tp) {
  std::vector<double> out;
  out.reserve(costs.ranks());
  for (std::uint32_t r = 0; r < costs.ranks(); ++r)
    out.push_back(r < costs.encoder.stages * costs.encoder.replicas ? encoder_tp : llm_tp);
  return out;
}

}  // namespace dflop
