# SPDX-License-Identifier: Apache-2.0
# Fails unless the plan file PLAN chose an LLM with tensor and pipeline parallelism
# (tp >= 2 and pp >= 2): the case the runner must handle with TP groups inside a pipeline.
file(READ "${PLAN}" text)
string(JSON tp GET "${text}" config llm tp)
string(JSON pp GET "${text}" config llm pp)
if(tp LESS 2 OR pp LESS 2)
  message(FATAL_ERROR "${PLAN}: the LLM has tp ${tp} and pp ${pp}; this case needs tp >= 2 and pp >= 2")
endif()
message(STATUS "${PLAN}: llm tp ${tp} pp ${pp}")
