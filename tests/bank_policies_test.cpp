// The bank's TOVA, Sliding Window and StreamingLLM against separate
// instances, as tests/bank_test.cpp does for Scissorhands and H2O: the same
// weights, given to the bank in slot order (NaN in free slots) and to each
// instance in ascending position order, give the same victims, kept counts
// and scores -- at budgets past the 64-slot blocks, with tie-heavy weights,
// grouped queries, gaps between positions, and poisoned steps refused
// without a trace.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>

#include "kvevict/core/bank.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict {
namespace {

// Sixteenths (many ties), exact zeros of both signs (-0.0 is a valid weight
// equal to 0, though its bits sort last) and ones.
float tie_heavy_weight() {
  switch (*rc::gen::inRange(0, 5)) {
    case 0: return 0.0F;
    case 1: return 1.0F;
    case 2: return -0.0F;
    default: return static_cast<float>(*rc::gen::inRange(0, 17)) / 16.0F;
  }
}

RC_GTEST_PROP(BankPolicies, DecideExactlyLikeSeparateInstances, ()) {
  const std::string policy = *rc::gen::element<std::string>("tova", "sliding-window", "streaming-llm");
  const auto n = *rc::gen::inRange<std::size_t>(1, 4);
  const bool large = *rc::gen::inRange(0, 3) == 0;
  const auto budget = large ? *rc::gen::inRange<std::int64_t>(60, 140) : *rc::gen::inRange<std::int64_t>(1, 12);
  const std::int64_t sinks = policy == "streaming-llm" ? *rc::gen::inRange<std::int64_t>(0, std::min<std::int64_t>(budget, 6)) : 0;
  const std::size_t group = policy == "tova" ? *rc::gen::inRange<std::size_t>(1, 4) : 1;
  const auto how = *rc::gen::element(Aggregation::kSum, Aggregation::kMean, Aggregation::kMax);
  BankParams params{policy, static_cast<std::int64_t>(n), budget, 0, static_cast<std::int64_t>(group), how,
                    *rc::gen::inRange(0, 3), sinks};
  PolicyBank bank(params);
  std::vector<std::unique_ptr<Policy>> separate;
  for (std::size_t k = 0; k < n; ++k) {
    ParamMap p{{"budget", budget}};
    if (policy == "streaming-llm") p.emplace_back("sinks", sinks);
    separate.push_back(make_policy(policy, p));
  }
  const std::size_t cap = bank.capacity();
  const std::size_t stride = cap + *rc::gen::inRange<std::size_t>(0, 3);
  std::vector<float> attn(n * group * stride);
  std::vector<Position> victims(n);
  std::vector<std::uint32_t> slots(n);
  const auto steps = static_cast<int>(budget) + *rc::gen::inRange(1, 40);
  std::int64_t pos = 0;
  for (int t = 1; t <= steps; ++t) {
    // Gaps between positions too -- except for StreamingLLM, whose spec bounds
    // its window at budget - sinks entries even when a gap skipped a sink
    // position, so a separate instance refuses such a stream.
    const bool gap = policy != "streaming-llm" && *rc::gen::inRange(0, 6) == 0;
    pos += gap ? *rc::gen::inRange<std::int64_t>(2, 5) : 1;
    std::vector<std::vector<float>> ascending(n);
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<std::pair<std::uint32_t, std::size_t>> held;
      for (std::size_t s = 0; s < cap; ++s) {
        if (bank.slot_position(k, s) != PolicyBank::kFree) held.emplace_back(bank.slot_position(k, s), s);
      }
      std::sort(held.begin(), held.end());
      RC_ASSERT(held.size() == separate[k]->kept_count());
      for (std::size_t s = 0; s < stride; ++s) {
        for (std::size_t g = 0; g < group; ++g) attn[(k * group + g) * stride + s] = std::nanf("");
      }
      for (const auto& [p, s] : held) {
        float folded = 0.0F;
        for (std::size_t g = 0; g < group; ++g) {
          const float w = tie_heavy_weight();
          attn[(k * group + g) * stride + s] = w;
          if (g == 0) {
            folded = w;
          } else if (how == Aggregation::kMax) {
            folded = w > folded ? w : folded;
          } else {
            folded += w;
          }
        }
        if (how == Aggregation::kMean && group > 1) folded /= static_cast<float>(group);
        ascending[k].push_back(folded);
      }
    }
    if (policy == "tova" && *rc::gen::inRange(0, 8) == 0) {
      std::vector<float> poisoned = attn;
      const std::size_t k = *rc::gen::inRange<std::size_t>(0, n);
      std::size_t slot = 0;
      while (bank.slot_position(k, slot) == PolicyBank::kFree) ++slot;
      poisoned[(k * group + *rc::gen::inRange<std::size_t>(0, group)) * stride + slot] =
          *rc::gen::element(std::nanf(""), -0.5F, INFINITY);
      RC_ASSERT_THROWS_AS(bank.step(pos, poisoned.data(), stride, victims.data(), slots.data()), ContractError);
    }
    bank.step(pos, attn.data(), stride, victims.data(), slots.data());
    for (std::size_t k = 0; k < n; ++k) {
      separate[k]->on_decode_step(pos, std::span<const float>(ascending[k]));
      std::vector<Position> want;
      if (static_cast<std::int64_t>(separate[k]->kept_count()) > budget) {
        const auto v = separate[k]->evict(budget);
        want.assign(v.begin(), v.end());
      }
      RC_ASSERT(want.size() <= 1U);
      if (want.empty()) {
        RC_ASSERT(victims[k] == PolicyBank::kFree);
      } else {
        RC_ASSERT(victims[k] == want[0]);
        RC_ASSERT(bank.free_slot(k) == slots[k]);
      }
      RC_ASSERT(bank.kept_count(k) == separate[k]->kept_count());
      if (policy == "tova") {
        // Every held position's last weight, -1 for the one admitted now.
        const QueryInfo* q = find_policy("tova").find_query("lastAttentionOf");
        for (std::size_t s = 0; s < cap; ++s) {
          const std::uint32_t p = bank.slot_position(k, s);
          if (p == PolicyBank::kFree) continue;
          const std::int64_t probe = p;
          RC_ASSERT(bank.score_of(k, p) == q->call(*separate[k], std::span(&probe, 1)));
        }
      }
    }
  }
}

TEST(BankPolicies, RulesAreCheckedAtConstruction) {
  const auto message = [](const BankParams& p) {
    try {
      PolicyBank bank(p);
    } catch (const ParameterError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"snapkv", 2, 8, 0}).find("'snapkv' has no bank: its max-pooling reads the scores of neighbouring"),
            std::string::npos);
  EXPECT_NE(message({"nope", 2, 8, 0}).find("(known: scissorhands, h2o, tova, sliding-window, streaming-llm)"),
            std::string::npos);
  // The key-aware policies are refused for what they lack (a key row each
  // step), not as if they had no bank for another reason.
  for (const char* name : {"knorm", "keydiff", "expected-attention"}) {
    const std::string m = message({name, 2, 8, 0});
    EXPECT_NE(m.find(std::string("policy '") + name + "' needs the new token's key"), std::string::npos) << m;
    EXPECT_NE(m.find("PolicyBank::step takes attention weights only"), std::string::npos) << m;
    EXPECT_EQ(m.find("has no bank"), std::string::npos) << m;
  }
  EXPECT_NE(message({"expected-attention", 2, 8, 0}).find("the new token's key, value, queries each step"),
            std::string::npos);
  EXPECT_NE(message({"tova", 2, 8, 3}).find("recentWindow (3) must be 0 for tova"), std::string::npos);
  EXPECT_NE(message({"streaming-llm", 2, 8, 0, 1, Aggregation::kSum, 0, 8}).find("sinks (8) must be smaller than budget (8)"),
            std::string::npos);
  EXPECT_NE(message({"h2o", 2, 8, 2, 1, Aggregation::kSum, 0, 1}).find("sinks (1) must be 0 for h2o"),
            std::string::npos);
  EXPECT_NE(message({"sliding-window", 2, 8, 0, 2}).find("groupSize (2) must be 1 for sliding-window"),
            std::string::npos);
}

TEST(BankPolicies, StreamingLLMKeepsItsSinksAndSlidesTheRest) {
  // Budget 4 with 2 sinks: positions 0 and 1 stay, the window keeps the 2 newest.
  PolicyBank bank({"streaming-llm", 1, 4, 0, 1, Aggregation::kSum, 1, 2});
  std::vector<float> attn(bank.capacity(), 0.0F);
  Position victim = 0;
  std::uint32_t slot = 0;
  std::vector<Position> evicted;
  for (std::int64_t p = 1; p <= 7; ++p) {
    bank.step(p, attn.data(), bank.capacity(), &victim, &slot);
    if (victim != PolicyBank::kFree) evicted.push_back(victim);
  }
  EXPECT_EQ(evicted, (std::vector<Position>{2, 3, 4, 5}));
  std::vector<Position> held;
  for (std::size_t s = 0; s < bank.capacity(); ++s) {
    if (bank.slot_position(0, s) != PolicyBank::kFree) held.push_back(bank.slot_position(0, s));
  }
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<Position>{0, 1, 6, 7}));
}

}  // namespace
}  // namespace kvevict
