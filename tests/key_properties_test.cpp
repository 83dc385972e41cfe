// Property tests over every registered policy that reads keys (knorm,
// keydiff, expected-attention, and any added later): random parameters,
// budgets and tie-heavy signals (repeated and zero keys, a few binary
// fractions), driven like the decoder, checking after every step what each
// policy promises, and that a refused step changes nothing.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "alloc_counter.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict {
namespace {

std::vector<const PolicyInfo*> key_aware_policies() {
  std::vector<const PolicyInfo*> out;
  for (const PolicyInfo* info : policies()) {
    if ((info->signals & kSignalKey) != 0) out.push_back(info);
  }
  return out;
}

struct Drawn {
  const PolicyInfo* info;
  std::int64_t budget, dim, groups, sinks, recent;
  ParamMap params;
};

// Parameters inside each policy's rules, drawn so that the rules' edges come up.
Drawn draw_policy() {
  const auto list = key_aware_policies();
  RC_PRE(!list.empty());
  Drawn d{};
  d.info = list[*rc::gen::noShrink(rc::gen::inRange<std::size_t>(0, list.size()))];
  const bool large = *rc::gen::arbitrary<bool>();
  d.budget = large ? *rc::gen::inRange<std::int64_t>(150, 300) : *rc::gen::inRange<std::int64_t>(1, 12);
  d.dim = 2 * *rc::gen::inRange<std::int64_t>(1, 5);
  d.groups = d.info->has_param("groups") ? *rc::gen::inRange<std::int64_t>(1, 4) : 1;
  d.recent = *rc::gen::inRange<std::int64_t>(0, d.budget);
  d.sinks = *rc::gen::inRange<std::int64_t>(0, std::min<std::int64_t>(d.budget - d.recent, 5));
  d.params = {{"budget", d.budget}, {"headDim", d.dim}, {"sinks", d.sinks}, {"recentWindow", d.recent}};
  if (d.info->has_param("groups")) d.params.emplace_back("groups", d.groups);
  if (d.info->has_param("queryWindow")) d.params.emplace_back("queryWindow", *rc::gen::inRange<std::int64_t>(1, 12));
  if (d.info->has_param("futurePositions")) {
    d.params.emplace_back("futurePositions", *rc::gen::element<std::int64_t>(1, 3, 512));
  }
  if (d.info->has_param("ropeBase")) d.params.emplace_back("ropeBase", *rc::gen::element<std::int64_t>(0, 10000));
  if (d.info->has_param("covariance")) d.params.emplace_back("covariance", *rc::gen::inRange<std::int64_t>(0, 2));
  if (d.info->has_param("valueNorm")) d.params.emplace_back("valueNorm", *rc::gen::inRange<std::int64_t>(0, 2));
  RC_TAG(d.info->name, large ? "large" : "small");
  return d;
}

// Tie-heavy signals: components from {-1, -0.5, 0, 0.5, 1}, a zero vector one
// time in eight, the previous step's vector one time in eight.
struct SignalSource {
  std::mt19937 rng;
  std::vector<float> key, value, queries;
  SignalSource(std::uint32_t seed, const Drawn& d)
      : rng(seed),
        key(static_cast<std::size_t>(d.dim)),
        value(static_cast<std::size_t>(d.dim)),
        queries(static_cast<std::size_t>(d.groups * d.dim)) {}
  void fill(std::vector<float>& x) {
    const int kind = std::uniform_int_distribution<int>(0, 7)(rng);
    if (kind == 0) return std::fill(x.begin(), x.end(), 0.0F);
    if (kind == 1) return;  // repeat
    std::uniform_int_distribution<int> c(-2, 2);
    for (float& v : x) v = static_cast<float>(c(rng)) * 0.5F;
  }
  StepInputs next() {
    fill(key);
    fill(value);
    fill(queries);
    return StepInputs{.attention = std::nullopt, .key = key, .value = value, .queries = queries};
  }
};

RC_GTEST_PROP(KeyProperties, EveryKeyAwarePolicyKeepsItsPromises, ()) {
  const Drawn d = draw_policy();
  std::unique_ptr<Policy> policy = d.info->make(d.params);
  const std::size_t memory = policy->memory_bytes();
  SignalSource source(*rc::gen::arbitrary<std::uint32_t>(), d);
  const bool origin = *rc::gen::arbitrary<bool>();
  if (origin) policy->on_origin(source.next());
  std::vector<Position> held{0};
  std::vector<Position> victims;
  victims.reserve(static_cast<std::size_t>(d.budget) + 8);
  const int steps = static_cast<int>(d.budget) + *rc::gen::inRange(1, 60);
  std::mt19937 drops(static_cast<std::uint32_t>(steps));
  for (int t = 1; t <= steps; ++t) {
    const StepInputs in = source.next();  // drawn before counting
    // Sometimes several victims at once: the budget given to evict drops.
    const std::int64_t b = std::uniform_int_distribution<int>(0, 9)(drops) == 0
                               ? std::max<std::int64_t>(1, d.budget / 2)
                               : d.budget;
    std::size_t allocations = 0;
    bool evicted = false;
    {
      testing::CountAllocations counter;
      policy->on_step(t, in);
      if (std::ssize(held) + 1 > b) {
        const auto v = policy->evict(b);
        victims.assign(v.begin(), v.end());
        evicted = true;
      }
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
        RC_ASSERT(it != held.end() && *it == v);
        held.erase(it);
        RC_ASSERT(std::int64_t{v} >= d.sinks);  // sinks stay
        RC_ASSERT(origin || v != 0);            // the unobserved position 0 stays
      }
      const std::size_t protect = std::min<std::size_t>(static_cast<std::size_t>(d.recent), before.size());
      for (std::size_t i = before.size() - protect; i < before.size(); ++i) {
        RC_ASSERT(!std::binary_search(victims.begin(), victims.end(), before[i]));
      }
      // Down to the budget, unless only protected positions are left.
      if (std::ssize(held) > b) {
        const std::int64_t protected_count =
            std::min<std::int64_t>(d.recent, std::ssize(before)) + std::min<std::int64_t>(d.sinks, 1 + t) +
            (origin || d.sinks > 0 ? 0 : 1);
        RC_ASSERT(std::ssize(held) <= protected_count);
      }
    }
    RC_ASSERT(policy->kept_count() == held.size());
    if (std::ssize(held) > d.budget) break;
  }
}

RC_GTEST_PROP(KeyProperties, RefusedStepsChangeNothing, ()) {
  // A step that lacks a signal, gives one of the wrong length or a NaN is
  // refused before anything moves: the policy then decides exactly like a
  // twin that never saw it.
  const Drawn d = draw_policy();
  auto a = d.info->make(d.params);
  auto b = d.info->make(d.params);
  SignalSource source(*rc::gen::arbitrary<std::uint32_t>(), d);
  const StepInputs first = source.next();
  a->on_origin(first);
  b->on_origin(first);
  std::size_t held = 1;
  const int steps = static_cast<int>(d.budget) + *rc::gen::inRange(1, 40);
  for (int t = 1; t <= steps; ++t) {
    const StepInputs in = source.next();
    if (*rc::gen::inRange(0, 4) == 0) {
      StepInputs bad = in;
      std::vector<float> poisoned(in.key.begin(), in.key.end());
      switch (*rc::gen::inRange(0, 4)) {
        case 0: bad.key = {}; break;
        case 1: bad.key = in.key.first(in.key.size() - 1); break;
        case 2:
          poisoned[*rc::gen::inRange<std::size_t>(0, poisoned.size())] = std::numeric_limits<float>::quiet_NaN();
          bad.key = poisoned;
          break;
        default: bad.attention = std::span<const float>(poisoned); bad.key = {}; break;
      }
      RC_ASSERT_THROWS_AS(a->on_step(t, bad), ContractError);
      RC_ASSERT(a->kept_count() == b->kept_count());
    }
    a->on_step(t, in);
    b->on_step(t, in);
    ++held;
    if (std::cmp_greater(held, d.budget)) {
      const auto va = a->evict(d.budget);
      const std::vector<Position> victims_a(va.begin(), va.end());
      const auto vb = b->evict(d.budget);
      RC_ASSERT(victims_a == std::vector<Position>(vb.begin(), vb.end()));
      held -= victims_a.size();
      if (std::cmp_greater(held, d.budget)) break;
    }
  }
  RC_ASSERT(a->kept_count() == b->kept_count());
}

TEST(KeyProperties, CoverEveryKeyAwarePolicy) {
  // The suites above draw from the registry: knorm, keydiff and
  // expected-attention at least.
  std::vector<std::string> names;
  for (const PolicyInfo* info : key_aware_policies()) names.emplace_back(info->name);
  for (const char* name : {"knorm", "keydiff", "expected-attention"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

}  // namespace
}  // namespace kvevict
