// SPDX-License-Identifier: Apache-2.0
#include <dflop/workload/trace.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

using dflop::modality;
using dflop::sample;

namespace {

const std::string good_line =
    R"({"id":"a","modality":"image","encoder_items":10,"encoder_tokens":7290,"llm_tokens":7300})";

//! Reads `text` expecting a rejection on `line` whose reason contains `fragment`.
void check_rejected(const std::string& text, std::size_t line, const std::string& fragment) {
  INFO("trace:\n" << text);
  try {
    (void)dflop::read_trace_text(text, "trace.jsonl");
    FAIL("the trace was accepted");
  } catch (const dflop::input_error& rejection) {
    CHECK(rejection.source() == "trace.jsonl");
    CHECK(rejection.line() == line);
    CHECK_THAT(rejection.reason(), Catch::Contains(fragment));
    CHECK_THAT(std::string(rejection.what()), Catch::StartsWith("trace.jsonl:" + std::to_string(line) + ": "));
  }
}

std::string line_with(const std::string& fields) { return "{" + fields + "}"; }

}  // namespace

TEST_CASE("a well-formed trace reads field by field; extras, blank lines and integer ids are fine", "[workload]") {
  const std::string text = good_line + "\n\n   \n" +
                           R"({"id":17,"modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":512,)"
                           R"("source":"ignored","nested":{"x":[1,2]}})" +
                           "\n" +
                           R"({"id":"v","modality":"video","encoder_items":32.0,"encoder_tokens":23328,"llm_tokens":6800})";
  const auto samples = dflop::read_trace_text(text);
  REQUIRE(samples.size() == 3);
  CHECK(samples[0] == sample{"a", modality::image, 10, 7290, 7300});
  CHECK(samples[1] == sample{"17", modality::text, 0, 0, 512});
  CHECK(samples[2] == sample{"v", modality::video, 32, 23328, 6800});
}

TEST_CASE("each malformed line is rejected with its line and reason", "[workload]") {
  const std::string prefix = good_line + "\n";
  SECTION("invalid JSON") { check_rejected(prefix + R"({"id":"b", "modality":)", 2, "invalid JSON at column 23: syntax error"); }
  SECTION("not an object") { check_rejected(prefix + "[1, 2, 3]", 2, "expected a JSON object, found array"); }
  SECTION("missing fields") {
    check_rejected(prefix + line_with(R"("modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":5)"), 2,
                   "missing field 'id'");
    check_rejected(prefix + line_with(R"("id":"b","encoder_items":0,"encoder_tokens":0,"llm_tokens":5)"), 2,
                   "missing field 'modality'");
    check_rejected(prefix + line_with(R"("id":"b","modality":"text","encoder_tokens":0,"llm_tokens":5)"), 2,
                   "missing field 'encoder_items'");
    check_rejected(prefix + line_with(R"("id":"b","modality":"text","encoder_items":0,"llm_tokens":5)"), 2,
                   "missing field 'encoder_tokens'");
    check_rejected(prefix + line_with(R"("id":"b","modality":"text","encoder_items":0,"encoder_tokens":0)"), 2,
                   "missing field 'llm_tokens'");
  }
  SECTION("wrong types") {
    check_rejected(
        prefix + line_with(R"("id":"b","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":"5")"), 2,
        "field 'llm_tokens' must be an integer, found string \"5\"");
    check_rejected(
        prefix + line_with(R"("id":"b","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":5.5)"), 2,
        "field 'llm_tokens' must be an integer, found number 5.5");
    check_rejected(
        prefix + line_with(R"("id":"b","modality":"text","encoder_items":false,"encoder_tokens":0,"llm_tokens":5)"),
        2, "field 'encoder_items' must be an integer, found boolean");
    check_rejected(prefix + line_with(R"("id":1.5,"modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":5)"),
                   2, "field 'id' must be a string or an integer");
    check_rejected(prefix + line_with(R"("id":"b","modality":3,"encoder_items":0,"encoder_tokens":0,"llm_tokens":5)"), 2,
                   "field 'modality' must be a string");
    check_rejected(prefix + line_with(R"("id":"b","modality":"text","encoder_items":0,"encoder_tokens":0,)"
                                      R"("llm_tokens":18446744073709551615)"),
                   2, "out of range");
  }
  SECTION("unknown modality") {
    check_rejected(prefix + line_with(R"("id":"b","modality":"Image","encoder_items":1,"encoder_tokens":729,"llm_tokens":5)"),
                   2, "unknown modality \"Image\" (known: text image multi_image video audio)");
  }
  SECTION("negative counts") {
    check_rejected(
        prefix + line_with(R"("id":"b","modality":"video","encoder_items":-2,"encoder_tokens":729,"llm_tokens":5)"), 2,
        "negative encoder_items (-2)");
    check_rejected(
        prefix + line_with(R"("id":"b","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":-7)"), 2,
        "negative llm_tokens (-7)");
  }
  SECTION("inconsistent counts") {
    check_rejected(prefix + line_with(R"("id":"b","modality":"image","encoder_items":4,"encoder_tokens":3,"llm_tokens":5)"),
                   2, "sample \"b\": encoder_tokens (3) is less than encoder_items (4)");
    check_rejected(prefix + line_with(R"("id":"b","modality":"video","encoder_items":0,"encoder_tokens":0,"llm_tokens":5)"),
                   2, "needs at least one encoder item");
    check_rejected(prefix + line_with(R"("id":"b","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":0)"),
                   2, "llm_tokens is 0");
    check_rejected(prefix + line_with(R"("id":"","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":5)"),
                   2, "empty id");
  }
  SECTION("a text sample with encoder items") {
    check_rejected(prefix + line_with(R"("id":"b","modality":"text","encoder_items":2,"encoder_tokens":1458,"llm_tokens":5)"),
                   2, "a text sample has encoder_items 2");
  }
  SECTION("duplicate id names both lines") {
    check_rejected(prefix + "\n" + R"({"id":"b","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":5})" +
                       "\n" + good_line,
                   4, "duplicate id \"a\" (first seen on line 1)");
  }
  SECTION("an integer id and the same id as a string are the same id") {
    check_rejected(R"({"id":7,"modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":5})"
                   "\n"
                   R"({"id":"7","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":5})",
                   2, "duplicate id \"7\" (first seen on line 1)");
  }
}

TEST_CASE("write then read gives the same samples, through a stream and a file", "[workload]") {
  const std::vector<sample> samples{{"t", modality::text, 0, 0, 512},
                                    {"with \"quotes\" and \\", modality::image, 10, 7290, 7300},
                                    {"m", modality::multi_image, 3, 2187, 2300},
                                    {"v", modality::video, 32, 23328, 6800},
                                    {"a", modality::audio, 2, 3000, 1600}};
  std::ostringstream out;
  dflop::write_trace(out, samples);
  CHECK(out.str().rfind(R"({"id":"t","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":512})", 0) ==
        0);
  CHECK(dflop::read_trace_text(out.str()) == samples);

  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/workload_trace_round_trip.jsonl";
  dflop::write_trace_file(path, samples);
  CHECK(dflop::read_trace_file(path) == samples);
}

TEST_CASE("missing files and a streaming reader without the duplicate check", "[workload]") {
  CHECK_THROWS_WITH(dflop::read_trace_file("/nonexistent/trace.jsonl"),
                    "/nonexistent/trace.jsonl: cannot open file for reading");
  std::istringstream in(good_line + "\n" + good_line + "\n");
  dflop::trace_reader reader(in, "stream", /*check_duplicate_ids=*/false);
  CHECK(reader.next().has_value());
  CHECK(reader.next().has_value());
  CHECK(reader.line() == 2);
  CHECK_FALSE(reader.next().has_value());
}
