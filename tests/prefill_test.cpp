// Prefill compression (include/kvevict/core/prefill.h, docs/prefill.md): the
// hand-worked cases of vectors/prefill.json replayed through the C++ API, and
// the rules no vector pins: shapes, errors, every policy keeping exactly the
// budget, the whole prompt when it fits.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "support.h"

namespace kvevict {
namespace {

using nlohmann::json;

nlohmann::json load_prefill_vectors() {
  std::ifstream in(std::string(KVEVICT_SOURCE_DIR) + "/vectors/prefill.json");
  std::ostringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// window rows (each n long) -> one row-major buffer
std::vector<float> flatten(const json& window) {
  std::vector<float> flat;
  for (const json& row : window) {
    for (const json& w : row) flat.push_back(static_cast<float>(w.get<double>()));
  }
  return flat;
}

TEST(PrefillVectors, EveryCaseReplaysThroughCpp) {
  const json doc = load_prefill_vectors();
  ASSERT_EQ(doc.at("kind"), "kv-cache/prefill");
  ASSERT_EQ(doc.at("version"), 1);
  std::size_t replayed = 0;
  for (const json& c : doc.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ParamMap params;
    if (c.contains("params")) {
      for (auto it = c.at("params").begin(); it != c.at("params").end(); ++it) {
        params.emplace_back(it.key(), it.value().get<std::int64_t>());
      }
    }
    const json& window = c.at("window");
    const std::vector<float> flat = flatten(window);
    const PrefillWindow w{flat, window.size(), window.at(0).size()};
    if (c.contains("expect")) {
      const auto kept = prefill(c.at("policy").get<std::string>(), params, c.at("budget").get<std::int64_t>(), w);
      EXPECT_EQ(json(kept), c.at("expect"));
    } else {
      try {
        prefill(c.at("policy").get<std::string>(), params, c.at("budget").get<std::int64_t>(), w);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), c.at("error").get<std::string>());
      }
    }
    ++replayed;
  }
  // Every policy has at least one case that compresses.
  std::set<std::string> covered;
  for (const json& c : doc.at("cases")) {
    if (c.contains("expect")) covered.insert(c.at("policy").get<std::string>());
  }
  EXPECT_EQ(covered.size(), testing::attention_policies().size());
  EXPECT_GE(replayed, 20U);
}

// A window of `rows` rows over n positions: row i spreads its mass evenly
// over positions 0 ... q, plus `extra` on position `spike`.
std::vector<float> even_window(std::size_t rows, std::size_t n) {
  std::vector<float> w(rows * n, 0.0F);
  for (std::size_t i = 0; i < rows; ++i) {
    const std::size_t q = n - rows + i;
    for (std::size_t j = 0; j <= q; ++j) w[i * n + j] = 1.0F / static_cast<float>(q + 1);
  }
  return w;
}

ParamMap small_params(const std::string& policy) {
  if (policy == "streaming-llm") return {{"sinks", 1}};
  if (policy == "h2o" || policy == "scissorhands" || policy == "snapkv" || policy == "pyramidkv") {
    return {{"recentWindow", 2}};
  }
  return {};
}

TEST(Prefill, ABudgetOfAtLeastThePromptKeepsEveryPosition) {
  const std::vector<float> w = even_window(4, 12);
  for (const PolicyInfo* info : testing::attention_policies()) {
    for (const std::int64_t budget : {12, 13, 1000}) {
      const auto kept = prefill(info->name, small_params(info->name), budget, {w, 4, 12});
      ASSERT_EQ(kept.size(), 12U) << info->name << " " << budget;
      for (std::size_t j = 0; j < kept.size(); ++j) EXPECT_EQ(kept[j], j) << info->name;
    }
  }
}

TEST(Prefill, EveryPolicyKeepsExactlyTheBudgetAscending) {
  // Uneven rows: weights from a fixed pattern, each row's tail zero.
  const std::size_t n = 40;
  const std::size_t rows = 6;
  std::vector<float> w(rows * n, 0.0F);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j <= n - rows + i; ++j) w[i * n + j] = static_cast<float>((j * 7 + i * 3) % 11) / 64.0F;
  }
  for (const PolicyInfo* info : testing::attention_policies()) {
    for (const std::int64_t budget : {6, 7, 20, 39}) {
      const auto kept = prefill(info->name, small_params(info->name), budget, {w, rows, n});
      EXPECT_EQ(kept.size(), static_cast<std::size_t>(budget)) << info->name << " " << budget;
      for (std::size_t k = 1; k < kept.size(); ++k) EXPECT_LT(kept[k - 1], kept[k]) << info->name;
      EXPECT_LT(kept.back(), n);
    }
  }
}

TEST(Prefill, SnapKVKeepsTheWindowAndH2OTheRecentWindow) {
  // Position 0 takes everything in every row: every scoring policy keeps it.
  const std::size_t n = 10;
  const std::size_t rows = 3;
  std::vector<float> w(rows * n, 0.0F);
  for (std::size_t i = 0; i < rows; ++i) w[i * n] = 1.0F;
  const PrefillWindow window{w, rows, n};
  EXPECT_EQ(prefill("snapkv", {{"recentWindow", 1}, {"poolKernel", 1}}, 4, window),
            (std::vector<Position>{0, 7, 8, 9}));
  EXPECT_EQ(prefill("h2o", {{"recentWindow", 2}}, 4, window), (std::vector<Position>{0, 7, 8, 9}));
  EXPECT_EQ(prefill("h2o", {{"recentWindow", 1}}, 4, window), (std::vector<Position>{0, 7, 8, 9}));
  // TOVA protects nothing: among the zeros the argmin evicts the lowest
  // positions first, so 1 ... 7 go and the highest zeros, 8 and 9, stay.
  EXPECT_EQ(prefill("tova", {}, 3, window), (std::vector<Position>{0, 8, 9}));
  // Sinks protect the first positions.
  EXPECT_EQ(prefill("h2o", {{"recentWindow", 1}, {"sinks", 2}}, 4, window), (std::vector<Position>{0, 1, 8, 9}));
  EXPECT_EQ(prefill("streaming-llm", {{"sinks", 1}}, 4, window), (std::vector<Position>{0, 7, 8, 9}));
  EXPECT_EQ(prefill("sliding-window", {}, 4, window), (std::vector<Position>{6, 7, 8, 9}));
}

TEST(Prefill, ScissorhandsHistoryWindowCountsOnlyTheLastRows) {
  // n = 5, three rows (queries 2, 3, 4; fair shares 1/3, 1/4, 1/5).
  // Row 0 votes for position 1 (0.5 > 1/3); rows 1 and 2 vote for 0 (0.5 > 1/4, > 1/5);
  // nothing else outside the recent window beats its share (0.25 is not above 1/4).
  // All rows: votes 0:2, 1:1, 2:0, 3:0 -> budget 3 with recentWindow 1 evicts 2 and 3.
  // historyWindow 1 (the last row only): 0:1, 1:0, 2:0, 3:0 -> evicts 1 and 2.
  const std::vector<float> w = {
      0.25F, 0.5F, 0.25F, 0.0F, 0.0F,   //
      0.5F,  0.0F, 0.25F, 0.25F, 0.0F,  //
      0.5F,  0.0F, 0.125F, 0.125F, 0.25F,
  };
  const PrefillWindow window{w, 3, 5};
  EXPECT_EQ(prefill("scissorhands", {{"recentWindow", 1}}, 3, window), (std::vector<Position>{0, 1, 4}));
  EXPECT_EQ(prefill("scissorhands", {{"recentWindow", 1}, {"historyWindow", 1}}, 3, window),
            (std::vector<Position>{0, 3, 4}));
}

void expect_error(const std::string& policy, const ParamMap& params, std::int64_t budget,
                  const PrefillWindow& window, const std::string& message) {
  try {
    prefill(policy, params, budget, window);
    ADD_FAILURE() << "no error, expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(Prefill, BadWindowsAreRefusedWithOneLine) {
  const std::vector<float> w = {1.0F, 0.0F, 0.5F, 0.5F};
  expect_error("tova", {}, 1, {w, 2, 3},
               "prefill: the window holds 4 weights, but 2 rows over a 3-position prompt need 6");
  expect_error("tova", {}, 1, {w, 0, 4},
               "prefill: the window has no rows: pass the attention rows of the prompt's last w >= 1 positions");
  expect_error("tova", {}, 1, {{}, 1, 0}, "prefill: the prompt is empty (length 0)");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> with_nan = {1.0F, 0.0F, nan, 0.5F};
  expect_error("h2o", {{"recentWindow", 0}}, 1, {with_nan, 2, 2},
               "prefill: row 1 column 0 is NaN: weights must be finite and at least 0");
  const std::vector<float> with_inf = {1.0F, 0.0F, 0.5F, inf};
  expect_error("h2o", {{"recentWindow", 0}}, 1, {with_inf, 2, 2},
               "prefill: row 1 column 1 is inf: weights must be finite and at least 0");
  // The checks run even when the prompt fits the budget.
  expect_error("h2o", {{"recentWindow", 0}}, 10, {with_inf, 2, 2},
               "prefill: row 1 column 1 is inf: weights must be finite and at least 0");
}

TEST(Prefill, BadParametersAreTheDecodeTimePolicysErrors) {
  const std::vector<float> w = {0.5F, 0.5F};
  expect_error("tova", {}, -3, {w, 1, 2}, "prefill: budget (-3) must be at least 1");
  expect_error("tova", {{"recentWindow", 1}}, 2, {w, 1, 2}, "TOVA: unknown parameter 'recentWindow' (known: budget)");
  expect_error("snapkv", {{"recentWindow", 1}, {"poolKernel", 2}}, 2, {w, 1, 2},
               "SnapKV: poolKernel (2) must be odd: the pooling window is centred on each position");
  // PyramidKV: the layer's share smaller than the window.
  const std::vector<float> rows3 = even_window(3, 8);
  expect_error("pyramidkv",
               {{"recentWindow", 1}, {"numLayers", 2}, {"layer", 1}, {"pyramidRatio", 3}}, 4, {rows3, 3, 8},
               "PyramidKV prefill: the window (3 rows) is larger than layer 1's share (2): the window's "
               "positions are always kept, so it must fit");
}

}  // namespace
}  // namespace kvevict
