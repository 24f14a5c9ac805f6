// SPDX-License-Identifier: Apache-2.0
// plan_method: names round-trip, unknown names are refused naming the known
// ones, and a plan is looked up by enum and by name alike.
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_method.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <sstream>
#include <string>

using namespace dflop;

TEST_CASE("every method's name parses back to it, and names are distinct", "[plan][method]") {
  std::set<std::string> names;
  for (const plan_method method : all_plan_methods) {
    CHECK(parse_plan_method(name_of(method)) == method);
    std::ostringstream out;
    out << method;
    CHECK(out.str() == name_of(method));
    names.insert(std::string(name_of(method)));
  }
  CHECK(names.size() == all_plan_methods.size());
  CHECK(name_of(all_plan_methods.front()) == "dflop");
}

TEST_CASE("an unknown method name is refused with the source and the known names", "[plan][method]") {
  CHECK_THROWS_MATCHES(parse_plan_method("fastest", "--method"), input_error,
                       Catch::Message("--method: unknown method 'fastest' (known: dflop, data_blind, dflop_reference)"));
  CHECK_THROWS_AS(parse_plan_method("DFLOP"), input_error);  // names are exact
  CHECK_THROWS_AS(parse_plan_method(""), input_error);
}

TEST_CASE("a plan finds its methods by enum and by name, and names what it holds when asked for another",
          "[plan][method]") {
  plan p;
  p.chosen.method = plan_method::dflop;
  p.chosen.iteration_seconds = 1;
  method_result blind;
  blind.method = plan_method::data_blind;
  blind.iteration_seconds = 2;
  p.baselines.push_back(blind);
  CHECK(&p.method(plan_method::dflop) == &p.chosen);
  CHECK(&p.method("dflop") == &p.chosen);
  CHECK(&p.method(plan_method::data_blind) == &p.baselines[0]);
  CHECK(&p.method("data_blind") == &p.baselines[0]);
  CHECK(p.baseline(plan_method::dflop_reference) == nullptr);
  CHECK_THROWS_MATCHES(p.method(plan_method::dflop_reference), input_error,
                       Catch::Message("method: the plan has no method 'dflop_reference' (it has dflop, data_blind)"));
  CHECK_THROWS_MATCHES(p.method("fastest"), input_error,
                       Catch::Message("method: the plan has no method 'fastest' (it has dflop, data_blind)"));
}
