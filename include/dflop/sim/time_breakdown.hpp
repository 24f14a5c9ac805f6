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
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! Shares of GPU time (GPUs x makespan) of one simulated iteration; they add up to 1.
struct time_breakdown {
  double ops = 0;            //!< F, B and W ops running (their TP communication and recomputation included)
  double gradient_sync = 0;  //!< data-parallel gradient reduction while no op runs on the GPU
  double idle = 0;           //!< neither: the sum of the four parts below

  //! Idle, split by where it falls on each rank, so a lever can aim at its part:
  //! before the rank's first op, less its reductions there (the parameter
  //! gather): pipeline fill, an LLM rank waiting for the encoder's first parts.
  //! A rank with nothing to run is idle here throughout.
  double idle_before_first_op = 0;
  //! Between a rank's first op and the end of its last op or reduction: pipeline
  //! bubbles in the steady state, waits for the other module or the next stage.
  double idle_between_ops = 0;
  //! After the rank's last op and reduction, until the iteration ends: the
  //! pipeline's drain, and ranks with less work than the slowest replica.
  double idle_after_last_op = 0;
  //! GPUs no rank stands for, the whole iteration.
  double unused_gpus = 0;

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
  // Per track: its ops' time, its reductions' time outside them (and the part of
  // that before its first op, such as the parameter gather), its first op's start
  // and its last event's end.
  struct track_times {
    double busy = 0;
    double sync = 0;
    double sync_before_first_op = 0;
    double first_op_start = std::numeric_limits<double>::infinity();
    double last_end = 0;
    std::vector<const timeline_event*> ops;
  };
  std::vector<track_times> of(line.tracks.size());
  for (const timeline_event& event : line.events) {
    if (event.track >= of.size())
      throw error("breakdown_of: an event on track " + std::to_string(event.track) + " of " + std::to_string(of.size()));
    track_times& track = of[event.track];
    track.last_end = std::max(track.last_end, event.end);
    if (event.kind == timeline_kind::gradient_sync) continue;
    track.first_op_start = std::min(track.first_op_start, event.start);
    track.busy += event.end - event.start;
    track.ops.push_back(&event);
  }
  for (const timeline_event& event : line.events) {
    if (event.kind != timeline_kind::gradient_sync) continue;
    track_times& track = of[event.track];
    double uncovered = event.end - event.start;  // a track's ops never overlap each other
    for (const timeline_event* op : track.ops)
      uncovered -= std::max(0.0, std::min(op->end, event.end) - std::max(op->start, event.start));
    track.sync += std::max(0.0, uncovered);
    // No op runs before the first, so all of this part is uncovered.
    track.sync_before_first_op +=
        std::max(0.0, std::min(event.end, track.first_op_start) - std::min(event.start, track.first_op_start));
  }
  time_breakdown out;
  const double total = gpus * line.makespan;
  for (std::size_t t = 0; t < of.size(); ++t) {
    const track_times& track = of[t];
    const double share = gpus_of_track[t] / total;
    out.ops += share * track.busy;
    out.gradient_sync += share * track.sync;
    if (track.ops.empty()) {  // nothing to run: idle throughout, but for its reductions
      out.idle_before_first_op += share * std::max(0.0, line.makespan - track.sync);
      continue;
    }
    out.idle_before_first_op += share * std::max(0.0, track.first_op_start - track.sync_before_first_op);
    out.idle_between_ops += share * std::max(0.0, track.last_end - track.first_op_start - track.busy -
                                                      (track.sync - track.sync_before_first_op));
    out.idle_after_last_op += share * std::max(0.0, line.makespan - track.last_end);
  }
  out.unused_gpus = std::max(0.0, (gpus - used) / gpus);
  out.idle = out.idle_before_first_op + out.idle_between_ops + out.idle_after_last_op + out.unused_gpus;
  return out;
}

//! The breakdown of tracks [`first`, `last`) of `line` alone, as shares of their
//! own GPU time (their GPUs x the makespan): where one module's ranks spend
//! theirs. The whole iteration's makespan still bounds them (a module done early
//! is idle after its last op). Throws `dflop::error` when the range is empty or
//! past the tracks, and as `breakdown_of`.
[[nodiscard]] inline time_breakdown breakdown_of_tracks(const timeline& line, std::span<const double> gpus_of_track,
                                                        std::size_t first, std::size_t last) {
  if (gpus_of_track.size() != line.tracks.size())
    throw error("breakdown_of_tracks: " + std::to_string(gpus_of_track.size()) + " GPU counts for " +
                std::to_string(line.tracks.size()) + " tracks");
  if (!(first < last && last <= line.tracks.size()))
    throw error("breakdown_of_tracks: tracks [" + std::to_string(first) + ", " + std::to_string(last) + ") of " +
                std::to_string(line.tracks.size()));
  timeline part;
  part.makespan = line.makespan;
  part.tracks.assign(line.tracks.begin() + static_cast<std::ptrdiff_t>(first),
                     line.tracks.begin() + static_cast<std::ptrdiff_t>(last));
  for (timeline_event event : line.events) {
    if (event.track < first || event.track >= last) continue;
    event.track -= static_cast<std::uint32_t>(first);
    part.events.push_back(event);
  }
  const auto gpus = gpus_of_track.subspan(first, last - first);
  double sum = 0;
  for (double g : gpus) sum += g;
  return breakdown_of(part, gpus, sum);
}

//! One breakdown per module of a multimodal iteration, each over its own ranks
//! (encoder ranks first, as `multimodal_costs::ranks` numbers them). An LLM's
//! ranks busy while the encoder's idle between their ops say the encoder has
//! more GPUs than its work needs, and the other way round.
struct module_breakdowns {
  std::optional<time_breakdown> encoder;  //!< empty where the plan has no encoder ranks
  time_breakdown llm;                     //!< the LLM's ranks
};

//! `module_breakdowns` of `line`, a timeline of `costs`' iteration with
//! `gpus_of_track` from `gpus_per_rank`.
[[nodiscard]] inline module_breakdowns breakdown_by_module(const timeline& line, std::span<const double> gpus_of_track,
                                                           const multimodal_costs& costs) {
  const std::size_t encoder_ranks = static_cast<std::size_t>(costs.encoder.stages) * costs.encoder.replicas;
  module_breakdowns out;
  if (encoder_ranks > 0) out.encoder = breakdown_of_tracks(line, gpus_of_track, 0, encoder_ranks);
  out.llm = breakdown_of_tracks(line, gpus_of_track, encoder_ranks, line.tracks.size());
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
