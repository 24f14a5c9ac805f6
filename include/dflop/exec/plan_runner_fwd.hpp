// SPDX-License-Identifier: Apache-2.0
//! \file
//! `plan_runner` declared, not defined: `dflop::pipeline` names its runner type
//! with this alone, so a translation unit that only plans does not parse the
//! executors. Include `<dflop/exec/plan_runner.hpp>` (or `<dflop/exec.hpp>`) to
//! build and run one.
#pragma once

namespace dflop {

//! Runs one method of a plan on one rank (defined in exec/plan_runner.hpp):
//! `Schedule` models `schedule`, `Communicator` models `communicator`; the
//! stage types are the user's, one for both modules unless `LlmStage` is given.
template <class Schedule, class Communicator, class EncoderStage, class LlmStage = EncoderStage>
class plan_runner;

}  // namespace dflop
