// Expected Attention's kernels and its evictEvery parameter (issue 43)
// against independent references, on whichever SIMD target KVEVICT_SIMD
// selects (the suite runs once per target):
// - evictEvery = 1 against the implementation before the kernels
//   (tests/oracle/expected_attention_legacy.h, its scalar loops verbatim):
//   every score to the bit and every victim, over random runs at several
//   budgets, head sizes (odd, not a multiple of any lane count, up to 128),
//   groups, sinks, recent windows, query windows, RoPE settings and both
//   flags, with tie-heavy signals (a few binary fractions, repeated keys and
//   queries) and continuous ones;
// - evictEvery = k > 1 against a reference that keeps a map from position to
//   the logits the last fit gave it, fitting with the legacy loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/expected_attention.h"
#include "kvevict/core/registry.h"
#include "oracle/expected_attention_legacy.h"
#include "support.h"

namespace kvevict {
namespace {

using V = std::vector<float>;
using oracle::LegacyExpectedAttention;

StepInputs signals(const V& k, const V& v, const V& q) {
  return StepInputs{.attention = std::nullopt, .key = k, .value = v, .queries = q};
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The evictEvery reference: the legacy state for the held keys and the
// query window; a fit kept whole, and each position's logits under it.
struct EveryReference {
  ExpectedAttentionParams p;
  LegacyExpectedAttention held;
  bool fitted = false;
  std::int64_t since = 0;
  LegacyExpectedAttention::Fit fit;
  std::map<Position, std::vector<double>> logits;  // per head

  explicit EveryReference(const ExpectedAttentionParams& params) : p(params), held(params) {}

  // A scoring call: the scores of the held slots (+infinity where protected).
  std::vector<double> score_call() {
    if (!fitted || since >= p.evict_every) {
      fitted = true;
      since = 0;
      fit = held.fit();
      logits.clear();
    }
    ++since;
    const std::size_t kept = held.kept_count();
    const auto groups = static_cast<std::size_t>(p.groups);
    for (std::size_t i = 0; i < kept; ++i) {
      if (!held.scored(i) || logits.count(held.position(i)) != 0) continue;
      std::vector<double> z(groups);
      for (std::size_t h = 0; h < groups; ++h) z[h] = held.logit_under(fit, h, i);
      logits[held.position(i)] = z;
    }
    std::vector<double> score(kept, 0.0);
    for (std::size_t h = 0; h < groups; ++h) {
      double largest = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < kept; ++i) {
        if (held.scored(i)) largest = std::max(largest, logits[held.position(i)][h]);
      }
      std::vector<double> e(kept, 0.0);
      double sum = 0.0;
      for (std::size_t i = 0; i < kept; ++i) {
        if (!held.scored(i)) continue;
        e[i] = std::exp(logits[held.position(i)][h] - largest);
        sum += e[i];
      }
      for (std::size_t i = 0; i < kept; ++i) {
        if (held.scored(i)) score[i] += e[i] / sum;
      }
    }
    const std::size_t recent = std::min(static_cast<std::size_t>(p.recent_window), kept);
    for (std::size_t i = 0; i < kept; ++i) {
      score[i] /= static_cast<double>(groups);
      if (p.value_norm != 0) score[i] *= held.value_norm(i);
      if (!held.scored(i) || i >= kept - recent) score[i] = std::numeric_limits<double>::infinity();
    }
    return score;
  }

  std::vector<Position> evict(std::int64_t budget) {
    const std::size_t kept = held.kept_count();
    if (kept <= static_cast<std::size_t>(budget)) return {};
    std::vector<double> s = score_call();
    std::vector<Position> out;
    for (std::size_t m = 0; m < kept - static_cast<std::size_t>(budget); ++m) {
      std::size_t best = kept;
      for (std::size_t i = 0; i < kept; ++i) {
        if (std::isinf(s[i])) continue;
        if (best == kept || s[i] < s[best]) best = i;
      }
      if (best == kept) break;
      out.push_back(held.position(best));
      s[best] = std::numeric_limits<double>::infinity();
    }
    std::sort(out.begin(), out.end());
    held.drop(out);
    return out;
  }
};

struct Draw {
  std::mt19937 rng;
  bool ties;
  int palette;
  V last_key, last_query;
  V vec(std::size_t n) {
    V x(n);
    if (ties) {
      std::uniform_int_distribution<int> component(-palette, palette);
      for (float& c : x) c = static_cast<float>(component(rng)) * 0.5F;
    } else {
      std::normal_distribution<float> normal(0.0F, 1.5F);
      for (float& c : x) c = normal(rng);
    }
    return x;
  }
  // Keys and queries repeat now and then (equal logits, equal weights).
  V key(std::size_t n) {
    if (!last_key.empty() && std::uniform_int_distribution<int>(0, 4)(rng) == 0) return last_key;
    return last_key = vec(n);
  }
  V query(std::size_t n) {
    if (!last_query.empty() && std::uniform_int_distribution<int>(0, 3)(rng) == 0) return last_query;
    return last_query = vec(n);
  }
};

ExpectedAttentionParams random_params(std::mt19937& rng, std::int64_t evict_every) {
  const auto pick = [&](std::initializer_list<std::int64_t> xs) {
    std::vector<std::int64_t> v(xs);
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
  };
  ExpectedAttentionParams p;
  p.rope_base = pick({0, 2, 10000});
  p.head_dim = p.rope_base == 0 ? pick({1, 3, 5, 8, 17, 64}) : pick({2, 6, 8, 10, 34, 64, 128});
  p.budget = p.head_dim >= 64 ? pick({3, 40, 100}) : pick({1, 2, 3, 7, 16, 64, 300});
  p.groups = p.head_dim >= 64 ? pick({1, 2}) : pick({1, 2, 3});
  p.sinks = std::min<std::int64_t>(pick({0, 1, 4}), p.budget - 1);
  p.recent_window = std::min<std::int64_t>(pick({0, 1, 5}), p.budget - 1 - p.sinks);
  p.query_window = pick({1, 3, 16, 128});
  p.future_positions = pick({1, 2, 17, 512});
  p.covariance = pick({0, 1, 1});
  p.value_norm = pick({0, 1});
  p.evict_every = evict_every;
  return p;
}

std::string describe(const ExpectedAttentionParams& p) {
  return "budget " + std::to_string(p.budget) + " headDim " + std::to_string(p.head_dim) + " groups " +
         std::to_string(p.groups) + " sinks " + std::to_string(p.sinks) + " recent " +
         std::to_string(p.recent_window) + " queryWindow " + std::to_string(p.query_window) + " future " +
         std::to_string(p.future_positions) + " rope " + std::to_string(p.rope_base) + " cov " +
         std::to_string(p.covariance) + " vnorm " + std::to_string(p.value_norm) + " every " +
         std::to_string(p.evict_every);
}

TEST(ExpectedAttentionDifferential, AtEvictEveryOneScoresAndVictimsAreTheLegacyOnesToTheBit) {
  std::mt19937 rng(20260043);
  for (int run = 0; run < 160; ++run) {
    const ExpectedAttentionParams p = random_params(rng, 1);
    SCOPED_TRACE(describe(p) + " run " + std::to_string(run));
    ExpectedAttention fast(p);
    LegacyExpectedAttention legacy(p);
    Draw draw{std::mt19937(rng()), run % 2 == 0, 1 + run % 3, {}, {}};
    const auto d = static_cast<std::size_t>(p.head_dim);
    const auto w = static_cast<std::size_t>(p.groups * p.head_dim);
    if (run % 3 != 0) {
      const V k = draw.key(d), v = draw.vec(d), q = draw.query(w);
      fast.on_origin(signals(k, v, q));
      legacy.on_origin(signals(k, v, q));
    }
    const std::int64_t steps = p.budget + std::min<std::int64_t>(60, 20 + p.budget / 2);
    for (std::int64_t t = 1; t <= steps; ++t) {
      const V k = draw.key(d), v = draw.vec(d), q = draw.query(w);
      fast.on_step(t, signals(k, v, q));
      legacy.on_step(t, signals(k, v, q));
      if (t % 7 == 0) {
        const std::vector<double> want = legacy.scores();
        std::vector<Position> at(fast.kept_count());
        std::vector<double> got(fast.kept_count());
        ASSERT_EQ(fast.scores(at, got), want.size());
        for (std::size_t i = 0; i < want.size(); ++i) {
          ASSERT_TRUE(same_bits(got[i], want[i])) << "step " << t << " slot " << i << ": " << got[i] << " vs "
                                                  << want[i];
        }
      }
      const std::int64_t b = t % 11 == 0 ? std::max<std::int64_t>(p.sinks + p.recent_window + 1, p.budget - 3)
                                         : p.budget;
      const auto got = fast.evict(b);
      ASSERT_EQ(std::vector<Position>(got.begin(), got.end()), legacy.evict(b)) << "step " << t;
      ASSERT_EQ(fast.kept_count(), legacy.kept_count());
    }
  }
}

TEST(ExpectedAttentionDifferential, EvictEveryKScoresKeysBetweenRefitsByTheLastFit) {
  std::mt19937 rng(43);
  for (int run = 0; run < 120; ++run) {
    const std::int64_t every = std::vector<std::int64_t>{2, 3, 8}[static_cast<std::size_t>(run % 3)];
    const ExpectedAttentionParams p = random_params(rng, every);
    SCOPED_TRACE(describe(p) + " run " + std::to_string(run));
    ExpectedAttention fast(p);
    EveryReference plain(p);
    Draw draw{std::mt19937(rng()), run % 2 == 1, 1 + run % 3, {}, {}};
    const auto d = static_cast<std::size_t>(p.head_dim);
    const auto w = static_cast<std::size_t>(p.groups * p.head_dim);
    if (run % 4 == 1) {  // a scoring call before position 0 is observed
      std::vector<Position> at(1);
      std::vector<double> got(1);
      fast.scores(at, got);
      plain.score_call();
    }
    if (run % 3 != 0) {
      const V k = draw.key(d), v = draw.vec(d), q = draw.query(w);
      fast.on_origin(signals(k, v, q));
      plain.held.on_origin(signals(k, v, q));
    }
    const std::int64_t steps = p.budget + std::min<std::int64_t>(60, 20 + p.budget / 2);
    for (std::int64_t t = 1; t <= steps; ++t) {
      const V k = draw.key(d), v = draw.vec(d), q = draw.query(w);
      fast.on_step(t, signals(k, v, q));
      plain.held.on_step(t, signals(k, v, q));
      if (t % 5 == 0) {
        // score_of reports what the next call uses, and changes nothing.
        const std::int64_t pos = static_cast<std::int64_t>(plain.held.position(fast.kept_count() - 1));
        const double next = fast.score_of(pos);
        const std::vector<double> want = plain.score_call();
        std::vector<Position> at(fast.kept_count());
        std::vector<double> got(fast.kept_count());
        ASSERT_EQ(fast.scores(at, got), want.size());
        for (std::size_t i = 0; i < want.size(); ++i) {
          ASSERT_TRUE(same_bits(got[i], want[i])) << "step " << t << " slot " << i << ": " << got[i] << " vs "
                                                  << want[i];
        }
        if (plain.held.scored(want.size() - 1) && p.recent_window == 0) {
          // the newest is unprotected: its score is the one the call used
          EXPECT_TRUE(same_bits(next, want.back())) << "step " << t;
        }
        // A removal through the score interface (a block or layer evictor's path).
        if (t % 10 == 0) {
          std::size_t lowest = want.size();
          for (std::size_t i = 0; i < want.size(); ++i) {
            if (!std::isinf(want[i]) && (lowest == want.size() || want[i] < want[lowest])) lowest = i;
          }
          if (lowest < want.size()) {
            fast.remove(std::vector<Position>{at[lowest]});
            plain.held.drop({at[lowest]});
          }
        }
      }
      const std::int64_t b = t % 11 == 0 ? std::max<std::int64_t>(p.sinks + p.recent_window + 1, p.budget - 3)
                                         : p.budget;
      const auto got = fast.evict(b);
      ASSERT_EQ(std::vector<Position>(got.begin(), got.end()), plain.evict(b)) << "step " << t;
      ASSERT_EQ(fast.kept_count(), plain.held.kept_count());
    }
  }
}

TEST(ExpectedAttentionDifferential, EvictEveryIsAParameter) {
  testing::expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 4, .evict_every = 0}); },
                                        "ExpectedAttention: evictEvery (0) must be at least 1");
  testing::expect_error<ParameterError>(
      [] { ExpectedAttention({.budget = 8, .head_dim = 4, .evict_every = 65537}); },
      "ExpectedAttention: evictEvery (65537) must be at most 65536");
  const auto policy = make_policy("expected-attention", {{"budget", 8}, {"headDim", 4}, {"evictEvery", 8}});
  EXPECT_EQ(static_cast<const ExpectedAttention&>(*policy).params().evict_every, 8);
  EXPECT_EQ(ExpectedAttention().params().evict_every, 1);
  // evictEvery > 1 keeps each slot's logits per head (8 x groups + a flag)
  // and every head's fit (8 x groups x (headDim + headDim^2)).
  const ExpectedAttention one({.budget = 63, .head_dim = 8, .groups = 2, .query_window = 16});
  const ExpectedAttention four({.budget = 63, .head_dim = 8, .groups = 2, .query_window = 16, .evict_every = 4});
  EXPECT_EQ(four.memory_bytes() - one.memory_bytes(), 64U * 17U + 8U * 2U * (8U + 64U));
}

// At evictEvery = k the Gaussian is refitted at the 1st, (k+1)th, ...
// scoring call: between refits a new key's logits come from the old fit, so
// moving the queries changes nothing until the refit.
TEST(ExpectedAttentionDifferential, TheFitIsRefreshedEveryKthScoringCall) {
  ExpectedAttention p({.budget = 3, .head_dim = 2, .sinks = 0, .query_window = 1, .rope_base = 0, .covariance = 0,
                       .value_norm = 0, .evict_every = 2});
  // Query (1, 0): logit k[0] / sqrt 2. Keys k[0] = 1, 2, 3 at positions 1-3.
  const V v{1.0F, 0.0F};
  p.on_origin(signals(V{0.0F, 0.0F}, v, V{1.0F, 0.0F}));
  p.on_step(1, signals(V{1.0F, 0.0F}, v, V{1.0F, 0.0F}));
  p.on_step(2, signals(V{2.0F, 0.0F}, v, V{1.0F, 0.0F}));
  p.on_step(3, signals(V{3.0F, 0.0F}, v, V{1.0F, 0.0F}));
  const auto victims = [](std::span<const Position> s) { return std::vector<Position>(s.begin(), s.end()); };
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{0}));  // call 1: a fit; position 0's key (0, 0) is lowest
  // The query turns to (-1, 0): a fresh fit would evict the largest k[0];
  // call 2 still scores with the first fit (the new key k[0] = -5 is lowest).
  p.on_step(4, signals(V{-5.0F, 0.0F}, v, V{-1.0F, 0.0F}));
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{4}));
  // Call 3 refits: the query (-1, 0) now, so the largest k[0] (3) goes.
  p.on_step(5, signals(V{0.0F, 0.0F}, v, V{-1.0F, 0.0F}));
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{3}));
}

}  // namespace
}  // namespace kvevict
