// Differential tests: every policy against the oracle (tests/oracle/oracle.h),
// thousands of random attention sequences, budgets and parameters. Any fast
// path must choose identical victims, keep identical state, and give
// identical metrics.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "generators.h"
#include "kvevict/eval/harness.h"
#include "kvevict/core/registry.h"
#include "oracle/oracle.h"
#include "support.h"

namespace kvevict {
namespace {

// The introspection query that reads each held position's score.
const char* score_query(const std::string& policy) {
  if (policy == "scissorhands") return "votesOf";
  if (policy == "h2o") return "scoreOf";
  if (policy == "tova") return "lastAttentionOf";
  if (policy == "snapkv" || policy == "pyramidkv") return "windowScoreOf";
  return nullptr;
}

// Runs the policy and the oracle side by side for `steps` decode steps (absent,
// short and long attention among them), evicting to `budget` whenever more is
// held: the same victims, kept counts and introspected scores at every step.
void check_against_oracle(const PolicyInfo& info, const ParamMap& params, std::int64_t budget, int steps,
                          WeightSource& weights) {
  auto fast = info.make(params);
  oracle::Oracle plain(info.name, params);
  const char* query_name = score_query(info.name);
  const QueryInfo* query = query_name != nullptr ? info.find_query(query_name) : nullptr;
  const auto ask = [&](Position p) {
    const std::int64_t arg = p;
    return query->call(*fast, std::span<const std::int64_t>(&arg, 1));
  };

  std::vector<Position> held{0};
  // Buffers kept across steps: allocations are what the sanitizer build pays for.
  std::vector<float> w;
  std::vector<std::pair<Position, double>> scores;
  std::vector<Position> got;
  std::vector<Position> want;
  for (int t = 1; t <= steps; ++t) {
    const bool present = weights.pick(8) != 0;
    w.clear();
    if (present) {
      std::size_t len = held.size();
      const auto shape = weights.pick(12);
      if (shape == 0) len = weights.pick(static_cast<std::uint32_t>(held.size() + 1));
      if (shape == 1) len += 1 + weights.pick(2);
      weights.begin_step(len);
      for (std::size_t i = 0; i < len; ++i) {
        w.push_back(weights.next(i < held.size() ? std::int64_t{held[i]} : t + std::ssize(w) + 1));
      }
    }
    const Attention attn = present ? Attention(std::span<const float>(w)) : std::nullopt;
    fast->on_decode_step(t, attn);
    plain.on_decode_step(t, attn);
    held.push_back(static_cast<Position>(t));
    if (query != nullptr) {
      // Every held position's score, -1 included (TOVA's never-observed), as
      // the oracle defines it.
      // (Asserted where they differ: an RC_ASSERT per position costs more than
      // the check, in the sanitizer build.)
      plain.query_all(query_name, scores);
      RC_ASSERT(scores.size() == held.size());
      for (std::size_t i = 0; i < scores.size(); ++i) {
        if (scores[i].first != held[i] || ask(held[i]) != scores[i].second) {
          RC_ASSERT(scores[i].first == held[i]);
          RC_ASSERT(ask(held[i]) == scores[i].second);
        }
      }
    }
    if (std::ssize(held) > budget || info.name == "pyramidkv") {
      const auto a = fast->evict(budget);
      got.assign(a.begin(), a.end());
      const auto b = plain.evict(budget);
      want.assign(b.begin(), b.end());
      RC_ASSERT(got == want);
      for (const Position v : got) std::erase(held, v);
      RC_ASSERT(fast->kept_count() == plain.kept_count());
      if (query != nullptr) {
        for (const Position v : got) RC_ASSERT(ask(v) == plain.query(query_name, v));  // -1: not held
      }
      if (std::ssize(held) > budget) break;  // TOVA with nothing observed
    }
  }
}

RC_GTEST_PROP(Differential, EveryPolicyChoosesTheOraclesVictims, ()) {
  const auto all = testing::attention_policies();
  std::vector<std::size_t> indices(all.size());
  for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = i;
  const PolicyInfo& info = *all[*rc::gen::noShrink(rc::gen::elementOf(indices))];
  const std::int64_t budget = random_budget();
  const ParamMap params = random_params(info, budget);
  RC_TAG(info.name, budget >= kLargeBudget ? "large" : "small");
  WeightSource weights = WeightSource::draw(budget >= kLargeBudget);
  check_against_oracle(info, params, budget, random_steps(budget, 200), weights);
}

RC_GTEST_PROP(Differential, TheBlockSearchesChooseTheOraclesVictims, ()) {
  // H2O and Scissorhands in the steady state their fast paths are for: a large
  // budget, one victim a step (dropAmount 1, every vote counted), a recent
  // window (so a full vector covers the searched range and the decode step's
  // pass leaves a hint naming the first 64-slot block with the minimum), and
  // the tie-heavy weights, or a per-position profile that puts the lowest
  // score anywhere in the range -- first of a block, alone in it, or tied
  // across blocks. Absent and short steps take the full first-minimum search.
  const std::string policy = *rc::gen::element<std::string>("h2o", "scissorhands");
  const PolicyInfo& info = find_policy(policy);
  const std::int64_t budget = uniform<std::int64_t>(kLargeBudget, 301);
  const std::int64_t recent = uniform<std::int64_t>(1, 41);
  // normalize=1 half the time: its ranks are searched without the hint.
  ParamMap params{{"budget", budget},
                  {"recentWindow", recent},
                  {"sinks", uniform<std::int64_t>(0, 9)},
                  {"normalize", uniform<std::int64_t>(0, 2)}};
  if (policy == "scissorhands") {
    params.emplace_back("historyWindow", 0);
    params.emplace_back("dropAmount", 1);
  }
  using Mix = WeightSource::Mix;
  const Mix mix = *rc::gen::element(Mix::kSparse, Mix::kProfile, Mix::kProfile, Mix::kSixteenths, Mix::kFlat);
  RC_TAG(policy, static_cast<int>(mix));
  WeightSource weights = WeightSource::draw(true, mix);
  check_against_oracle(info, params, budget, static_cast<int>(budget) + uniform(0, 150), weights);
}

TEST(Differential, CanonicalMetricsMatchTheOracleExactly) {
  // A few whole-trace runs: the harness totals must agree to the bit.
  const std::vector<std::pair<std::string, ParamMap>> configs{
      {"scissorhands", {{"budget", 256}}},
      {"h2o", {{"budget", 512}}},
      {"tova", {{"budget", 256}}},
      {"snapkv", {{"budget", 256}}},
      {"pyramidkv", {{"budget", 512}, {"layer", 3}, {"numLayers", 4}}},
      {"streaming-llm", {{"budget", 256}}},
      {"scissorhands", {{"budget", 256}, {"historyWindow", 64}, {"dropAmount", 4}, {"sinks", 4}}},
      {"h2o", {{"budget", 256}, {"normalize", 1}}},
      {"scissorhands", {{"budget", 512}, {"normalize", 1}, {"dropAmount", 3}}},
  };
  for (const auto& [name, params] : configs) {
    auto fast = make_policy(name, params);
    oracle::Oracle plain(name, params);
    const std::int64_t budget = oracle::param(params, "budget", 512);
    DecodeTrace trace;
    const RunTotals a = run(*fast, trace, budget);
    const RunTotals b = run(plain, trace, budget);
    EXPECT_EQ(a.total_retained_mass, b.total_retained_mass) << name;
    EXPECT_EQ(a.total_heavy_hits, b.total_heavy_hits) << name;
    EXPECT_EQ(a.eviction_calls, b.eviction_calls) << name;
    EXPECT_EQ(a.evicted, b.evicted) << name;
  }
}

}  // namespace
}  // namespace kvevict
