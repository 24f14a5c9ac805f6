// SPDX-License-Identifier: Apache-2.0
//! \file
//! Plan files: a plan saved once (`dflop plan --save`, `write_plan`) and read
//! back where it runs (`read_plan`), self-contained (model shapes, GPU spec,
//! per-batch options), so a trainer schedules its batches without planning
//! again. Reading checks every field and what it must agree with; a hand-edited
//! file that could not run is an `input_error` naming the file, the field's
//! JSON path and the reason. Format: plan_json.hpp, docs/plan-files.md.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/detail/json_fields.hpp>
#include <dflop/plan/detail/plan_fields.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_json.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace dflop {

//! The plan in `document` (the `to_json(const plan&)` layout); `source` names
//! the file in errors. For planner output `to_json(plan_from_json(to_json(p)))
//! == to_json(p)`. Derived figures (`samples_per_second`, `efficiency`,
//! `speedup_of_dflop`, the GiB of `memory_gib`) are accepted and not read;
//! `search`, `excluded_samples` and `memory_cap` are optional (and `batch.memory_budget_bytes`). Throws `input_error` for a wrong `plan_version`, a
//! missing, mistyped or unknown field, or a configuration that cannot run.
[[nodiscard]] inline plan plan_from_json(const nlohmann::json& document, const std::string& source) {
  const detail::json_fields fields(document, source, "");
  if (!fields.has("plan_version"))
    fields.fail("plan_version", "missing: not a plan file (`dflop plan --save FILE` writes one)");
  if (const auto version = fields.integer_in("plan_version", 0); version != plan_file_version)
    fields.fail("plan_version", "this dflop reads plan files of version " + std::to_string(plan_file_version) +
                                    ", got " + std::to_string(version));
  fields.only({"plan_version", "model", "model_spec", "cluster", "global_batch", "batches", "seed", "batch", "config",
               "iteration_seconds", "estimated_seconds", "peak_memory_gib", "samples_per_second", "memory_gib",
               "memory_cap", "ideal_seconds", "efficiency", "excluded_samples", "baselines", "search"});

  plan result;
  result.model_spec = detail::plan_model_from_json(fields);
  result.model = result.model_spec.name;
  result.cluster = detail::plan_cluster_from_json(fields);
  result.global_batch = detail::plan_int(fields, "global_batch", 1);
  result.batches = detail::plan_int(fields, "batches", 1);
  result.seed = fields.unsigned_integer("seed");
  result.batch = detail::plan_batch_options_from_json(fields);
  const detail::plan_context context{&result.model_spec, &result.cluster, result.global_batch};

  detail::plan_config chosen = detail::plan_config_from_json(fields, "config", context);
  result.schedule = std::move(chosen.schedule);
  result.chosen = method_result{plan_method::dflop,
                                chosen.config,
                                std::move(chosen.encoder),
                                std::move(chosen.llm),
                                fields.number_at_least("estimated_seconds", 0),
                                fields.number_at_least("iteration_seconds", 0),
                                true,
                                fields.number_at_least("peak_memory_gib", 0),
                                0};
  result.memory = detail::plan_memory_from_json(fields, result.chosen.config);
  result.ideal_seconds = fields.number_at_least("ideal_seconds", 0);
  if (fields.has("memory_cap")) result.memory_cap = detail::plan_memory_cap_from_json(fields);
  if (fields.has("excluded_samples")) {
    const nlohmann::json& ids = fields.array("excluded_samples");
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (!ids[i].is_string() || ids[i].get_ref<const std::string&>().empty())
        fields.fail(fields.path("excluded_samples[" + std::to_string(i) + "]"), "must be a non-empty sample id string");
      result.excluded_samples.push_back(ids[i].get<std::string>());
    }
  }

  const detail::json_fields baselines(fields.at("baselines"), source, "baselines");
  for (const auto& item : fields.at("baselines").items()) {
    const std::string& method = item.key();
    std::optional<plan_method> baseline_method;  // a baseline's name, never dflop's own
    for (const plan_method known : {plan_method::data_blind, plan_method::dflop_reference})
      if (name_of(known) == method) baseline_method = known;
    if (!baseline_method)
      baselines.fail(baselines.path(method), "unknown method '" + method + "' (known: data_blind, dflop_reference)");
    const detail::json_fields baseline(item.value(), source, baselines.path(method));
    baseline.only({"config", "iteration_seconds", "estimated_seconds", "peak_memory_gib", "fits_memory",
                   "out_of_memory_attempts", "speedup_of_dflop"});
    detail::plan_config config = detail::plan_config_from_json(baseline, "config", context);
    if (config.schedule != result.schedule)
      baseline.fail(baseline.path("config.schedule"), "'" + config.schedule + "' is not the plan's schedule ('" +
                                                          result.schedule + "' in config.schedule): methods are "
                                                                            "compared on one schedule");
    const auto attempts = static_cast<std::size_t>(baseline.integer_in("out_of_memory_attempts", 0));
    result.baselines.push_back(method_result{*baseline_method, config.config, std::move(config.encoder), std::move(config.llm),
                                             baseline.number_at_least("estimated_seconds", 0),
                                             baseline.number_at_least("iteration_seconds", 0),
                                             baseline.boolean("fits_memory"),
                                             baseline.number_at_least("peak_memory_gib", 0), attempts});
  }
  if (fields.has("search")) result.search = detail::plan_search_from_json(fields);
  return result;
}

//! A plan from JSON text; a syntax error names the line.
[[nodiscard]] inline plan parse_plan_json(std::string_view text, const std::string& source = "<text>") {
  return plan_from_json(detail::parse_json_text(text, source), source);
}

//! The plan saved in the file at `path` (see `plan_from_json`).
[[nodiscard]] inline plan read_plan(const std::string& path) {
  return parse_plan_json(detail::read_text_file(path), path);
}

//! Saves `result` to `path` as `to_json(result)`, indented; `input_error` when
//! the file cannot be written.
inline void write_plan(const std::string& path, const plan& result) {
  std::ofstream out(path);
  if (!out) throw input_error(path, 0, "cannot open file for writing");
  out << to_json(result).dump(2) << '\n';
  out.flush();
  if (!out) throw input_error(path, 0, "write failed");
}

}  // namespace dflop
