// SPDX-License-Identifier: Apache-2.0
//! \file
//! Umbrella header for pipeline schedules: the op-list data type, the `schedule`
//! concept, the shipped policies and validation. Host-only, no CUDA, no range-v3.
#pragma once

#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/gpipe.hpp>
#include <dflop/schedule/interleaved_1f1b.hpp>
#include <dflop/schedule/one_f_one_b.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/run_ahead.hpp>
#include <dflop/schedule/validate.hpp>
#include <dflop/schedule/zero_bubble_h1.hpp>
