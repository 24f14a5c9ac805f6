// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: a cost model without estimate_time. The test checks that the
// compiler's first complaint says so in words.
#include <dflop/pipeline.hpp>

struct cost_model_without_estimate_time {};
using broken = dflop::pipeline<cost_model_without_estimate_time>;
broken::planner_type* unused = nullptr;
