// Task rows (the evaluation layer): JSON out and back, clear errors for a bad
// file, and the report's charts of them -- a heatmap cell per length and
// depth coloured by accuracy, accuracy against the budget per moment.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/eval/task_rows.h"
#include "kvevict/report/report.h"

namespace kvevict {
namespace {

TaskRow row(std::string policy, std::int64_t budget, Moment m, std::uint32_t length, double depth,
            std::uint32_t correct, std::uint32_t samples) {
  TaskRow r;
  r.task = "passkey";
  r.policy = std::move(policy);
  r.budget = budget;
  r.moment = m;
  r.length = length;
  r.depth = depth;
  r.correct = correct;
  r.samples = samples;
  r.accuracy = static_cast<double>(correct) / samples;
  std::tie(r.low, r.high) = wilson_interval(correct, samples);
  return r;
}

std::vector<TaskRow> sample_rows() {
  return {row("", 0, Moment::full, 512, 0.25, 4, 4),          row("", 0, Moment::full, 512, 0.75, 2, 4),
          row("tova", 64, Moment::decode, 512, 0.25, 0, 4),    row("tova", 64, Moment::decode, 512, 0.75, 1, 4),
          row("tova", 128, Moment::decode, 512, 0.25, 3, 4),   row("tova", 128, Moment::decode, 512, 0.75, 3, 4),
          row("tova", 64, Moment::prefill, 512, 0.25, 2, 4),   row("tova", 64, Moment::prefill, 512, 0.75, 2, 4)};
}

TEST(TaskRows, JsonRoundTripsEveryField) {
  const std::vector<TaskRow> rows = sample_rows();
  const std::vector<TaskRow> back = read_task_rows(tasks_json(rows, {"tasks", "m.kvm"}), "rows.json");
  ASSERT_EQ(back.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(back[i].policy, rows[i].policy);
    EXPECT_EQ(back[i].moment, rows[i].moment);
    EXPECT_EQ(back[i].budget, rows[i].budget);
    EXPECT_EQ(back[i].length, rows[i].length);
    EXPECT_EQ(back[i].depth, rows[i].depth);
    EXPECT_EQ(back[i].correct, rows[i].correct);
    EXPECT_EQ(back[i].accuracy, rows[i].accuracy);
    EXPECT_EQ(back[i].kv_precision, rows[i].kv_precision);
    EXPECT_EQ(back[i].kv_residual, rows[i].kv_residual);
    EXPECT_EQ(back[i].bytes_per_position, rows[i].bytes_per_position);
  }
  // The store's fields round-trip; a file without them was fp32.
  std::vector<TaskRow> int4 = rows;
  for (TaskRow& r : int4) {
    r.kv_precision = "int4";
    r.kv_residual = 32;
    r.bytes_per_position = 52.0;
  }
  const std::vector<TaskRow> back4 = read_task_rows(tasks_json(int4, {"tasks", std::nullopt}), "int4.json");
  EXPECT_EQ(back4[0].kv_precision, "int4");
  EXPECT_EQ(back4[0].kv_residual, 32U);
  EXPECT_EQ(back4[0].bytes_per_position, 52.0);
  EXPECT_NE(tasks_markdown(int4).find("| decode | int4 (residual 32) |"), std::string::npos) << tasks_markdown(int4);
  EXPECT_EQ(tasks_markdown(rows).find("residual"), std::string::npos);
  const std::vector<TaskRow> old = read_task_rows(
      R"([{"task": "passkey", "policy": "full", "budget": 0, "moment": "full", "length": 512, "depth": 0.25,
           "samples": 4, "correct": 4, "evicted": 0}])",
      "old.json");
  EXPECT_EQ(old[0].kv_precision, "fp32");
  // The envelope's rows, and only a tasks document's.
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(tasks_json(rows, {"tasks", "m.kvm"}));
  EXPECT_EQ(doc.at("command"), "tasks");
  EXPECT_EQ(doc.at("model"), "m.kvm");
  EXPECT_EQ(doc.at("rows").size(), rows.size());
  // markdown: one line per policy x budget x moment, a column per depth.
  const std::string md = tasks_markdown(rows);
  EXPECT_NE(md.find("| passkey | 512 | tova | 64 | decode | 0.00 | 0.25 | **0.12** |"), std::string::npos) << md;
}

TEST(TaskRows, BadDocumentsAreOneLineErrors) {
  auto expect = [](const std::string& json, const std::string& phrase) {
    try {
      read_task_rows(json, "t.json");
      ADD_FAILURE() << "accepted " << json;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  expect("{", "t.json: not JSON");
  expect(R"({"command": "stream", "model": null, "rows": []})", "t.json: expected the rows of kvevict tasks");
  expect(R"([{"task": "passkey", "policy": "full", "budget": 0, "moment": "full", "length": 512, "depth": 0.25,
              "samples": 4, "correct": 4, "evicted": 0, "kvPrecision": "int2", "kvResidual": 0,
              "bytesPerPosition": 1}])",
         "'kvPrecision' ('int2') is not fp32, fp16, int8 or int4");
  expect("{}", "t.json: expected the rows of kvevict tasks --format json");
  expect(R"([{"task": "passkey"}])", "t.json: row 0: no 'policy'");
  expect(R"([{"task":"passkey","policy":"h2o","budget":64,"moment":"soon","length":512,"depth":0.5,"samples":4,"correct":1,"evicted":0}])",
         "t.json: row 0: unknown moment 'soon'");
  expect(R"([{"task":"passkey","policy":"h2o","budget":64,"moment":"decode","length":512,"depth":0.5,"samples":4,"correct":5,"evicted":0}])",
         "t.json: row 0: 'correct' (5) must be in 0 ... 4");
  // Every field for its type and range: a negative count once wrapped to
  // 2^32 - 1 and a negative budget drew NaN coordinates, both accepted.
  const auto row = [](const std::string& fields) {
    return R"([{"task":"passkey","length":512,"depth":0.5,"correct":1,"evicted":0,)" + fields + "}]";
  };
  expect(row(R"("policy":"h2o","budget":64,"moment":"decode","samples":-1)"), "row 0: 'samples' (-1) must be in 1 ... 4294967295");
  expect(row(R"("policy":"h2o","budget":64,"moment":"decode","samples":0)"), "row 0: 'samples' (0) must be in 1 ...");
  expect(row(R"("policy":"h2o","budget":64,"moment":"decode","samples":4294967296)"), "row 0: 'samples' (4294967296) must be in 1 ... 4294967295");
  expect(row(R"("policy":"h2o","budget":64,"moment":"decode","samples":2.5)"), "row 0: 'samples' must be a whole number, not 2.5");
  expect(row(R"("policy":"h2o","budget":64,"moment":"decode","samples":"4")"), "row 0: 'samples' must be a whole number, not \"4\"");
  expect(row(R"("policy":"h2o","budget":-64,"moment":"decode","samples":4)"), "row 0: 'budget' (-64) must be in 0 ... 16777216");
  expect(row(R"("policy":"h2o","budget":0,"moment":"decode","samples":4)"), "row 0: policy 'h2o' with budget 0: the full cache's rows have budget 0, a policy's at least 1");
  expect(row(R"("policy":"full","budget":64,"moment":"full","samples":4)"), "row 0: policy 'full' with budget 64");
  expect(row(R"("policy":"full","budget":0,"moment":"decode","samples":4)"), "row 0: policy 'full' with moment 'decode'");
  expect(row(R"("policy":"h2o","budget":64,"moment":"full","samples":4)"), "row 0: policy 'h2o' with moment 'full'");
  expect(row(R"("policy":"","budget":64,"moment":"decode","samples":4)"), "row 0: 'policy' is empty");
  expect(row(R"("policy":7,"budget":64,"moment":"decode","samples":4)"), "row 0: 'policy' must be a string, not 7");
  expect(R"([{"task":"passkey","length":512,"depth":-0.1,"correct":1,"evicted":0,"policy":"h2o","budget":64,"moment":"decode","samples":4}])",
         "row 0: 'depth' (-0.1) must be in 0 ... 1");
  expect(R"([{"task":"passkey","length":512,"depth":1e400,"correct":1,"evicted":0,"policy":"h2o","budget":64,"moment":"decode","samples":4}])",
         "t.json: not JSON");
  expect(R"([{"task":"passkey","length":-512,"depth":0.5,"correct":1,"evicted":0,"policy":"h2o","budget":64,"moment":"decode","samples":4}])",
         "row 0: 'length' (-512) must be in 1 ... 4294967295");
  expect(R"([{"task":"passkey","length":512,"depth":0.5,"correct":1,"evicted":-1,"policy":"h2o","budget":64,"moment":"decode","samples":4}])",
         "row 0: 'evicted' (-1) must be in 0 ... 18446744073709551615");
  expect(R"([7])", "row 0: not an object");
  // Names too: only what kvevict tasks writes (the report prints them).
  expect(R"([{"task":"haystack","length":512,"depth":0.5,"correct":1,"evicted":0,"policy":"h2o","budget":64,"moment":"decode","samples":4}])",
         "row 0: unknown task 'haystack' (known: passkey, multikey, multivalue, vartrack, copy)");
  expect(row(R"("policy":"nan","budget":64,"moment":"decode","samples":4)"), "row 0: unknown policy 'nan' (known: full, ");
  EXPECT_THROW(read_task_rows_file("/nonexistent/rows.json"), InputError);
}

TEST(TaskRows, TheReportDrawsAHeatmapPerPolicyAndMomentAndCurvesPerMoment) {
  const std::vector<Chart> charts = render_task_charts(sample_rows(), true);
  std::vector<std::string> names;
  for (const Chart& c : charts) names.push_back(c.name);
  // The full cache, then each policy x moment at the smallest budget (64),
  // then one accuracy curve per moment.
  EXPECT_EQ(names, (std::vector<std::string>{"needles-full", "needles-tova-decode-64", "needles-tova-prefill-64",
                                             "task-accuracy-vs-budget-decode", "task-accuracy-vs-budget-prefill"}));
  // Full cache: 4/4 at 25 % (green), 2/4 at 75 %.
  const std::string& full = charts[0].svg;
  EXPECT_NE(full.find("fill=\"#1a9850\" stroke=\"#fff\"><title>length 512, depth 25 %: 4 of 4 correct"), std::string::npos) << full;
  EXPECT_NE(full.find("depth 75 %: 2 of 4 correct"), std::string::npos);
  // tova decode at 64: 0/4 at 25 % (red).
  EXPECT_NE(charts[1].svg.find("fill=\"#d73027\" stroke=\"#fff\"><title>length 512, depth 25 %: 0 of 4 correct"),
            std::string::npos) << charts[1].svg;
  // The decode curve pools depths: 1/8 at 64, 6/8 at 128.
  EXPECT_NE(charts[3].svg.find("tova at budget 64: 1 of 8 correct (0.12"), std::string::npos) << charts[3].svg;
  EXPECT_NE(charts[3].svg.find("tova at budget 128: 6 of 8 correct (0.75"), std::string::npos);
  EXPECT_TRUE(render_task_charts({}, true).empty());
}

}  // namespace
}  // namespace kvevict
