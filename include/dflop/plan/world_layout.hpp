// SPDX-License-Identifier: Apache-2.0
//! \file
//! Who runs what: the one description of a configuration's ranks that the
//! planner (placement, links), the batch scheduler, the simulator's costs and
//! the executors share. World rank = GPU number: encoder GPUs first, then LLM
//! GPUs; inside a module the tensor-parallel rank varies fastest, then the
//! pipeline stage, then the data-parallel replica, so a TP group sits on
//! neighbouring GPUs (one node) and a replica's stages on consecutive ones.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/parallel_config.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace dflop {

//! What one world rank runs.
struct rank_role {
  module_kind module = module_kind::llm;  //!< the module its stage belongs to
  std::uint32_t stage = 0;                //!< pipeline stage within the module
  std::uint32_t replica = 0;              //!< data-parallel replica within the module
  std::uint32_t tp_rank = 0;              //!< rank within the stage's tensor-parallel group
  std::uint32_t position = 0;             //!< position in the combined pipeline: encoder stages first

  //! Whether the rank runs an encoder stage.
  [[nodiscard]] bool encoder() const noexcept { return module == module_kind::encoder; }

  friend bool operator==(const rank_role&, const rank_role&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const rank_role& role) {
  return out << role.module << " stage " << role.stage << " replica " << role.replica << " tp " << role.tp_rank;
}

//! The ranks of a configuration: their roles and groups. An encoder with
//! `pp == 0` means a model without one (LLM-only runs of the multimodal executor).
class world_layout {
public:
  //! The layout of `config`'s modules (the microbatch count plays no part).
  //! Throws `dflop::error` for a degree below one (the encoder's `pp` may be 0: no encoder).
  explicit world_layout(const parallel_config& config) : world_layout(config.encoder, config.llm) {}

  //! The layout of an encoder and an LLM with these degrees.
  world_layout(const module_parallelism& encoder, const module_parallelism& llm) : encoder_(encoder), llm_(llm) {
    check(llm_, "llm", false);
    check(encoder_, "encoder", true);
  }

  //! A module's degrees.
  [[nodiscard]] const module_parallelism& degrees(module_kind kind) const noexcept {
    return kind == module_kind::encoder ? encoder_ : llm_;
  }
  //! Whether there is an encoder module.
  [[nodiscard]] bool has_encoder() const noexcept { return encoder_.pp > 0; }
  //! Pipeline stages of a module (0: no encoder).
  [[nodiscard]] std::uint32_t stages(module_kind kind) const noexcept { return u(degrees(kind).pp); }
  //! Data-parallel replicas of a module (0 for a missing encoder).
  [[nodiscard]] std::uint32_t replicas(module_kind kind) const noexcept {
    return stages(kind) > 0 ? u(degrees(kind).dp) : 0;
  }
  //! Tensor-parallel ranks per stage of a module.
  [[nodiscard]] std::uint32_t tp(module_kind kind) const noexcept { return u(degrees(kind).tp); }
  //! World ranks a module occupies.
  [[nodiscard]] std::uint32_t ranks(module_kind kind) const noexcept {
    return stages(kind) * replicas(kind) * tp(kind);
  }
  //! Ranks in the world: the configuration's GPUs.
  [[nodiscard]] int world_size() const noexcept {
    return static_cast<int>(ranks(module_kind::encoder) + ranks(module_kind::llm));
  }
  //! Positions of the combined pipeline: encoder stages, then LLM stages.
  [[nodiscard]] std::uint32_t positions() const noexcept {
    return stages(module_kind::encoder) + stages(module_kind::llm);
  }
  //! Pipeline position of a module's stage.
  [[nodiscard]] std::uint32_t position(module_kind kind, std::uint32_t stage) const noexcept {
    return kind == module_kind::encoder ? stage : stages(module_kind::encoder) + stage;
  }
  //! The module a pipeline position belongs to.
  [[nodiscard]] module_kind module_at(std::uint32_t position) const noexcept {
    return position < stages(module_kind::encoder) ? module_kind::encoder : module_kind::llm;
  }

  //! World rank of stage `stage` of replica `replica`, TP rank `tp_rank`, of a module.
  [[nodiscard]] int rank_of(module_kind kind, std::uint32_t stage, std::uint32_t replica,
                            std::uint32_t tp_rank) const noexcept {
    const std::uint32_t first = kind == module_kind::encoder ? 0 : ranks(module_kind::encoder);
    return static_cast<int>(first + (replica * stages(kind) + stage) * tp(kind) + tp_rank);
  }
  //! World rank at a pipeline position (encoder stages first).
  [[nodiscard]] int rank_at(std::uint32_t position, std::uint32_t replica, std::uint32_t tp_rank) const noexcept {
    const module_kind kind = module_at(position);
    const std::uint32_t stage = kind == module_kind::encoder ? position : position - stages(module_kind::encoder);
    return rank_of(kind, stage, replica, tp_rank);
  }

  //! What world rank `rank` runs. Throws `dflop::error` outside [0, world_size()).
  [[nodiscard]] rank_role role(int rank) const {
    if (rank < 0 || rank >= world_size())
      throw error("world_layout: rank " + std::to_string(rank) + " is outside a world of " +
                  std::to_string(world_size()) + " ranks");
    auto local = static_cast<std::uint32_t>(rank);
    rank_role role;
    role.module = local < ranks(module_kind::encoder) ? module_kind::encoder : module_kind::llm;
    if (role.module == module_kind::llm) local -= ranks(module_kind::encoder);
    role.tp_rank = local % tp(role.module);
    role.stage = local / tp(role.module) % stages(role.module);
    role.replica = local / tp(role.module) / stages(role.module);
    role.position = position(role.module, role.stage);
    return role;
  }

  //! The ranks of `rank`'s (module, stage, replica), by TP rank: they run the same ops on shards.
  [[nodiscard]] std::vector<int> tensor_group(int rank) const {
    const rank_role r = role(rank);
    std::vector<int> group;
    for (std::uint32_t t = 0; t < tp(r.module); ++t) group.push_back(rank_of(r.module, r.stage, r.replica, t));
    return group;
  }
  //! The ranks of `rank`'s (module, stage, TP rank), by replica: its gradients are summed over them.
  [[nodiscard]] std::vector<int> data_parallel_group(int rank) const {
    const rank_role r = role(rank);
    std::vector<int> group;
    for (std::uint32_t q = 0; q < replicas(r.module); ++q) group.push_back(rank_of(r.module, r.stage, q, r.tp_rank));
    return group;
  }
  //! The rank `rank` receives activations from inside its module (same replica and TP
  //! rank, previous stage), or -1 on a module's first stage (the LLM's first stage
  //! receives from the encoder replicas that encode its samples: a per-batch pattern).
  [[nodiscard]] int previous_in_module(int rank) const {
    const rank_role r = role(rank);
    return r.stage == 0 ? -1 : rank_of(r.module, r.stage - 1, r.replica, r.tp_rank);
  }
  //! The rank `rank` sends activations to inside its module, or -1 on a module's last stage.
  [[nodiscard]] int next_in_module(int rank) const {
    const rank_role r = role(rank);
    return r.stage + 1 == stages(r.module) ? -1 : rank_of(r.module, r.stage + 1, r.replica, r.tp_rank);
  }

  friend bool operator==(const world_layout&, const world_layout&) = default;

private:
  static std::uint32_t u(int value) noexcept { return static_cast<std::uint32_t>(value); }
  static void check(const module_parallelism& d, const char* which, bool optional) {
    if (optional && d.pp == 0) return;
    if (d.tp < 1 || d.pp < 1 || d.dp < 1)
      throw error(std::string("world_layout: the ") + which + " needs tp, pp and dp of at least 1 (got tp" +
                  std::to_string(d.tp) + " pp" + std::to_string(d.pp) + " dp" + std::to_string(d.dp) + ")" +
                  (optional ? "; pp 0 means no encoder" : ""));
  }

  module_parallelism encoder_;
  module_parallelism llm_;
};

}  // namespace dflop
