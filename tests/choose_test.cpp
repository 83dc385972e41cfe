// kvevict choose (kvevict/model/evaluation/choose.h): with the plan fixed,
// every number of a row is the one the library's own commands give on their
// own -- perplexity's extra bits and interval, run_tasks' passkey answers --
// the rows are ranked by extra bits, the recommendation names the first, and
// each bad request is refused before any work.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/model/evaluation/choose.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/evaluation/tasks.h"
#include "support.h"

namespace kvevict {
namespace {

TEST(Choose, EveryRowIsWhatTheCommandsGiveAloneRankedByExtraBits) {
  const std::shared_ptr<const Model> model = testing::committed_model();
  const std::vector<std::uint8_t> text = testing::heldout_prefix(6000);
  ChooseRequest request;
  request.budget = 128;
  request.policies = {"h2o", "snapkv", "streaming-llm"};
  request.minutes = 0.5;
  request.windows = 4;
  request.samples = 2;
  bool planned = false;
  const ChooseResult r = choose(model, text, request, [&](const ChoosePlan& p) {
    planned = true;
    EXPECT_EQ(p.windows, 4U);
    EXPECT_EQ(p.samples, 2U);
  });
  ASSERT_TRUE(planned);
  ASSERT_EQ(r.rows.size(), 3U);

  std::vector<RunSpec> specs;
  for (const std::string& p : request.policies) specs.push_back({p, {}, 128});
  ModelRunOptions options;
  options.max_windows = 4;
  const std::vector<PerplexityRow> ppl = perplexity(*model, text, specs, options);
  TaskRequest tasks;
  tasks.tasks = {"passkey"};
  tasks.lengths = {r.plan.length};
  tasks.depths = 2;
  tasks.samples = 2;
  tasks.policies = request.policies;
  tasks.budgets = {128};
  tasks.moments = {Moment::decode};
  const std::vector<TaskRow> answers = run_tasks(model, text, tasks);
  for (const ChooseRow& row : r.rows) {
    SCOPED_TRACE(row.policy);
    const auto p = std::find_if(ppl.begin(), ppl.end(), [&](const PerplexityRow& x) { return x.policy == row.policy; });
    ASSERT_NE(p, ppl.end());
    EXPECT_EQ(row.extra_bits_per_byte, p->extra_bits_per_byte);
    EXPECT_EQ(row.extra_low, p->extra_low);
    EXPECT_EQ(row.extra_high, p->extra_high);
    EXPECT_EQ(row.kv_bytes, static_cast<std::uint64_t>(p->model_bytes_per_position * 128));
    std::uint32_t correct = 0;
    for (const TaskRow& t : answers) correct += t.policy == row.policy ? t.correct : 0;
    EXPECT_EQ(row.correct, correct);
    EXPECT_EQ(row.samples, 4U);  // 2 depths x 2 samples
    EXPECT_GT(row.tokens_per_second, 0.0);
  }
  for (std::size_t i = 1; i < r.rows.size(); ++i) {
    EXPECT_LE(r.rows[i - 1].extra_bits_per_byte, r.rows[i].extra_bits_per_byte);
    EXPECT_EQ(r.rows[i].rank, static_cast<int>(i + 1));
  }
  EXPECT_EQ(r.recommendation.rfind(r.rows.front().policy + ": ", 0), 0U) << r.recommendation;
  ASSERT_EQ(r.narrow.size(), 2U);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(choose_json(r, {"choose", "m.kvm"}));
  // The envelope first, then choose's per-result members.
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"command", "model", "rows", "plan", "fullCache", "recommendation",
                                            "narrow", "windows", "samples", "seconds"}));
  EXPECT_EQ(j["command"], "choose");
  EXPECT_EQ(j["model"], "m.kvm");
  EXPECT_EQ(j["rows"].size(), 3U);
  EXPECT_EQ(j["rows"][0]["policy"], r.rows.front().policy);
}

// With the plan left to the clock (no --windows, no --samples), every stage
// runs under its deadline to the end: the windows' length from the plan, then
// the passkey samples at their own length (a timed choose once failed there,
// handing the windows' length to the tasks, which refuse one).
TEST(Choose, ATimedPlanRunsEveryStage) {
  const std::shared_ptr<const Model> model = testing::committed_model();
  const std::vector<std::uint8_t> text = testing::heldout_prefix(6000);
  ChooseRequest request;
  request.budget = 128;
  request.policies = {"h2o", "streaming-llm"};
  request.minutes = 0.1;
  bool planned = false;
  const ChooseResult r = choose(model, text, request, [&](const ChoosePlan& p) {
    planned = true;
    EXPECT_GT(p.probe_seconds, 0.0) << "a timed plan probes";
  });
  ASSERT_TRUE(planned);
  ASSERT_EQ(r.rows.size(), 2U);
  EXPECT_GE(r.windows, 2U) << "the interval needs two windows, deadline or not";
  for (const ChooseRow& row : r.rows) EXPECT_GT(row.tokens_per_second, 0.0) << row.policy;
}

TEST(Choose, BadRequestsAreRefusedBeforeAnyWork) {
  const std::shared_ptr<const Model> model = testing::committed_model();
  const std::vector<std::uint8_t> text = testing::heldout_prefix(6000);
  ChooseRequest request;
  request.minutes = 0.01;
  testing::expect_error<ParameterError>([&] { (void)choose(model, text, request); },
                                        "choose: --minutes (0.01) must be 0.1 ... 1440");
  request.minutes = 1;
  request.budget = model->config().context;
  EXPECT_THROW((void)choose(model, text, request), ParameterError);
  request.budget = 64;
  request.policies = {"h3o"};
  EXPECT_THROW((void)choose(model, text, request), ParameterError);
  request.policies = {"h2o"};
  const std::vector<std::uint8_t> short_text(text.begin(), text.begin() + 500);
  EXPECT_THROW((void)choose(model, short_text, request), InputError);
}

}  // namespace
}  // namespace kvevict
