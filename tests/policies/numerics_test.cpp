// One documented behaviour per policy for numerically bad attention: the five
// attention-reading policies refuse NaN, infinite and negative weights before
// changing anything; Sliding Window and StreamingLLM never read attention.
#include <gtest/gtest.h>

#include <limits>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict {
namespace {

std::string refusal(const std::string& policy, float bad) {
  ParamMap params{{"budget", 8}};
  for (const ParamInfo& p : find_policy(policy).params) {
    if (p.name == "recentWindow") params.emplace_back("recentWindow", 1);
  }
  auto p = make_policy(policy, params);
  p->on_decode_step(1, std::vector<float>{1.0F});
  try {
    p->on_decode_step(2, std::vector<float>{0.5F, bad});
  } catch (const ContractError& e) {
    EXPECT_EQ(p->kept_count(), 2U);
    return e.what();
  }
  return "accepted";
}

TEST(Numerics, ReadingPoliciesRefuseNaNInfinityAndNegativeWeights) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::string title_and_name : {"Scissorhands:scissorhands", "H2O:h2o", "TOVA:tova",
                                           "SnapKV:snapkv", "PyramidKV:pyramidkv"}) {
    const auto colon = title_and_name.find(':');
    const std::string title = title_and_name.substr(0, colon);
    const std::string name = title_and_name.substr(colon + 1);
    EXPECT_EQ(refusal(name, nan), title + ": attention weight 1 is NaN; weights must be finite and at least 0");
    EXPECT_EQ(refusal(name, inf), title + ": attention weight 1 is inf; weights must be finite and at least 0");
    EXPECT_EQ(refusal(name, -0.5F), title + ": attention weight 1 is -0.5; weights must be finite and at least 0");
    EXPECT_EQ(refusal(name, -0.0F), "accepted") << name;  // -0 compares equal to 0
  }
}

TEST(Numerics, PoliciesThatNeverReadAttentionAcceptAnything) {
  EXPECT_EQ(refusal("sliding-window", std::numeric_limits<float>::quiet_NaN()), "accepted");
  EXPECT_EQ(refusal("streaming-llm", -1.0F), "accepted");
}

TEST(Numerics, WeightsBeyondTheHeldSetAreNeitherReadNorChecked) {
  auto p = make_policy("h2o", {{"budget", 4}, {"recentWindow", 1}});
  p->on_decode_step(1, std::vector<float>{0.5F, std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(p->kept_count(), 2U);
}

}  // namespace
}  // namespace kvevict
