// Property tests over every registered policy: random parameters, budgets and
// attention sequences (absent steps, short and long vectors, weights of 0, 1
// and denormals, many ties), driven like the harness, checking after every
// step what each policy promises.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <limits>

#include "alloc_counter.h"
#include "generators.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "support.h"

namespace kvevict {
namespace {

struct Step {
  bool present;
  std::vector<float> attn;
};

RC_GTEST_PROP(Properties, EveryPolicyKeepsItsPromises, ()) {
  const auto policies_list = testing::attention_policies();
  const PolicyInfo& info = *policies_list[*rc::gen::noShrink(rc::gen::inRange<std::size_t>(0, policies_list.size()))];
  const std::int64_t budget = random_budget();
  const ParamMap params = random_params(info, budget);
  const std::int64_t recent = param_or(params, "recentWindow", -1);
  const std::int64_t sinks = param_or(params, "sinks", -1);
  RC_TAG(info.name, budget >= kLargeBudget ? "large" : "small");

  std::unique_ptr<Policy> policy = info.make(params);
  const std::size_t memory = policy->memory_bytes();
  const auto steps = random_steps(budget, 160);
  WeightSource weights = WeightSource::draw(budget >= kLargeBudget);

  std::vector<Position> held{0};  // the model of the held set, ascending
  std::vector<Position> victims;
  victims.reserve(static_cast<std::size_t>(budget) + 8);  // so copying victims never allocates
  for (int t = 1; t <= steps; ++t) {
    // Draw the step before counting allocations.
    Step step{weights.pick(10) != 0, {}};
    if (step.present) {
      std::size_t len = held.size();
      const auto shape = weights.pick(10);
      if (shape == 0) len = weights.pick(static_cast<std::uint32_t>(held.size() + 1));
      if (shape == 1) len += 1 + weights.pick(3);
      weights.begin_step(len);
      step.attn.reserve(len);
      for (std::size_t i = 0; i < len; ++i) {
        step.attn.push_back(weights.next(i < held.size() ? std::int64_t{held[i]} : t + std::ssize(step.attn) + 1));
      }
    }
    const Attention attn = step.present ? Attention(std::span<const float>(step.attn)) : std::nullopt;

    std::size_t allocations = 0;
    std::size_t kept_after = 0;
    bool evicted = false;
    {
      testing::CountAllocations counter;
      policy->on_decode_step(t, attn);
      if (std::ssize(held) + 1 > budget) {
        const auto v = policy->evict(budget);
        victims.assign(v.begin(), v.end());
        evicted = true;
      }
      kept_after = policy->kept_count();
      allocations = counter.count();
    }
    RC_ASSERT(allocations == 0U);
    RC_ASSERT(policy->memory_bytes() == memory);

    held.push_back(static_cast<Position>(t));
    const std::vector<Position> before = held;
    if (evicted) {
      RC_ASSERT(std::is_sorted(victims.begin(), victims.end()));
      RC_ASSERT(std::adjacent_find(victims.begin(), victims.end()) == victims.end());
      for (const Position v : victims) {
        const auto it = std::lower_bound(held.begin(), held.end(), v);
        RC_ASSERT(it != held.end() && *it == v);  // held
        held.erase(it);
      }
      // Protected positions, where the policy promises them.
      if (recent > 0) {
        const std::size_t protect = std::min<std::size_t>(static_cast<std::size_t>(recent), before.size());
        for (std::size_t i = before.size() - protect; i < before.size(); ++i) {
          RC_ASSERT(!std::binary_search(victims.begin(), victims.end(), before[i]));
        }
      }
      if (sinks > 0) {
        for (const Position v : victims) RC_ASSERT(std::int64_t{v} >= sinks);
      }
      if (info.name == "tova" || info.name == "sliding-window" || info.name == "streaming-llm") {
        RC_ASSERT(!std::binary_search(victims.begin(), victims.end(), static_cast<Position>(t)));
      }
    }
    RC_ASSERT(kept_after == held.size());
    if (std::ssize(held) > budget) {
      // Only TOVA may fall short, and only when every held position is
      // unobserved (its sole immunity); the run cannot go on from there.
      RC_ASSERT(info.name == "tova");
      const QueryInfo* last = info.find_query("lastAttentionOf");
      for (const Position p : held) {
        const std::int64_t arg = p;
        RC_ASSERT(last->call(*policy, std::span<const std::int64_t>(&arg, 1)) == -1.0);
      }
      break;
    }
    if (info.name == "pyramidkv" && evicted) {
      const QueryInfo* eff = info.find_query("effectiveBudget");
      RC_ASSERT(std::ssize(held) <= static_cast<std::int64_t>(eff->call(*policy, {})));
    }
  }
}

RC_GTEST_PROP(Properties, RefusedStepsChangeNothing, ()) {
  // A NaN, infinite or negative weight is refused before any state moves:
  // the same policy then decides exactly like one that never saw the step.
  const auto policies_list = testing::attention_policies();
  const PolicyInfo& info = *policies_list[*rc::gen::noShrink(rc::gen::inRange<std::size_t>(0, policies_list.size()))];
  const std::int64_t budget = random_budget();
  const ParamMap params = random_params(info, budget);
  auto a = info.make(params);
  auto b = info.make(params);
  std::vector<Position> held{0};
  const auto steps = random_steps(budget, 60);
  WeightSource weights = WeightSource::draw(budget >= kLargeBudget);
  for (int t = 1; t <= steps; ++t) {
    std::vector<float> w;
    weights.begin_step(held.size());
    for (const Position p : held) w.push_back(weights.next(p));
    const std::span<const float> clean(w);
    if (*rc::gen::inRange(0, 4) == 0 && !w.empty()) {
      std::vector<float> poisoned = w;
      const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(), -0.25F};
      poisoned[*rc::gen::inRange<std::size_t>(0, w.size())] = bad[*rc::gen::inRange(0, 3)];
      if (info.name == "sliding-window" || info.name == "streaming-llm") {
        a->on_decode_step(t, std::span<const float>(poisoned));  // never read
      } else {
        RC_ASSERT_THROWS_AS(a->on_decode_step(t, std::span<const float>(poisoned)), ContractError);
        RC_ASSERT(a->kept_count() == b->kept_count());
        a->on_decode_step(t, clean);
      }
    } else {
      a->on_decode_step(t, clean);
    }
    b->on_decode_step(t, clean);
    held.push_back(static_cast<Position>(t));
    if (std::ssize(held) > budget) {
      const auto va = a->evict(budget);
      const std::vector<Position> victims_a(va.begin(), va.end());
      const auto vb = b->evict(budget);
      const std::vector<Position> victims_b(vb.begin(), vb.end());
      RC_ASSERT(victims_a == victims_b);
      for (const Position v : victims_a) std::erase(held, v);
      if (std::ssize(held) > budget) break;
    }
  }
}

}  // namespace
}  // namespace kvevict
