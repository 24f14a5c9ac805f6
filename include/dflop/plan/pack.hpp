// SPDX-License-Identifier: Apache-2.0
//! \file
//! The packer layer: split a global batch of N samples into K balanced,
//! non-empty microbatches. Start with `dflop::pack(dflop::refined_packer{}, costs, K)`.
#pragma once

#include <dflop/plan/pack/cost_matrix.hpp>
#include <dflop/plan/pack/exact_packer.hpp>
#include <dflop/plan/pack/from_assignment.hpp>
#include <dflop/plan/pack/karmarkar_karp_packer.hpp>
#include <dflop/plan/pack/lower_bound.hpp>
#include <dflop/plan/pack/lpt_packer.hpp>
#include <dflop/plan/pack/options.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/pack/packing.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/pack/sequential_packer.hpp>
#include <dflop/plan/pack/workspace.hpp>
