// SPDX-License-Identifier: Apache-2.0
// Timeline export as an SVG picture: geometry read back from the document,
// escaping, labels, size, and writing to a file.
#include <dflop/schedule.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/sim/svg_timeline.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace dflop;

namespace {

using attributes = std::map<std::string, std::string>;

// Every `<rect .../>` in document order, with its attributes.
std::vector<attributes> rects_of(const std::string& svg) {
  static const std::regex element("<rect\\b([^>]*)>");
  static const std::regex attribute("([a-z-]+)=\"([^\"]*)\"");
  std::vector<attributes> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), element); it != std::sregex_iterator(); ++it) {
    const std::string inside = (*it)[1].str();
    attributes found;
    for (auto a = std::sregex_iterator(inside.begin(), inside.end(), attribute); a != std::sregex_iterator(); ++a)
      found[(*a)[1].str()] = (*a)[2].str();
    out.push_back(std::move(found));
  }
  return out;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Well-formed enough: one root element, every tag closed in order, attribute values
// quoted, and '&' in text or attributes only as one of the five entities.
bool well_formed(const std::string& svg, std::string& why) {
  std::vector<std::string> open;
  std::size_t roots = 0;
  for (std::size_t i = 0; i < svg.size();) {
    if (svg[i] == '&') {
      static const std::vector<std::string> entities{"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
      if (std::none_of(entities.begin(), entities.end(), [&](const auto& e) { return svg.compare(i, e.size(), e) == 0; })) {
        why = "bare & at " + std::to_string(i);
        return false;
      }
      ++i;
      continue;
    }
    if (svg[i] != '<') {
      if (open.empty() && svg[i] != '\n') {
        why = "text outside the root at " + std::to_string(i);
        return false;
      }
      ++i;
      continue;
    }
    // A tag: find its end outside quoted values.
    std::size_t end = i + 1;
    bool quoted = false;
    for (; end < svg.size() && (quoted || svg[end] != '>'); ++end) {
      if (svg[end] == '"') quoted = !quoted;
      if (quoted && svg[end] == '<') {
        why = "< in an attribute at " + std::to_string(end);
        return false;
      }
    }
    if (end == svg.size()) {
      why = "unterminated tag";
      return false;
    }
    const std::string tag = svg.substr(i + 1, end - i - 1);
    const bool closing = tag[0] == '/';
    const bool self_closing = tag.back() == '/';
    const std::string name = tag.substr(closing ? 1 : 0, tag.find_first_of(" \n/", closing ? 1 : 0) - (closing ? 1 : 0));
    if (closing) {
      if (open.empty() || open.back() != name) {
        why = "</" + name + "> does not close " + (open.empty() ? std::string("anything") : open.back());
        return false;
      }
      open.pop_back();
    } else {
      if (open.empty()) ++roots;
      if (!self_closing) open.push_back(name);
    }
    i = end + 1;
  }
  if (!open.empty()) why = "<" + open.back() + "> is not closed";
  else if (roots != 1) why = std::to_string(roots) + " root elements";
  return open.empty() && roots == 1;
}

double number(const attributes& element, const std::string& name) {
  REQUIRE(element.count(name) == 1);
  return std::stod(element.at(name));
}

// Costs that differ per microbatch and stage, so starts and durations are irregular.
pipeline_costs varied_costs(std::uint32_t microbatches, std::uint32_t stages) {
  auto costs = pipeline_costs::uniform(microbatches, stages, 0, 0, 0);
  costs.weight.assign(costs.forward.size(), 0);
  for (std::uint32_t mb = 0; mb < microbatches; ++mb)
    for (std::uint32_t s = 0; s < stages; ++s) {
      const double size = 1.0 + 0.37 * ((mb * 7 + s * 3) % 5);
      costs.forward[costs.at(mb, s)] = 0.001 * size;
      costs.backward[costs.at(mb, s)] = 0.0013 * size;
      costs.weight[costs.at(mb, s)] = 0.0007 * size;
    }
  return costs;
}

}  // namespace

TEST_CASE("SVG timeline: one rect per op, x and width proportional to start and duration", "[sim]") {
  const auto s = zero_bubble_h1{}.make({3, 4});
  const std::vector<std::uint32_t> order{3, 2, 1, 0};
  const auto result = simulate(s, varied_costs(4, 3), order);
  const auto line = make_timeline(s, result, order);
  const svg_options options{1000, 30, "zero bubble, S = 3"};
  const auto svg = render_svg_timeline(line, options);

  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.size() >= 7);
  CHECK(svg.compare(svg.size() - 7, 7, "</svg>\n") == 0);
  std::string why;
  const bool ok = well_formed(svg, why);
  INFO(why);
  CHECK(ok);
  CHECK(svg.find("<script") == std::string::npos);
  CHECK(svg.find("href") == std::string::npos);
  CHECK(svg.find("url(") == std::string::npos);
  CHECK(svg.find("width=\"1000\"") != std::string::npos);
  CHECK(svg.find(">zero bubble, S = 3<") != std::string::npos);
  CHECK(svg.find(">stage 2<") != std::string::npos);

  // Background, one per op in event order, one legend swatch per kind (F, B, W).
  const auto rects = rects_of(svg);
  REQUIRE(rects.size() == 1 + line.events.size() + 3);
  REQUIRE(line.events.size() == s.op_count());

  // Origin from an op at t = 0, pixels per second from the op ending last.
  double origin = -1;
  double right = 0;
  for (std::size_t i = 0; i < line.events.size(); ++i) {
    const auto& rect = rects[1 + i];
    if (line.events[i].start == 0) origin = number(rect, "x");
    if (line.events[i].end == line.makespan) right = number(rect, "x") + number(rect, "width");
  }
  REQUIRE(origin > 0);
  const double scale = (right - origin) / line.makespan;
  CHECK(scale > 500 / line.makespan);  // the plot takes most of the 1000 px

  const double row0 = number(rects[1], "y") - line.events[0].track * 30.0;
  std::map<timeline_kind, std::string> fills;
  std::set<std::string> distinct_fills;
  for (std::size_t i = 0; i < line.events.size(); ++i) {
    const auto& event = line.events[i];
    const auto& rect = rects[1 + i];
    INFO("event " << i << " on track " << event.track << " [" << event.start << ", " << event.end << ")");
    CHECK(number(rect, "x") == Approx(origin + event.start * scale).margin(0.06));
    CHECK(number(rect, "width") == Approx((event.end - event.start) * scale).margin(0.11));
    CHECK(number(rect, "width") > 0);
    CHECK(number(rect, "y") == Approx(row0 + event.track * 30.0));
    CHECK(number(rect, "height") < 30);
    CHECK(number(rect, "height") > 20);
    const auto [slot, inserted] = fills.emplace(event.kind, rect.at("fill"));
    CHECK(slot->second == rect.at("fill"));  // one colour per kind
    if (inserted) distinct_fills.insert(rect.at("fill"));
    CHECK(std::regex_match(rect.at("fill"), std::regex("#[0-9a-f]{6}")));
  }
  CHECK(fills.size() == 3);
  CHECK(distinct_fills.size() == 3);
  // The legend swatches carry the same colours, in kind order.
  CHECK(rects[rects.size() - 3].at("fill") == fills[timeline_kind::forward]);
  CHECK(rects[rects.size() - 2].at("fill") == fills[timeline_kind::backward]);
  CHECK(rects[rects.size() - 1].at("fill") == fills[timeline_kind::weight]);
  CHECK(svg.find(">forward (F)<") != std::string::npos);
  CHECK(svg.find(">weight gradient (W)<") != std::string::npos);

  // Coordinates carry at most one decimal.
  for (const auto& rect : rects)
    for (const auto& [name, value] : rect)
      if (name != "fill") CHECK(std::regex_match(value, std::regex("[0-9]+(\\.[0-9])?%?")));
}

TEST_CASE("SVG timeline: microbatch inside wide ops only, tick labels in seconds", "[sim]") {
  timeline line;
  line.tracks = {"gpu 0"};
  line.events = {{0, timeline_kind::forward, 7, 0, 0, 0.0, 0.02},
                 {0, timeline_kind::backward, 8, 0, 0, 0.02, 0.02002},
                 {0, timeline_kind::gradient_sync, 0, 0, 0, 0.021, 0.023}};
  line.makespan = 0.023;
  const auto svg = render_svg_timeline(line);
  CHECK(svg.find(">7</text>") != std::string::npos);     // about 1000 px wide
  CHECK(svg.find(">8</text>") == std::string::npos);     // about 1 px wide
  CHECK(svg.find(">all-reduce</text>") != std::string::npos);  // about 100 px: fits
  CHECK(svg.find("time (s)") != std::string::npos);
  // Ticks 0, 0.005, ..., 0.02 (a 1-2-5 step) under the plot.
  for (const char* tick : {">0</text>", ">0.005</text>", ">0.01</text>", ">0.015</text>", ">0.02</text>"})
    CHECK(svg.find(tick) != std::string::npos);
  CHECK(svg.find(">0.025</text>") == std::string::npos);
  CHECK(svg.find("makespan 0.023 s") != std::string::npos);
  CHECK(rects_of(svg).size() == 1 + 3 + 3);
}

TEST_CASE("SVG timeline: XML specials in track names and the title are escaped", "[sim]") {
  timeline line;
  line.tracks = {"enc <&> \"r0\"", "llm's s1"};
  line.events = {{0, timeline_kind::forward, 0, 0, 0, 0, 1},
                 {1, timeline_kind::forward, 0, 1, 0, 1, 2},
                 {1, timeline_kind::gradient_sync, 0, 1, 0, 2, 3},
                 {5, timeline_kind::weight, 0, 1, 0, 2, 3}};  // unknown track: left out
  line.makespan = 3;
  const auto svg = render_svg_timeline(line, {800, 20, "a < b & c"});
  std::string why;
  const bool ok = well_formed(svg, why);
  INFO(why);
  CHECK(ok);
  CHECK(svg.find("enc &lt;&amp;&gt; &quot;r0&quot;") != std::string::npos);
  CHECK(svg.find("llm&apos;s s1") != std::string::npos);
  CHECK(svg.find("a &lt; b &amp; c") != std::string::npos);
  CHECK(svg.find("<&>") == std::string::npos);
  CHECK(svg.find("gradient all-reduce") != std::string::npos);
  CHECK(svg.find("weight gradient") == std::string::npos);  // no W on a named track
  CHECK(rects_of(svg).size() == 1 + 3 + 2);
}

TEST_CASE("SVG timeline: an empty timeline is still a picture", "[sim]") {
  const auto svg = render_svg_timeline(timeline{});
  std::string why;
  const bool ok = well_formed(svg, why);
  INFO(why);
  CHECK(ok);
  CHECK(rects_of(svg).size() == 1);
}

TEST_CASE("SVG timeline: a 1000-op timeline stays under 200 KB", "[sim]") {
  const auto s = zero_bubble_h1{}.make({8, 42});
  const auto line = make_timeline(s, simulate(s, varied_costs(42, 8)));
  REQUIRE(line.events.size() == 1008);
  const auto svg = render_svg_timeline(line);
  CHECK(svg.size() < 200'000);
  CHECK(count_of(svg, "<rect") == 1 + 1008 + 3);
  CHECK(count_of(svg, "<g") <= 10);  // no per-op groups
}

TEST_CASE("write_svg_timeline writes the picture; an unwritable path throws naming it", "[sim]") {
  const auto s = one_f_one_b{}.make({2, 3});
  const auto line = make_timeline(s, simulate(s, pipeline_costs::uniform(3, 2, 1, 2)));
  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/sim_timeline.svg";
  write_svg_timeline(line, path, {900, 24, "1F1B"});
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  CHECK(content.str() == render_svg_timeline(line, {900, 24, "1F1B"}));
  CHECK_THROWS_AS(write_svg_timeline(line, "/nonexistent-dir/x.svg"), input_error);
  CHECK_THROWS_WITH(write_svg_timeline(line, "/nonexistent-dir/x.svg"), Catch::Contains("/nonexistent-dir/x.svg"));
}
