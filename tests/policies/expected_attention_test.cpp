// Expected Attention (docs/policies/expected-attention.md): its rules and
// messages, refused steps that change nothing, no allocation on the step or
// eviction path, the averaged RoPE rotation against an explicit mean of
// rotations, the score interface, the block and layer evictors over it,
// prompt scoring, and a differential suite against a plain reference that
// keeps lists and whole matrices.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "alloc_counter.h"
#include "kvevict/core/block_evictor.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/policies/expected_attention.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::expect_error;
using V = std::vector<float>;
std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }
StepInputs signals(const V& k, const V& v, const V& q) {
  return StepInputs{.attention = std::nullopt, .key = k, .value = v, .queries = q};
}

TEST(ExpectedAttention, RulesAreCheckedAtConstruction) {
  const std::string t = "ExpectedAttention: ";
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 0}); }, t + "budget (0) must be at least 1");
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 0}); },
                               t + "headDim (0) must be at least 1");
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 3}); },
                               t + "headDim (3) must be even when ropeBase > 0 (RoPE rotates pairs of dimensions)");
  ExpectedAttention odd({.budget = 8, .head_dim = 3, .rope_base = 0});  // no RoPE: any size
  EXPECT_EQ(odd.kept_count(), 1U);
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 4, .groups = 0}); },
                               t + "groups (0) must be at least 1");
  expect_error<ParameterError>(
      [] { ExpectedAttention({.budget = 8, .head_dim = 4, .sinks = 4, .recent_window = 4}); },
      t + "sinks (4) plus recentWindow (4) must be smaller than budget (8): there would be nothing for the "
          "scores to choose between");
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 4, .query_window = 0}); },
                               t + "queryWindow (0) must be at least 1");
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 4, .future_positions = 0}); },
                               t + "futurePositions (0) must be at least 1");
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 4, .rope_base = 1}); },
                               t + "ropeBase (1) must be 0 (no RoPE) or at least 2");
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 4, .covariance = 2}); },
                               t + "covariance (2) must be 0 or 1");
  expect_error<ParameterError>([] { ExpectedAttention({.budget = 8, .head_dim = 4, .value_norm = -1}); },
                               t + "valueNorm (-1) must be 0 or 1");
  expect_error<ParameterError>(
      [] { ExpectedAttention({.budget = 1 << 20, .head_dim = 1024}); },
      t + "budget (1048576) x headDim (1024) keys would take more than 1 GiB");
  expect_error<ParameterError>([] { make_policy("expected-attention", {{"window", 1}}); },
                               t + "unknown parameter 'window' (known: budget, headDim, groups, sinks, recentWindow, "
                                   "queryWindow, futurePositions, ropeBase, covariance, valueNorm, evictEvery)");
  // (63 + 1) slots x (30 + 4 x 8) + ring 4 x 16 x 2 x 8 + statistics and
  // rotation 8 x (64 + 64) + a tile of 16 keys 8 x 16 x 8
  EXPECT_EQ(ExpectedAttention({.budget = 63, .head_dim = 8, .groups = 2, .query_window = 16}).memory_bytes(),
            64U * 62U + 1024U + 1024U + 1024U);
  EXPECT_EQ(find_policy("expected-attention").signals, Signals{kSignalKey | kSignalValue | kSignalQueries});
}

TEST(ExpectedAttention, AStepWithoutItsSignalsIsRefusedAndChangesNothing) {
  ExpectedAttention p({.budget = 2, .head_dim = 2, .groups = 2, .sinks = 0, .rope_base = 0});
  const V k{1.0F, 0.0F}, v{1.0F, 1.0F}, q{1.0F, 0.0F, 0.0F, 1.0F};
  const std::string t = "ExpectedAttention: ";
  expect_error<ContractError>([&] { p.on_decode_step(1, V{1.0F}); },
                              t + "reads the new token's key, value, queries, not attention weights: give each step "
                                  "with on_step (the key as the cache stores it)");
  expect_error<ContractError>([&] { p.on_step(1, signals(k, v, {})); },
                              t + "the step gives no queries (ExpectedAttention reads the new token's queries: groups "
                                  "x headDim = 2 x 2 floats)");
  expect_error<ContractError>([&] { p.on_step(1, signals(k, {}, q)); },
                              t + "the step gives no value (ExpectedAttention reads the new token's value: headDim = "
                                  "2 floats)");
  expect_error<ContractError>([&] { p.on_step(1, signals(k, v, V{1.0F, 2.0F})); },
                              t + "the step's queries has 2 floats; groups x headDim = 2 x 2");
  expect_error<ContractError>([&] { p.on_step(1, signals(k, V{1.0F, std::nanf("")}, q)); },
                              t + "value component 1 is NaN; it must be finite");
  EXPECT_EQ(p.kept_count(), 1U);
  EXPECT_EQ(p.modelled_queries(), 0);
  p.on_origin(signals(k, v, q));
  p.on_step(1, signals(k, v, q));
  expect_error<ContractError>([&] { p.on_origin(signals(k, v, q)); },
                              t + "on_origin gives position 0's signals once, before the first step; a step has "
                                  "already run");
  expect_error<ContractError>([&] { p.on_step(1, signals(k, v, q)); },
                              t + "position 1 must be greater than every position held (the newest is 1)");
  EXPECT_EQ(p.kept_count(), 2U);
  EXPECT_EQ(p.modelled_queries(), 2);
}

TEST(ExpectedAttention, StepsAndEvictionsAllocateNothing) {
  ExpectedAttention p({.budget = 64, .head_dim = 16, .groups = 2, .query_window = 32});
  V key(16), value(16), queries(32);
  const auto fill = [](V& x, std::int64_t t, int salt) {
    for (std::size_t c = 0; c < x.size(); ++c) {
      x[c] = static_cast<float>((t * 7 + static_cast<std::int64_t>(c) * 3 + salt) % 11) - 5.0F;
    }
  };
  p.on_origin(signals(key, value, queries));
  testing::CountAllocations count;
  for (std::int64_t t = 1; t < 400; ++t) {
    fill(key, t, 0);
    fill(value, t, 1);
    fill(queries, t, 2);
    p.on_step(t, signals(key, value, queries));
    if (p.kept_count() > 64) p.evict(64);
  }
  EXPECT_EQ(count.count(), 0U);
  EXPECT_EQ(p.kept_count(), 64U);
}

// The averaged rotation is computed in closed form; here it is the plain mean
// of F rotations, applied to the mean query and dotted with a key.
TEST(ExpectedAttention, TheAveragedRotationIsTheMeanOfTheNextRotations) {
  for (const std::int64_t dim : {2, 4, 8}) {
    for (const std::int64_t future : {1, 2, 7, 512}) {
      for (const std::int64_t base : {2, 100, 10000}) {
        ExpectedAttention p({.budget = 16, .head_dim = dim, .sinks = 0, .future_positions = future,
                             .rope_base = base, .covariance = 0});
        V q(static_cast<std::size_t>(dim)), k(static_cast<std::size_t>(dim)), v(static_cast<std::size_t>(dim), 1.0F);
        for (std::size_t c = 0; c < q.size(); ++c) {
          q[c] = static_cast<float>(c + 1) * 0.5F;
          k[c] = static_cast<float>(c % 3) - 1.0F;
        }
        p.on_origin(signals(k, v, q));
        for (std::int64_t t = 1; t <= 5; ++t) p.on_step(t, signals(k, v, q));
        // Next position 6; every query equal, so the mean is q.
        const auto half = static_cast<std::size_t>(dim / 2);
        std::vector<double> turned(static_cast<std::size_t>(dim), 0.0);
        for (std::int64_t t = 6; t < 6 + future; ++t) {
          for (std::size_t i = 0; i < half; ++i) {
            const double theta = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(dim));
            const double c = std::cos(theta * static_cast<double>(t));
            const double s = std::sin(theta * static_cast<double>(t));
            turned[i] += (c * q[i] - s * q[i + half]) / static_cast<double>(future);
            turned[i + half] += (s * q[i] + c * q[i + half]) / static_cast<double>(future);
          }
        }
        double dot = 0.0;
        for (std::size_t c = 0; c < k.size(); ++c) dot += turned[c] * k[c];
        const double want = dot / std::sqrt(static_cast<double>(dim));
        EXPECT_NEAR(p.logit_of(3, 0), want, 1e-9 * std::max(1.0, std::fabs(want)))
            << "dim " << dim << " future " << future << " base " << base;
      }
    }
  }
}

// The plain reference: lists of held positions, keys and value norms, every
// query ever given, and the score recomputed from the definition with whole
// matrices at each eviction, one victim at a time by the rules.
struct Reference {
  ExpectedAttentionParams p;
  std::vector<Position> pos{0};
  std::vector<V> keys{V{}};  // empty: unobserved
  std::vector<double> vnorm{0.0};
  std::vector<V> queries;  // of positions >= sinks, oldest first

  void admit(Position at, const V& k, const V& v, const V& q) {
    double sq = 0.0;
    for (float x : v) sq += double{x} * x;
    if (at == 0) {
      keys[0] = k;
      vnorm[0] = std::sqrt(sq);
    } else {
      pos.push_back(at);
      keys.push_back(k);
      vnorm.push_back(std::sqrt(sq));
    }
    if (std::int64_t{at} >= p.sinks) queries.push_back(q);
  }
  bool scored(std::size_t i) const { return !keys[i].empty() && std::int64_t{pos[i]} >= p.sinks; }

  std::vector<double> score() const {
    const auto d = static_cast<std::size_t>(p.head_dim);
    const std::size_t kept = pos.size();
    // R: the mean rotation, as a whole matrix.
    std::vector<std::vector<double>> r(d, std::vector<double>(d, 0.0));
    for (std::size_t i = 0; i < d; ++i) r[i][i] = 1.0;
    if (p.rope_base != 0) {
      const double next = static_cast<double>(pos.back()) + 1.0;
      const auto f = static_cast<double>(p.future_positions);
      for (std::size_t i = 0; i < d / 2; ++i) {
        const double theta = std::pow(static_cast<double>(p.rope_base), -static_cast<double>(i) * 2.0 / static_cast<double>(d));
        const double ratio = std::sin(f * theta / 2.0) / (f * std::sin(theta / 2.0));
        const double turn = theta * (next + (f - 1.0) / 2.0);
        r[i][i] = r[i + d / 2][i + d / 2] = ratio * std::cos(turn);
        r[i][i + d / 2] = -(ratio * std::sin(turn));
        r[i + d / 2][i] = ratio * std::sin(turn);
      }
    }
    const std::size_t first = queries.size() - std::min(queries.size(), static_cast<std::size_t>(p.query_window));
    const std::size_t n = queries.size() - first;
    std::vector<double> total(kept, 0.0);
    for (std::size_t h = 0; h < static_cast<std::size_t>(p.groups); ++h) {
      std::vector<double> mu(d, 0.0);
      std::vector<std::vector<double>> cov(d, std::vector<double>(d, 0.0));
      if (n > 0) {
        for (std::size_t j = first; j < queries.size(); ++j) {
          for (std::size_t c = 0; c < d; ++c) mu[c] += double{queries[j][h * d + c]};
        }
        for (double& m : mu) m /= static_cast<double>(n);
        if (p.covariance != 0) {
          for (std::size_t j = first; j < queries.size(); ++j) {
            for (std::size_t a = 0; a < d; ++a) {
              for (std::size_t b = a; b < d; ++b) {
                cov[a][b] += (double{queries[j][h * d + a]} - mu[a]) * (double{queries[j][h * d + b]} - mu[b]);
              }
            }
          }
          for (std::size_t a = 0; a < d; ++a) {
            for (std::size_t b = a; b < d; ++b) cov[b][a] = cov[a][b] /= static_cast<double>(n);
          }
        }
      }
      std::vector<double> mr(d, 0.0);
      for (std::size_t i = 0; i < d; ++i) {
        for (std::size_t j = 0; j < d; ++j) mr[i] += r[i][j] * mu[j];
      }
      std::vector<std::vector<double>> t(d, std::vector<double>(d, 0.0)), cr = t;
      for (std::size_t i = 0; i < d; ++i) {
        for (std::size_t b = 0; b < d; ++b) {
          for (std::size_t j = 0; j < d; ++j) t[i][b] += r[i][j] * cov[j][b];
        }
      }
      for (std::size_t a = 0; a < d; ++a) {
        for (std::size_t i = 0; i < d; ++i) {
          for (std::size_t j = 0; j < d; ++j) cr[a][i] += t[a][j] * r[i][j];
        }
      }
      std::vector<double> z(kept, 0.0);
      double largest = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < kept; ++i) {
        if (!scored(i)) continue;
        double dot = 0.0;
        for (std::size_t c = 0; c < d; ++c) dot += mr[c] * double{keys[i][c]};
        z[i] = dot / std::sqrt(static_cast<double>(d));
        if (p.covariance != 0) {
          double quad = 0.0;
          for (std::size_t a = 0; a < d; ++a) {
            double row = 0.0;
            for (std::size_t b = 0; b < d; ++b) row += cr[a][b] * double{keys[i][b]};
            quad += double{keys[i][a]} * row;
          }
          z[i] += quad / static_cast<double>(d) / 2.0;
        }
        largest = std::max(largest, z[i]);
      }
      double sum = 0.0;
      for (std::size_t i = 0; i < kept; ++i) {
        if (scored(i)) sum += std::exp(z[i] - largest);
      }
      for (std::size_t i = 0; i < kept; ++i) {
        if (scored(i)) total[i] += std::exp(z[i] - largest) / sum;
      }
    }
    for (std::size_t i = 0; i < kept; ++i) {
      total[i] /= static_cast<double>(p.groups);
      if (p.value_norm != 0) total[i] *= vnorm[i];
    }
    return total;
  }

  std::vector<Position> evict(std::int64_t budget) {
    const std::size_t kept = pos.size();
    if (kept <= static_cast<std::size_t>(budget)) return {};
    const std::vector<double> s = score();
    std::vector<bool> gone(kept, false);
    const std::size_t first_recent = kept - std::min<std::size_t>(static_cast<std::size_t>(p.recent_window), kept);
    for (std::size_t m = 0; m < kept - static_cast<std::size_t>(budget); ++m) {
      std::size_t best = kept;
      for (std::size_t i = 0; i < kept; ++i) {
        if (gone[i] || !scored(i) || i >= first_recent) continue;
        if (best == kept || s[i] < s[best]) best = i;
      }
      if (best == kept) break;
      gone[best] = true;
    }
    std::vector<Position> out, kp;
    std::vector<V> kk;
    std::vector<double> vv;
    for (std::size_t i = 0; i < kept; ++i) {
      if (gone[i]) {
        out.push_back(pos[i]);
      } else {
        kp.push_back(pos[i]);
        kk.push_back(keys[i]);
        vv.push_back(vnorm[i]);
      }
    }
    pos = kp;
    keys = kk;
    vnorm = vv;
    return out;
  }
};

RC_GTEST_PROP(ExpectedAttention, ThePolicyAndThePlainReferenceChooseTheSameVictims, ()) {
  const bool large = *rc::gen::arbitrary<bool>();
  ExpectedAttentionParams p;
  p.budget = large ? *rc::gen::inRange<std::int64_t>(150, 260) : *rc::gen::inRange<std::int64_t>(1, 12);
  p.head_dim = 2 * *rc::gen::inRange<std::int64_t>(1, 4);
  p.groups = *rc::gen::inRange<std::int64_t>(1, 4);
  p.sinks = *rc::gen::inRange<std::int64_t>(0, std::min<std::int64_t>(p.budget, 4));
  p.recent_window = *rc::gen::inRange<std::int64_t>(0, std::min<std::int64_t>(p.budget - p.sinks, 6));
  p.query_window = *rc::gen::inRange<std::int64_t>(1, 12);
  p.future_positions = *rc::gen::element<std::int64_t>(1, 2, 17, 512);
  p.rope_base = *rc::gen::element<std::int64_t>(0, 2, 10000);
  p.covariance = *rc::gen::inRange<std::int64_t>(0, 2);
  p.value_norm = *rc::gen::inRange<std::int64_t>(0, 2);
  ExpectedAttention fast(p);
  Reference plain{p, {0}, {V{}}, {0.0}, {}};
  // Tie-heavy signals: components from a few binary fractions, zero keys,
  // repeated keys and queries (equal logits, equal softmax weights).
  const int palette = *rc::gen::inRange(0, 3);
  std::mt19937 rng(*rc::gen::arbitrary<std::uint32_t>());
  std::uniform_int_distribution<int> component(-palette, palette);
  std::uniform_int_distribution<int> tenth(0, 9);
  const auto draw = [&](std::int64_t n) {
    V x(static_cast<std::size_t>(n));
    for (float& c : x) c = static_cast<float>(component(rng)) * 0.5F;
    return x;
  };
  const auto width = p.groups * p.head_dim;
  if (*rc::gen::arbitrary<bool>()) {
    const V k = draw(p.head_dim), v = draw(p.head_dim), q = draw(width);
    fast.on_origin(signals(k, v, q));
    plain.admit(0, k, v, q);
  }
  const int steps = static_cast<int>(p.budget) + *rc::gen::inRange(1, 40);
  RC_TAG(large ? "large" : "small");
  for (int t = 1; t <= steps; ++t) {
    const V k = draw(p.head_dim), v = draw(p.head_dim), q = draw(width);
    fast.on_step(t, signals(k, v, q));
    plain.admit(static_cast<Position>(t), k, v, q);
    const std::int64_t b = tenth(rng) == 0 ? std::max<std::int64_t>(1, p.budget - 3) : p.budget;
    if (static_cast<std::int64_t>(fast.kept_count()) > b || t % 5 == 0) {
      const std::vector<double> want = plain.score();
      std::vector<Position> at(fast.kept_count());
      std::vector<double> got(fast.kept_count());
      fast.scores(at, got);
      for (std::size_t i = 0; i < at.size(); ++i) {
        RC_ASSERT(at[i] == plain.pos[i]);
        if (std::isfinite(got[i])) RC_ASSERT(got[i] == want[i]);
      }
      RC_ASSERT(victims(fast.evict(b)) == plain.evict(b));
      RC_ASSERT(fast.kept_count() == plain.pos.size());
    }
    if (static_cast<std::int64_t>(fast.kept_count()) > p.budget) break;  // only protected left
  }
}

TEST(ExpectedAttention, ScoresOrderExactlyAsEvictChooses) {
  // No RoPE, mean query (2, 0, 0, 0): logits 2 k[0] / sqrt 4 = k[0] = 0, 1,
  // 2, -1; one sink, the newest protected.
  ExpectedAttention p({.budget = 3, .head_dim = 4, .sinks = 1, .recent_window = 1, .rope_base = 0, .covariance = 0,
                       .value_norm = 0});
  const V v{1.0F, 0.0F, 0.0F, 0.0F}, q{2.0F, 0.0F, 0.0F, 0.0F};
  p.on_origin(signals(V{0.0F, 0.0F, 0.0F, 0.0F}, v, q));
  p.on_step(1, signals(V{1.0F, 0.0F, 0.0F, 0.0F}, v, q));
  p.on_step(2, signals(V{2.0F, 0.0F, 0.0F, 0.0F}, v, q));
  p.on_step(3, signals(V{-1.0F, 0.0F, 0.0F, 0.0F}, v, q));
  std::vector<Position> pos(4);
  std::vector<double> sc(4);
  ASSERT_EQ(p.scores(pos, sc), 4U);
  const double e = std::exp(1.0);
  // The softmax over 1, 2, 3 (the sink is not scored): (e, e^2, 1/e) / sum.
  const double sum = std::exp(1.0 - 2.0) + 1.0 + std::exp(-1.0 - 2.0);
  EXPECT_EQ(sc[0], std::numeric_limits<double>::infinity());
  EXPECT_NEAR(sc[1], std::exp(1.0 - 2.0) / sum, 1e-15);
  EXPECT_NEAR(sc[2], 1.0 / sum, 1e-15);
  EXPECT_EQ(sc[3], std::numeric_limits<double>::infinity());
  EXPECT_NEAR(sc[1], e / (e + e * e + 1.0 / e), 1e-15);
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{1}));
  expect_error<ContractError>([&] { p.remove(std::vector<Position>{0}); },
                              "ExpectedAttention: cannot remove position 0: it is protected (the policy never evicts "
                              "it)");
  p.remove(std::vector<Position>{2});
  EXPECT_EQ(p.kept_count(), 2U);
}

TEST(ExpectedAttention, TheBlockAndLayerEvictorsRunIt) {
  const ParamMap params{{"headDim", 2}, {"sinks", 0}, {"ropeBase", 0}, {"covariance", 0}, {"valueNorm", 0}};
  BlockEvictor blocks("expected-attention", params, BlockParams{1, 0, 0, 3, BlockScore::kSum});
  ExpectedAttention alone({.budget = 3, .head_dim = 2, .sinks = 0, .rope_base = 0, .covariance = 0, .value_norm = 0});
  const V v{1.0F, 0.0F}, q{1.0F, 0.5F};
  blocks.on_origin(signals(V{1.0F, 0.0F}, v, q));
  alone.on_origin(signals(V{1.0F, 0.0F}, v, q));
  const V xs{5.0F, -2.0F, 7.0F, 0.5F, -3.0F, 3.0F};
  for (std::size_t t = 0; t < xs.size(); ++t) {
    const V k{xs[t], 1.0F};
    blocks.on_step(static_cast<std::int64_t>(t + 1), signals(k, v, q));
    alone.on_step(static_cast<std::int64_t>(t + 1), signals(k, v, q));
    blocks.evict_blocks(3);
    const auto a = victims(alone.evict(3));
    EXPECT_EQ(victims(blocks.evicted_positions()), a) << "step " << t + 1;
  }
  // Two heads sharing 4 positions: mean query (1, 0), logits k[0] / sqrt 2;
  // each head's softmax over its own keys, so the lowest weights of either go.
  LayerBudget layer("expected-attention", params, LayerBudgetParams{.heads = 2, .layer_budget = 4, .head_floor = 1});
  const V q1{1.0F, 0.0F};
  for (std::size_t h = 0; h < 2; ++h) layer.on_origin(h, signals(V{0.0F, 0.0F}, v, q1));
  layer.on_step(0, 1, signals(V{-4.0F, 0.0F}, v, q1));
  layer.on_step(1, 1, signals(V{1.0F, 0.0F}, v, q1));
  layer.on_step(0, 2, signals(V{0.5F, 0.0F}, v, q1));
  layer.on_step(1, 2, signals(V{-8.0F, 0.0F}, v, q1));
  EXPECT_EQ(layer.evict(4), 2U);
  EXPECT_EQ(victims(layer.victims(0)), (std::vector<Position>{1}));
  EXPECT_EQ(victims(layer.victims(1)), (std::vector<Position>{2}));
}

TEST(ExpectedAttention, APromptIsScoredAtOnceAndNeedsItsQueries) {
  // Five positions, no RoPE, mean query (1, 0): logits k[0] / sqrt 2 with
  // k[0] = 0, 3, -1, 2, 1; sinks 1 keeps position 0; budget 3 keeps 1 and 3.
  const V keys{0, 0, 3, 0, -1, 0, 2, 0, 1, 0};
  const V values(10, 1.0F);
  const V queries{1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  const ParamMap params{{"headDim", 2}, {"sinks", 1}, {"ropeBase", 0}};
  PrefillSignals prompt{.length = 5, .head_dim = 2, .keys = keys, .values = values, .queries = queries, .query_width = 2};
  EXPECT_EQ(prefill_signals("expected-attention", params, 3, prompt), (std::vector<Position>{0, 1, 3}));
  prompt.queries = {};
  prompt.query_width = 0;
  expect_error<ContractError>([&] { prefill_signals("expected-attention", params, 3, prompt); },
                              "ExpectedAttention: the step gives no queries (ExpectedAttention reads the new token's "
                              "queries: groups x headDim = 1 x 2 floats)");
}

}  // namespace
}  // namespace kvevict
