// `strata simulate` run in process (the command's source is compiled into this test): text and
// JSON reports, the SVG timeline (well-formed, one row per stage), and exit status 2 with a
// message naming the flag for each kind of bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command_runner.h"
#include "strata/cli/simulate.h"
#include "strata/core/error.h"
#include "strata/pipeline/generators.h"
#include "strata/pipeline/simulator.h"
#include "strata/pipeline/timeline_svg.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

testing::CommandResult run_simulate(const std::vector<std::string>& args) {
  return testing::run_subcommand("simulate", add_simulate_command, args);
}

// A small XML well-formedness check: tags nest and close, attributes are quoted, and the
// document has one root element. Enough to catch a broken writer; not a full XML parser.
std::string xml_problem(const std::string& text) {
  std::vector<std::string> open;
  int roots = 0;
  size_t at = 0;
  while ((at = text.find('<', at)) != std::string::npos) {
    if (text.compare(at, 2, "<?") == 0) {
      at = text.find("?>", at);
      if (at == std::string::npos) return "unterminated <?";
      continue;
    }
    size_t end = at + 1;
    bool quoted = false;
    while (end < text.size() && (quoted || text[end] != '>')) {
      if (text[end] == '"') quoted = !quoted;
      if (text[end] == '<' && !quoted) return str("'<' inside a tag at ", end);
      ++end;
    }
    if (end == text.size()) return str("unterminated tag at ", at);
    const std::string tag = text.substr(at + 1, end - at - 1);
    if (tag.empty()) return str("empty tag at ", at);
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return str("unexpected </", tag, ">");
      open.pop_back();
    } else {
      const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
      if (open.empty()) ++roots;
      if (tag.back() != '/') open.push_back(name);
    }
    at = end + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return str(roots, " root elements");
  return "";
}

int count(const std::string& text, const std::string& needle) {
  int found = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++found;
  }
  return found;
}

TEST(SimulateCommand, TextReport) {
  const auto result = run_simulate({"--pp", "4", "--microbatches", "8", "--schedule", "1f1b"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("step time: 33"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("bubble fraction: 27.27%"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("peak in-flight"), std::string::npos) << result.out;
  // One line per stage: stage 3 of 1F1B holds one microbatch.
  EXPECT_NE(result.out.find("     3          24           9    27.27%                 1"),
            std::string::npos)
      << result.out;
}

TEST(SimulateCommand, JsonReport) {
  const auto result = run_simulate({"--pp", "4", "--microbatches", "8", "--vpp", "2", "--schedule",
                                    "interleaved-1f1b", "--costs", "1,2,1,0", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto json = nlohmann::json::parse(result.out);
  // Bubble (p-1)(F+B+W)/v = 6 on top of m(F+B+W) = 32.
  EXPECT_DOUBLE_EQ(json["step_time"].get<double>(), 38.0);
  EXPECT_NEAR(json["bubble_fraction"]["overall"].get<double>(), 6.0 / 38, 1e-12);
  EXPECT_EQ(json["bubble_fraction"]["per_stage"].size(), 4u);
  ASSERT_EQ(json["peak_inflight_microbatches"].size(), 4u);
  EXPECT_DOUBLE_EQ(json["peak_inflight_microbatches"][0].get<double>(), 5.5);  // 11 chunks / 2
  EXPECT_EQ(json["chunks"], 2);
}

TEST(SimulateCommand, SvgTimelineHasOneRowPerStage) {
  testing::TempDir dir;
  const std::string path = dir.file("timeline.svg");
  const auto result = run_simulate({"--pp", "3", "--microbatches", "5", "--schedule", "zb-h1",
                                    "--costs", "1,1,1,0.1", "--svg", path});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  const std::string svg = content.str();
  EXPECT_EQ(xml_problem(svg), "") << svg.substr(0, 2000);
  EXPECT_EQ(count(svg, "<g class=\"stage\""), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(svg.find(str("data-stage=\"", r, "\"")), std::string::npos) << "stage " << r;
  }
  // One box per compute action: 5 F, 5 B and 5 W on each of 3 stages.
  EXPECT_EQ(count(svg, "<title>"), 45);
  EXPECT_NE(svg.find("weight grad (W)"), std::string::npos);
}

TEST(SimulateCommand, SvgOfEverySchedule) {
  for (const PipelineSchedule schedule : pipeline_schedules()) {
    const std::string name = name_of(schedule);
    const int v = schedule == PipelineSchedule::interleaved_one_f_one_b ? 3
                  : schedule == PipelineSchedule::zb_v                  ? 2
                                                                        : 1;
    const auto result = simulate_schedule(
        build_schedule(testing::pipeline_layout(schedule, 4, 8, v)), {StageCosts{}});
    const std::string svg = render_timeline_svg(result);
    EXPECT_EQ(xml_problem(svg), "") << name;
    EXPECT_EQ(count(svg, "<g class=\"stage\""), 4) << name;
  }
}

void expect_usage_error(const std::vector<std::string>& args,
                        const std::vector<std::string>& fragments) {
  testing::expect_usage_error(run_simulate(args), fragments);
}

TEST(SimulateCommand, BadInputExitsTwoNamingTheFlag) {
  expect_usage_error(
      {"--pp", "4", "--microbatches", "10", "--vpp", "2", "--schedule", "interleaved-1f1b"},
      {"--microbatches (10)", "multiple of --pp (4)", "8 or 12"});
  expect_usage_error({"--pp", "0", "--microbatches", "4", "--schedule", "1f1b"},
                     {"--pp (0) must be >= 1"});
  expect_usage_error({"--pp", "four", "--microbatches", "4", "--schedule", "1f1b"},
                     {"--pp 'four'", "whole number"});
  expect_usage_error({"--pp", "2", "--microbatches", "4", "--schedule", "zero-bubble"},
                     {"--schedule 'zero-bubble'", "gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v"});
  expect_usage_error({"--pp", "4", "--microbatches", "8", "--schedule", "zb-v"},
                     {"--schedule zb-v needs --vpp 2", "got 1"});
  expect_usage_error({"--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--vpp", "2"},
                     {"--vpp (2) > 1 needs --schedule interleaved-1f1b"});
  expect_usage_error({"--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--chunks", "2"},
                     {"--chunks is now --vpp", "use --vpp 2"});
  expect_usage_error({"--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--costs", "1,x,1"},
                     {"--costs '1,x,1'", "'x' is not a number", "F,B,W,C"});
  expect_usage_error({"--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--costs", "1,2"},
                     {"--costs '1,2' has 2 values"});
  expect_usage_error(
      {"--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--costs", "1,-2,1,0"},
      {"-2 is negative"});
  expect_usage_error(
      {"--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--costs", "1,1,1,"},
      {"--costs '1,1,1,'", "'' is not a number"});
  expect_usage_error({"--microbatches", "4", "--schedule", "1f1b"}, {"--pp is required"});
  expect_usage_error({"--pp", "2", "--microbatches", "4"}, {"--schedule is required"});
  expect_usage_error({"--pp", "100000", "--microbatches", "100000", "--schedule", "gpipe"},
                     {"over the simulator's limit"});
  expect_usage_error({"--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--svg",
                      "/nonexistent-directory/t.svg"},
                     {"--svg: cannot write"});
}

// issue 36's numbers at p = 4, m = 8, F = B = W: ZB-V 1.5 idle in 25.5 against 1F1B's 9 in 33.
TEST(SimulateCommand, ZbVReport) {
  const auto result = run_simulate(
      {"--pp", "4", "--microbatches", "8", "--vpp", "2", "--schedule", "zb-v", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["schedule"], "zb-v");
  EXPECT_EQ(json["chunks"], 2);
  EXPECT_DOUBLE_EQ(json["step_time"].get<double>(), 25.5);
  EXPECT_NEAR(json["bubble_fraction"]["overall"].get<double>(), 1.5 / 25.5, 1e-9);
  EXPECT_EQ(json["peak_inflight_chunks"], nlohmann::json::parse("[8, 8, 8, 8]"));
}

TEST(SimulateCommand, CostsPerStage) {
  // GPipe, p = 2, m = 2; stage 1 twice as slow: F 1|2, full backward 2|4.
  // Stage 0: F F at 0-1, 1-2; stage 1: F at 1-3, 3-5; B at 5-9, 9-13; stage 0: B 9-11, 13-15.
  const auto result = run_simulate({"--pp", "2", "--microbatches", "2", "--schedule", "gpipe",
                                    "--costs", "1,1,1/2,2,2", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto json = nlohmann::json::parse(result.out);
  EXPECT_DOUBLE_EQ(json["step_time"].get<double>(), 15.0);
  EXPECT_DOUBLE_EQ(json["busy_time"][0].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(json["busy_time"][1].get<double>(), 12.0);
  const auto text = run_simulate(
      {"--pp", "2", "--microbatches", "2", "--schedule", "gpipe", "--costs", "1,1,1/2,2,2"});
  EXPECT_NE(text.out.find("stage 1: F=2 B=2 W=2"), std::string::npos) << text.out;
  expect_usage_error(
      {"--pp", "3", "--microbatches", "3", "--schedule", "1f1b", "--costs", "1,1,1/2,2,2"},
      {"has 2 stage groups but --pp is 3", "separated by '/'"});
}

}  // namespace
}  // namespace strata
