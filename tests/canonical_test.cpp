#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "kvevict/core/registry.h"
#include "support.h"

namespace kvevict {
namespace {

struct Row {
  const char* policy;
  std::int64_t budget;
  double mass;
  double recall;
  std::int64_t calls;
};

// The 21 canonical rows of the peer catalogue (facts about decode-4096),
// pinned here so a clone without ../shared still checks them.
const Row kCanonical[] = {
    {"sliding-window", 256, 0.596637, 0.742171, 3840},
    {"sliding-window", 512, 0.655518, 0.774107, 3584},
    {"sliding-window", 1024, 0.754149, 0.833734, 3072},
    {"streaming-llm", 256, 0.736691, 0.859419, 3840},
    {"streaming-llm", 512, 0.786153, 0.88348, 3584},
    {"streaming-llm", 1024, 0.866203, 0.927572, 3072},
    {"h2o", 256, 0.643895, 0.886261, 3840},
    {"h2o", 512, 0.714859, 0.913715, 3584},
    {"h2o", 1024, 0.784413, 0.945091, 3072},
    {"scissorhands", 256, 0.641318, 0.882339, 3840},
    {"scissorhands", 512, 0.711377, 0.906047, 3584},
    {"scissorhands", 1024, 0.784746, 0.945091, 3072},
    {"tova", 256, 0.778128, 0.882339, 3840},
    {"tova", 512, 0.824012, 0.909793, 3584},
    {"tova", 1024, 0.885888, 0.937247, 3072},
    {"snapkv", 256, 0.783378, 0.890183, 3840},
    {"snapkv", 512, 0.82119, 0.901949, 3584},
    {"snapkv", 1024, 0.888049, 0.941169, 3072},
    {"pyramidkv", 256, 0.783378, 0.890183, 3840},
    {"pyramidkv", 512, 0.82119, 0.901949, 3584},
    {"pyramidkv", 1024, 0.888049, 0.941169, 3072},
};

TEST(Canonical, AllTwentyOneRowsAgreeExactly) {
  ASSERT_EQ(testing::canonical_rows().size(), 21U);
  for (const Row& r : kCanonical) {
    const RunRow& got = testing::canonical_row(r.policy, r.budget);
    EXPECT_EQ(got.metrics.retained_attention_mass, r.mass) << r.policy << "@" << r.budget;
    EXPECT_EQ(got.metrics.heavy_hitter_recall, r.recall) << r.policy << "@" << r.budget;
    EXPECT_EQ(got.metrics.eviction_calls, r.calls) << r.policy << "@" << r.budget;
  }
}

TEST(Canonical, PeerCanonicalFileAgreesRowByRow) {
  const auto dir = testing::conformance_dir();
  if (!dir) GTEST_SKIP() << "../shared/conformance is absent: peer canonical.json not replayed";
  std::ifstream in(*dir / "canonical.json");
  const auto doc = nlohmann::json::parse(in);
  std::size_t matched = 0;
  for (const auto& r : doc.at("rows")) {
    ASSERT_EQ(r.at("trace"), "decode-4096");
    const RunRow& got = testing::canonical_row(r.at("policy").get<std::string>(), r.at("budget").get<std::int64_t>());
    EXPECT_EQ(got.metrics.retained_attention_mass, r.at("retainedAttentionMass").get<double>());
    EXPECT_EQ(got.metrics.heavy_hitter_recall, r.at("heavyHitterRecall").get<double>());
    EXPECT_EQ(got.metrics.eviction_calls, r.at("evictionCalls").get<std::int64_t>());
    ++matched;
  }
  EXPECT_EQ(matched, 21U);
}

TEST(Canonical, RankedByRetainedMassAtTheMiddleBudget) {
  const auto& rows = testing::canonical_rows();
  double previous = 2.0;
  for (const RunRow& r : rows) {
    if (r.budget != 512) continue;
    EXPECT_LE(r.metrics.retained_attention_mass, previous) << r.policy;
    previous = r.metrics.retained_attention_mass;
  }
  EXPECT_EQ(rows.front().policy, "tova");
  EXPECT_EQ(rows.back().policy, "sliding-window");
}

TEST(Canonical, EveryPolicyButTheWindowBeatsTheWindowOnBothMetrics) {
  for (const PolicyInfo* info : testing::attention_policies()) {
    if (info->name == "sliding-window") continue;
    for (const std::int64_t b : {256, 512, 1024}) {
      const auto& m = testing::canonical_row(info->name, b).metrics;
      const auto& w = testing::canonical_row("sliding-window", b).metrics;
      EXPECT_GT(m.retained_attention_mass, w.retained_attention_mass) << info->name << "@" << b;
      EXPECT_GT(m.heavy_hitter_recall, w.heavy_hitter_recall) << info->name << "@" << b;
    }
  }
}

TEST(Canonical, RetainedMassRisesWithTheBudget) {
  for (const PolicyInfo* info : testing::attention_policies()) {
    const double m256 = testing::canonical_row(info->name, 256).metrics.retained_attention_mass;
    const double m512 = testing::canonical_row(info->name, 512).metrics.retained_attention_mass;
    const double m1024 = testing::canonical_row(info->name, 1024).metrics.retained_attention_mass;
    EXPECT_LT(m256, m512) << info->name;
    EXPECT_LT(m512, m1024) << info->name;
  }
}

}  // namespace
}  // namespace kvevict
