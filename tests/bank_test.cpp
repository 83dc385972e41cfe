// The bank against N separate instances: the same weights, given to the bank in
// slot order (with garbage in free slots) and to each instance in ascending
// position order, must produce the same victims, kept counts and scores.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>

#include "generators.h"
#include "kvevict/core/bank.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict {
namespace {

RC_GTEST_PROP(Bank, DecidesExactlyLikeSeparateInstances, ()) {
  const std::string policy = *rc::gen::element<std::string>("scissorhands", "h2o");
  const auto n = *rc::gen::inRange<std::size_t>(1, 6);
  const std::int64_t budget = random_budget();
  const std::int64_t recent = random_window(budget - 1);
  RC_TAG(policy, budget >= kLargeBudget ? "large" : "small");
  const auto group = *rc::gen::inRange<std::size_t>(1, 4);
  const auto how = *rc::gen::element(Aggregation::kSum, Aggregation::kMean, Aggregation::kMax);
  // The long runs at large budgets on one thread: every step is a parallel
  // region, and on a loaded machine waiting threads cost more than the run.
  const int threads = budget >= kLargeBudget ? 1 : *rc::gen::inRange(0, 3);
  const std::int64_t normalize = *rc::gen::inRange<std::int64_t>(0, 2);
  RC_TAG(normalize);
  BankParams params{policy, static_cast<std::int64_t>(n), budget, recent, static_cast<std::int64_t>(group), how,
                    threads};
  params.normalize = normalize;
  PolicyBank bank(params);
  std::vector<std::unique_ptr<Policy>> separate;
  for (std::size_t k = 0; k < n; ++k) {
    separate.push_back(make_policy(policy, {{"budget", budget}, {"recentWindow", recent}, {"normalize", normalize}}));
  }
  const std::size_t cap = bank.capacity();
  const std::size_t stride = cap + *rc::gen::inRange<std::size_t>(0, 4);
  std::vector<float> attn(n * group * stride);
  std::vector<Position> victims(n);
  std::vector<std::uint32_t> slots(n);
  const auto steps = random_steps(budget, 120);
  WeightSource weights = WeightSource::draw(budget >= kLargeBudget);
  for (int t = 1; t <= steps; ++t) {
    std::vector<std::vector<float>> ascending(n);
    for (std::size_t k = 0; k < n; ++k) {
      // Held slots in ascending position order.
      std::vector<std::pair<std::uint32_t, std::size_t>> held;
      held.reserve(cap);
      for (std::size_t s = 0; s < cap; ++s) {
        if (bank.slot_position(k, s) != PolicyBank::kFree) held.emplace_back(bank.slot_position(k, s), s);
      }
      std::sort(held.begin(), held.end());
      RC_ASSERT(held.size() == separate[k]->kept_count());
      ascending[k].reserve(held.size());
      for (std::size_t s = 0; s < stride; ++s) {
        for (std::size_t g = 0; g < group; ++g) attn[(k * group + g) * stride + s] = std::nanf("");  // free: ignored
      }
      weights.begin_step(held.size());  // the fair share is 1 / held
      for (const auto& [p, s] : held) {
        float folded = 0.0F;
        for (std::size_t g = 0; g < group; ++g) {
          const float w = weights.next(p);
          attn[(k * group + g) * stride + s] = w;
          if (g == 0) {
            folded = w;
          } else if (how == Aggregation::kMax) {
            folded = w > folded ? w : folded;
          } else {
            folded += w;
          }
        }
        if (how == Aggregation::kMean) folded /= static_cast<float>(group);
        ascending[k].push_back(folded);
      }
    }
    if (*rc::gen::inRange(0, 8) == 0) {
      // A poisoned weight in one held slot: the whole step is refused and
      // leaves no trace (the separate instances never see it).
      std::vector<float> poisoned = attn;
      const std::size_t k = *rc::gen::inRange<std::size_t>(0, n);
      std::size_t slot = 0;
      while (bank.slot_position(k, slot) == PolicyBank::kFree) ++slot;
      poisoned[(k * group) * stride + slot] = *rc::gen::element(std::nanf(""), -0.5F, INFINITY);
      RC_ASSERT_THROWS_AS(bank.step(t, poisoned.data(), stride, victims.data(), slots.data()), ContractError);
    }
    bank.step(t, attn.data(), stride, victims.data(), slots.data());
    for (std::size_t k = 0; k < n; ++k) {
      separate[k]->on_decode_step(t, std::span<const float>(ascending[k]));
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
      // The score each ranks by (a rate with normalize=1), at the newest
      // position and at the oldest held one.
      const QueryInfo* q = find_policy(policy).find_query(policy == "h2o" ? "scoreOf" : "rankOf");
      for (const std::int64_t probe : {std::int64_t{t}, std::int64_t{bank.slot_position(k, 0)}}) {
        if (probe == PolicyBank::kFree) continue;
        RC_ASSERT(bank.score_of(k, static_cast<Position>(probe)) == q->call(*separate[k], std::span(&probe, 1)));
      }
    }
  }
}

TEST(Bank, RefusesBadInputBeforeAnyInstanceChanges) {
  PolicyBank bank({"scissorhands", 2, 4, 1, 1, Aggregation::kSum, 1});
  std::vector<float> attn(2 * bank.capacity(), 0.25F);
  std::vector<Position> victims(2);
  std::vector<std::uint32_t> slots(2);
  attn[bank.capacity()] = -1.0F;  // instance 1, slot 0 (position 0, held)
  EXPECT_THROW(bank.step(1, attn.data(), bank.capacity(), victims.data(), slots.data()), ContractError);
  EXPECT_EQ(bank.kept_count(0), 1U);
  EXPECT_EQ(bank.kept_count(1), 1U);
  attn[bank.capacity()] = 0.25F;
  EXPECT_THROW(bank.step(1, attn.data(), bank.capacity() - 1, victims.data(), slots.data()), ContractError);
  bank.step(1, attn.data(), bank.capacity(), victims.data(), slots.data());
  EXPECT_EQ(bank.kept_count(0), 2U);
  EXPECT_THROW(bank.step(1, attn.data(), bank.capacity(), victims.data(), slots.data()), ContractError);
  EXPECT_THROW(PolicyBank({"tova", 2, 4, 1, 1, Aggregation::kSum, 1}), ParameterError);
  EXPECT_THROW(PolicyBank({"h2o", 2, 4, 4, 1, Aggregation::kSum, 1}), ParameterError);
}

TEST(Bank, NormalizedScoresRankByTheMeanWeight) {
  // Budget 2, recentWindow 1. Position 0 gets 1 then 0.25 (1.25 over 2
  // steps, mean 0.625); position 1 gets 0.75 over 1 step. The sums drop 1,
  // the means drop 0.
  for (const std::int64_t normalize : {0, 1}) {
    BankParams p{"h2o", 1, 2, 1, 1, Aggregation::kSum, 1};
    p.normalize = normalize;
    PolicyBank bank(p);
    std::vector<float> attn(bank.capacity(), 0.0F);
    Position victim = 0;
    std::uint32_t slot = 0;
    attn[0] = 1.0F;
    bank.step(1, attn.data(), bank.capacity(), &victim, &slot);
    EXPECT_EQ(victim, PolicyBank::kFree);
    attn = {0.25F, 0.75F, 0.0F};
    bank.step(2, attn.data(), bank.capacity(), &victim, &slot);
    EXPECT_EQ(victim, normalize != 0 ? 0U : 1U);
    EXPECT_EQ(bank.score_of(0, normalize != 0 ? 1 : 0), normalize != 0 ? 0.75 : 1.25);
    EXPECT_EQ(bank.score_of(0, 2), 0.0);  // admitted, not yet scored
  }
  // Only the policies that accumulate a score take it.
  BankParams tova{"tova", 1, 4, 0, 1, Aggregation::kSum, 1};
  tova.normalize = 1;
  try {
    PolicyBank bank(tova);
    ADD_FAILURE() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "PolicyBank: normalize (1) must be 0 for tova: only h2o and scissorhands accumulate a score to normalise");
  }
}

TEST(Bank, FreedSlotsAreReusedByTheNextToken) {
  PolicyBank bank({"h2o", 1, 2, 0, 1, Aggregation::kSum, 1});
  std::vector<float> attn(bank.capacity(), 0.0F);
  Position victim = 0;
  std::uint32_t slot = 0;
  attn[0] = 1.0F;                         // step 1: position 0 gets 1
  bank.step(1, attn.data(), bank.capacity(), &victim, &slot);
  EXPECT_EQ(victim, PolicyBank::kFree);   // 2 held, budget 2
  attn = {0.75F, 0.25F, 0.0F};            // step 2: 0 -> 1.75, 1 -> 0.25, 2 admitted with 0
  bank.step(2, attn.data(), bank.capacity(), &victim, &slot);
  EXPECT_EQ(victim, 2U);                  // recentWindow 0: the new token's 0 is the lowest
  EXPECT_EQ(slot, 2U);
  EXPECT_EQ(bank.free_slot(0), 2U);
  bank.step(3, attn.data(), bank.capacity(), &victim, &slot);
  // Position 3 went into the freed slot 2 and, scoring 0, leaves it again.
  EXPECT_EQ(victim, 3U);
  EXPECT_EQ(slot, 2U);
  EXPECT_EQ(bank.slot_position(0, 0), 0U);
  EXPECT_EQ(bank.slot_position(0, 1), 1U);
}

}  // namespace
}  // namespace kvevict
