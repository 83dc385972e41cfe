// Differential tests: every policy against the oracle (tests/oracle/oracle.h),
// thousands of random attention sequences, budgets and parameters. Any fast
// path must choose identical victims, keep identical state, and give
// identical metrics.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "generators.h"
#include "kvevict/harness.h"
#include "kvevict/registry.h"
#include "oracle/oracle.h"

namespace kvevict {
namespace {

// The introspection query that reads the oracle's per-position score.
const char* score_query(const std::string& policy) {
  if (policy == "scissorhands") return "votesOf";
  if (policy == "h2o") return "scoreOf";
  if (policy == "tova") return "lastAttentionOf";
  return nullptr;
}

RC_GTEST_PROP(Differential, EveryPolicyChoosesTheOraclesVictims, ()) {
  const auto all = policies();
  std::vector<std::size_t> indices(all.size());
  for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = i;
  const PolicyInfo& info = *all[*rc::gen::noShrink(rc::gen::elementOf(indices))];
  const ParamMap params = random_params(info);
  const std::int64_t budget = param_or(params, "budget", 512);
  RC_TAG(info.name);
  auto fast = info.make(params);
  oracle::Oracle plain(info.name, params);
  const QueryInfo* query = score_query(info.name) ? info.find_query(score_query(info.name)) : nullptr;

  std::vector<Position> held{0};
  const auto steps = *rc::gen::inRange(1, 200);
  for (int t = 1; t <= steps; ++t) {
    const bool present = *rc::gen::inRange(0, 8) != 0;
    std::vector<float> w;
    if (present) {
      std::size_t len = held.size();
      const int shape = *rc::gen::inRange(0, 12);
      if (shape == 0) len = *rc::gen::inRange<std::size_t>(0, held.size() + 1);
      if (shape == 1) len += *rc::gen::inRange<std::size_t>(1, 3);
      for (std::size_t i = 0; i < len; ++i) w.push_back(random_weight());
    }
    const Attention attn = present ? Attention(std::span<const float>(w)) : std::nullopt;
    fast->on_decode_step(t, attn);
    plain.on_decode_step(t, attn);
    held.push_back(static_cast<Position>(t));
    if (query != nullptr) {
      for (const Position p : held) {
        const std::int64_t arg = p;
        const double got = query->call(*fast, std::span<const std::int64_t>(&arg, 1));
        const double want = info.name == "tova" && got == -1.0 ? -1.0 : plain.score_of(p);
        RC_ASSERT(got == want);
      }
    }
    if (std::ssize(held) > budget || info.name == "pyramidkv") {
      const auto a = fast->evict(budget);
      const std::vector<Position> got(a.begin(), a.end());
      const auto b = plain.evict(budget);
      const std::vector<Position> want(b.begin(), b.end());
      RC_ASSERT(got == want);
      for (const Position v : got) std::erase(held, v);
      RC_ASSERT(fast->kept_count() == plain.kept_count());
      if (std::ssize(held) > budget) break;  // TOVA with nothing observed
    }
  }
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
