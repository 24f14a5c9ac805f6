// SPDX-License-Identifier: Apache-2.0
//! \file
//! The model layer: encoder and LLM shapes, multimodal models, GPUs, presets and JSON specs.
#pragma once

#include <dflop/model/gpu_json.hpp>
#include <dflop/model/gpu_spec.hpp>
#include <dflop/model/llm_spec.hpp>
#include <dflop/model/model_json.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/model/vit_spec.hpp>
