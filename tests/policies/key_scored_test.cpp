// KNorm and KeyDiff (docs/policies/knorm.md, keydiff.md): their rules and
// messages, refused steps that change nothing, no allocation on the step or
// eviction path, the score interface, the block and layer evictors over them,
// prompt scoring (prefill_signals), and a differential suite against a plain
// reference written straight from the definitions.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "alloc_counter.h"
#include "kvevict/core/block_evictor.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/policies/keydiff.h"
#include "kvevict/core/policies/knorm.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::expect_error;
using V = std::vector<float>;
std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }
StepInputs key_of(const V& k) { return StepInputs{.attention = std::nullopt, .key = k}; }

TEST(KeyScored, RulesAreCheckedAtConstruction) {
  expect_error<ParameterError>([] { KNorm({.budget = 0}); }, "KNorm: budget (0) must be at least 1");
  expect_error<ParameterError>([] { KNorm({.budget = 8, .head_dim = 0}); }, "KNorm: headDim (0) must be at least 1");
  expect_error<ParameterError>([] { KeyDiff({.budget = 8, .head_dim = 4097}); },
                               "KeyDiff: headDim (4097) must be at most 4096");
  expect_error<ParameterError>(
      [] { KeyDiff({.budget = 4, .head_dim = 2, .sinks = 2, .recent_window = 2}); },
      "KeyDiff: sinks (2) plus recentWindow (2) must be smaller than budget (4): there would be nothing for the "
      "scores to choose between");
  expect_error<ParameterError>([] { make_policy("knorm", {{"recent", 1}}); },
                               "KNorm: unknown parameter 'recent' (known: budget, headDim, sinks, recentWindow)");
  EXPECT_EQ(KNorm({.budget = 63}).memory_bytes(), 22U * 64U);
  // 64 slots x 30 + 64 rows (64 rounded up to 16) x (12 x 8 + 12) + the anchor 8 x 8
  EXPECT_EQ(KeyDiff({.budget = 63, .head_dim = 8}).memory_bytes(), 30U * 64U + (96U + 12U) * 64U + 64U);
  EXPECT_EQ(KeyDiff({.budget = 64, .head_dim = 8}).memory_bytes(), 30U * 65U + (96U + 12U) * 80U + 64U);
}

TEST(KeyScored, AStepWithoutTheKeyIsRefusedNamingThePolicyAndTheSignal) {
  for (const char* name : {"knorm", "keydiff"}) {
    auto p = make_policy(name, {{"budget", 4}, {"headDim", 2}});
    const std::string title = name == std::string("knorm") ? "KNorm" : "KeyDiff";
    expect_error<ContractError>([&] { p->on_decode_step(1, V{1.0F}); },
                                title + ": reads the new token's key, not attention weights: give each step with "
                                        "on_step (the key as the cache stores it)");
    expect_error<ContractError>([&] { p->on_step(1, StepInputs{}); },
                                title + ": the step gives no key (" + title +
                                    " reads the new token's key: headDim = 2 floats)");
    expect_error<ContractError>([&] { p->on_step(1, key_of(V{1.0F, 2.0F, 3.0F})); },
                                title + ": the step's key has 3 floats; headDim = 2");
    expect_error<ContractError>([&] { p->on_step(1, key_of(V{1.0F, std::nanf("")})); },
                                title + ": key component 1 is NaN; it must be finite");
    // Nothing changed: still position 0 alone, and the same step then goes in.
    EXPECT_EQ(p->kept_count(), 1U);
    p->on_step(1, key_of(V{1.0F, 0.0F}));
    EXPECT_EQ(p->kept_count(), 2U);
    expect_error<ContractError>([&] { p->on_origin(key_of(V{1.0F, 0.0F})); },
                                title + ": on_origin gives position 0's signals once, before the first step; a step "
                                        "has already run");
    expect_error<ContractError>([&] { p->on_step(1, key_of(V{1.0F, 0.0F})); },
                                title + ": position 1 must be greater than every position held (the newest is 1)");
  }
  KNorm twice({.budget = 4, .head_dim = 1});
  twice.on_origin(key_of(V{1.0F}));
  expect_error<ContractError>([&] { twice.on_origin(key_of(V{1.0F})); },
                              "KNorm: on_origin gives position 0's signals once, before the first step; it was "
                              "given already");
}

TEST(KeyScored, KnormAndKeydiffDisagreeOnTheSameKeys) {
  // (1,0), (3,0), (0,1/2): KNorm drops the longest key, (3,0); KeyDiff's
  // anchor is (2,1), so (1,0) and (3,0) tie at cos 2/sqrt(5) and the lower goes.
  KNorm n({.budget = 2, .head_dim = 2});
  KeyDiff d({.budget = 2, .head_dim = 2});
  for (Policy* p : {static_cast<Policy*>(&n), static_cast<Policy*>(&d)}) {
    p->on_origin(key_of(V{1.0F, 0.0F}));
    p->on_step(1, key_of(V{3.0F, 0.0F}));
    p->on_step(2, key_of(V{0.0F, 0.5F}));
  }
  EXPECT_DOUBLE_EQ(d.cosine_of(1), 2.0 / std::sqrt(5.0));
  EXPECT_EQ(victims(n.evict(2)), (std::vector<Position>{1}));
  EXPECT_EQ(victims(d.evict(2)), (std::vector<Position>{0}));
}

TEST(KeyScored, StepsAndEvictionsAllocateNothing) {
  for (const char* name : {"knorm", "keydiff"}) {
    // Past the 8-slot groups and the 4-vector channel blocks of the fast paths.
    auto p = make_policy(name, {{"budget", 70}, {"headDim", 40}, {"sinks", 2}, {"recentWindow", 3}});
    V key(40);
    p->on_origin(key_of(key));
    testing::CountAllocations count;
    for (std::int64_t t = 1; t < 400; ++t) {
      for (std::size_t c = 0; c < key.size(); ++c) key[c] = static_cast<float>((t * 7 + static_cast<std::int64_t>(c) * 3) % 11) - 5.0F;
      p->on_step(t, key_of(key));
      if (p->kept_count() > 70) p->evict(t % 9 == 0 ? 60 : 70);
    }
    EXPECT_EQ(count.count(), 0U) << name;
  }
}

// The plain reference: a list of (position, key), the score recomputed from
// the definition at each eviction, one victim at a time by the rules.
struct Reference {
  std::string name;
  std::int64_t sinks, recent, dim;
  std::vector<Position> pos{0};
  std::vector<V> keys{V{}};  // empty: unobserved
  bool is_protected(std::size_t i) const {
    const std::size_t first_recent = pos.size() - std::min<std::size_t>(static_cast<std::size_t>(recent), pos.size());
    return keys[i].empty() || i >= first_recent || std::int64_t{pos[i]} < sinks;
  }
  std::vector<double> score_all() const {
    const std::size_t kept = pos.size();
    std::vector<double> score(kept, 0.0);
    std::vector<double> anchor(static_cast<std::size_t>(dim), 0.0);
    for (std::size_t i = 0; i < kept; ++i) {
      double sq = 0.0;
      for (float x : keys[i]) sq += double{x} * x;
      if (name == "knorm") score[i] = -sq;
      if (name == "keydiff" && !keys[i].empty() && sq > 0.0) {
        for (std::size_t c = 0; c < keys[i].size(); ++c) anchor[c] += keys[i][c] / std::sqrt(sq);
      }
    }
    if (name == "keydiff") {
      double an = 0.0;
      for (double a : anchor) an += a * a;
      an = std::sqrt(an);
      for (std::size_t i = 0; i < kept; ++i) {
        double sq = 0.0, dot = 0.0;
        for (std::size_t c = 0; c < keys[i].size(); ++c) {
          sq += double{keys[i][c]} * keys[i][c];
          dot += double{keys[i][c]} * anchor[c];
        }
        score[i] = keys[i].empty() || sq == 0.0 || an == 0.0 ? -0.0 : -(dot / (std::sqrt(sq) * an));
      }
    }
    return score;
  }
  // What scores() reports: +infinity where protected.
  std::vector<double> public_scores() const {
    std::vector<double> score = score_all();
    for (std::size_t i = 0; i < score.size(); ++i) {
      if (is_protected(i)) score[i] = std::numeric_limits<double>::infinity();
    }
    return score;
  }
  void drop(const std::vector<bool>& gone) {
    std::vector<Position> kp;
    std::vector<V> kk;
    for (std::size_t i = 0; i < pos.size(); ++i) {
      if (!gone[i]) {
        kp.push_back(pos[i]);
        kk.push_back(keys[i]);
      }
    }
    pos = kp;
    keys = kk;
  }
  std::vector<Position> evict(std::int64_t budget) {
    const std::size_t kept = pos.size();
    if (kept <= static_cast<std::size_t>(budget)) return {};
    const std::vector<double> score = score_all();
    std::vector<bool> gone(kept, false);
    for (std::size_t n = 0; n < kept - static_cast<std::size_t>(budget); ++n) {
      std::size_t best = kept;
      for (std::size_t i = 0; i < kept; ++i) {
        if (gone[i] || is_protected(i)) continue;
        if (best == kept || score[i] < score[best]) best = i;
      }
      if (best == kept) break;
      gone[best] = true;
    }
    std::vector<Position> out;
    for (std::size_t i = 0; i < kept; ++i) {
      if (gone[i]) out.push_back(pos[i]);
    }
    drop(gone);
    return out;
  }
  void remove(const std::vector<Position>& victims) {
    std::vector<bool> gone(pos.size(), false);
    for (std::size_t i = 0; i < pos.size(); ++i) gone[i] = std::find(victims.begin(), victims.end(), pos[i]) != victims.end();
    drop(gone);
  }
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// KNorm and KeyDiff choose by fast paths (a contiguous evictable range, SIMD
// argmin/argmax, KeyDiff's anchor with lanes across channels and its dot
// products eight slots at a time); the reference above by the definitions.
// The cases reach every block of those paths: budgets past 300 (many 8-slot
// groups and a ragged tail) and small ones, head sizes on both sides of the
// anchor's 4-vector channel block (16 channels on AVX2, 32 on AVX-512) and
// of the vector width, tie-heavy keys (binary fractions, zero keys, repeats),
// several victims per evict, sinks and a recent window, and scores()/remove()
// between steps. The simd_* tests run it again at every SIMD target.
RC_GTEST_PROP(KeyScored, FastAndPlainChooseTheSameVictims, ()) {
  const std::string name = *rc::gen::element<std::string>("knorm", "keydiff");
  const int size = *rc::gen::inRange(0, 3);
  const std::int64_t budget = size == 2   ? *rc::gen::inRange<std::int64_t>(300, 420)
                              : size == 1 ? *rc::gen::inRange<std::int64_t>(13, 80)
                                          : *rc::gen::inRange<std::int64_t>(1, 12);
  const std::int64_t dim = *rc::gen::element<std::int64_t>(1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 64, 129);
  const std::int64_t sinks = *rc::gen::inRange<std::int64_t>(0, std::min<std::int64_t>(budget, 4));
  const std::int64_t recent = *rc::gen::inRange<std::int64_t>(0, budget - sinks);
  // Tie-heavy keys: components from a few binary fractions, zero keys, repeats.
  const int palette = *rc::gen::inRange(1, 4);
  const bool origin = *rc::gen::arbitrary<bool>();
  auto fast = make_policy(name, {{"budget", budget}, {"headDim", dim}, {"sinks", sinks}, {"recentWindow", recent}});
  Reference plain{name, sinks, recent, dim};
  std::mt19937 rng(*rc::gen::arbitrary<std::uint32_t>());
  std::uniform_int_distribution<int> component(-palette, palette);
  std::uniform_int_distribution<int> percent(0, 99);
  V last(static_cast<std::size_t>(dim), 0.5F);
  const auto draw = [&] {
    const int kind = percent(rng);
    if (kind < 8) return V(static_cast<std::size_t>(dim), 0.0F);  // no direction
    if (kind < 20) return last;                                   // a repeat: equal scores
    V k(static_cast<std::size_t>(dim));
    for (float& x : k) x = static_cast<float>(component(rng)) * 0.5F;
    last = k;
    return k;
  };
  if (origin) {
    const V k = draw();
    fast->on_origin(key_of(k));
    plain.keys[0] = k;
  }
  const int steps = static_cast<int>(budget) + *rc::gen::inRange(1, 60);
  RC_TAG(name, size);
  std::vector<Position> held(static_cast<std::size_t>(budget) + 1);
  std::vector<double> got_scores(static_cast<std::size_t>(budget) + 1);
  for (int t = 1; t <= steps; ++t) {
    const V k = draw();
    fast->on_step(t, key_of(k));
    plain.pos.push_back(static_cast<Position>(t));
    plain.keys.push_back(k);
    // Sometimes the scores an outside evictor reads, bit for bit.
    if (percent(rng) < 10) {
      const std::size_t n = fast->scores(held, got_scores);
      RC_ASSERT(std::vector<Position>(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n)) == plain.pos);
      RC_ASSERT(same_bits(std::vector<double>(got_scores.begin(), got_scores.begin() + static_cast<std::ptrdiff_t>(n)),
                          plain.public_scores()));
    }
    // Sometimes an outside evictor removes a few evictable positions.
    if (percent(rng) < 8) {
      std::vector<Position> chosen;
      for (std::size_t i = 0; i < plain.pos.size(); ++i) {
        if (!plain.is_protected(i) && percent(rng) < 5 && chosen.size() < 3) chosen.push_back(plain.pos[i]);
      }
      fast->remove(chosen);
      plain.remove(chosen);
      RC_ASSERT(fast->kept_count() == plain.pos.size());
    }
    // Sometimes several victims at once: the budget passed to evict drops.
    const int drop = percent(rng);
    const std::int64_t b = drop < 4    ? std::max<std::int64_t>(1, budget / 2)
                           : drop < 14 ? std::max<std::int64_t>(1, budget - 3)
                                       : budget;
    if (static_cast<std::int64_t>(fast->kept_count()) > b || t % 5 == 0) {
      const auto got = victims(fast->evict(b));
      RC_ASSERT(got == plain.evict(b));
      RC_ASSERT(fast->kept_count() == plain.pos.size());
    }
    if (static_cast<std::int64_t>(fast->kept_count()) > budget) break;  // only protected left
  }
}

// A key-scored policy that brings its own scores and no fast path (as a new
// subclass does) still gets the reference eviction: this one scores like
// KNorm through fill_scores() alone, and chooses exactly KNorm's victims.
class PlainKNorm final : public KeyScoredPolicy {
 public:
  explicit PlainKNorm(const KeyScoredParams& p) : KeyScoredPolicy("PlainKNorm", p, /*keeps_keys=*/true) {}
  std::string_view name() const noexcept override { return "plain-knorm"; }
  std::size_t memory_bytes() const noexcept override { return 0; }
  int fills = 0;

 private:
  void fill_scores() const noexcept override {
    ++const_cast<PlainKNorm*>(this)->fills;
    for (std::size_t i = 0; i < kept_; ++i) score_[i] = -squared_norms_[i];
  }
};

TEST(KeyScored, ASubclassWithoutAFastPathGetsTheReferenceEviction) {
  const KeyScoredParams params{.budget = 40, .head_dim = 3, .sinks = 2, .recent_window = 5};
  PlainKNorm plain(params);
  KNorm fast(params);
  std::mt19937 rng(5);
  for (std::int64_t t = 1; t < 300; ++t) {
    V k(3);
    for (float& x : k) x = static_cast<float>(static_cast<int>(rng() % 5) - 2) * 0.5F;
    plain.on_step(t, key_of(k));
    fast.on_step(t, key_of(k));
    const std::int64_t b = t % 17 == 0 ? 30 : 40;
    const int before = plain.fills;
    const auto want = victims(fast.evict(b));
    EXPECT_EQ(victims(plain.evict(b)), want) << "step " << t;
    EXPECT_EQ(plain.fills, before + (want.empty() ? 0 : 1)) << "one fill_scores() per evict that drops";
  }
}

TEST(KeyScored, ScoresOrderExactlyAsEvictChooses) {
  KeyDiff d({.budget = 4, .head_dim = 2, .recent_window = 1});
  d.on_origin(key_of(V{0.0F, 1.0F}));
  d.on_step(1, key_of(V{1.0F, 0.0F}));
  d.on_step(2, key_of(V{1.0F, 0.0F}));
  d.on_step(3, key_of(V{1.0F, 0.0F}));
  std::vector<Position> pos(4);
  std::vector<double> sc(4);
  ASSERT_EQ(d.scores(pos, sc), 4U);
  // Anchor (3, 1): the x keys' cosine 3/sqrt(10), position 3 protected.
  EXPECT_DOUBLE_EQ(sc[0], -1.0 / std::sqrt(10.0));
  EXPECT_DOUBLE_EQ(sc[1], -3.0 / std::sqrt(10.0));
  EXPECT_EQ(sc[3], std::numeric_limits<double>::infinity());
  d.remove(std::vector<Position>{1});
  EXPECT_EQ(d.kept_count(), 3U);
  expect_error<ContractError>([&] { d.remove(std::vector<Position>{3}); },
                              "KeyDiff: cannot remove position 3: it is protected (the policy never evicts it)");
}

TEST(KeyScored, TheBlockAndLayerEvictorsRunThem) {
  // Blocks of one position choose exactly the policy's own victims.
  BlockEvictor blocks("knorm", {{"headDim", 1}}, BlockParams{1, 0, 0, 3, BlockScore::kSum});
  KNorm alone({.budget = 3, .head_dim = 1});
  blocks.on_origin(key_of(V{1.0F}));
  alone.on_origin(key_of(V{1.0F}));
  const V norms{5.0F, 2.0F, 7.0F, 0.5F, 3.0F, 3.0F};
  for (std::size_t t = 0; t < norms.size(); ++t) {
    blocks.on_step(static_cast<std::int64_t>(t + 1), key_of(V{norms[t]}));
    alone.on_step(static_cast<std::int64_t>(t + 1), key_of(V{norms[t]}));
    blocks.evict_blocks(3);
    const auto a = victims(alone.evict(3));
    EXPECT_EQ(victims(blocks.evicted_positions()), a) << "step " << t + 1;
  }
  // A layer of two heads sharing 4 positions: the largest norms of either go.
  LayerBudget layer("knorm", {{"headDim", 1}}, LayerBudgetParams{.heads = 2, .layer_budget = 4, .head_floor = 1});
  for (std::size_t h = 0; h < 2; ++h) layer.on_origin(h, key_of(V{0.25F}));
  layer.on_step(0, 1, key_of(V{4.0F}));
  layer.on_step(1, 1, key_of(V{1.0F}));
  layer.on_step(0, 2, key_of(V{0.5F}));
  layer.on_step(1, 2, key_of(V{8.0F}));
  EXPECT_EQ(layer.evict(4), 2U);
  EXPECT_EQ(victims(layer.victims(0)), (std::vector<Position>{1}));
  EXPECT_EQ(victims(layer.victims(1)), (std::vector<Position>{2}));
}

TEST(KeyScored, APromptsKeysAreScoredAtOnce) {
  // Norms 1, 4, 2, 3, 0.5 with one sink: KNorm keeps the sink and the two
  // shortest of the rest.
  const V keys{1.0F, 4.0F, 2.0F, 3.0F, 0.5F};
  const PrefillSignals prompt{.length = 5, .head_dim = 1, .keys = keys, .values = {}, .queries = {}, .query_width = 0};
  EXPECT_EQ(prefill_signals("knorm", {{"headDim", 1}, {"sinks", 1}}, 3, prompt), (std::vector<Position>{0, 2, 4}));
  EXPECT_EQ(prefill_signals("knorm", {{"headDim", 1}}, 5, prompt), (std::vector<Position>{0, 1, 2, 3, 4}));
  expect_error<ParameterError>([&] { prefill_signals("h2o", {{"recentWindow", 0}}, 3, prompt); },
                               "prefill: h2o scores attention rows, not keys: give it a window of attention (prefill)");
  expect_error<ParameterError>(
      [&] {
        const V w(25, 0.0F);
        prefill("knorm", {{"headDim", 1}}, 3, PrefillWindow{w, 5, 5});
      },
      "prefill: knorm reads the prompt's key, not attention rows: use prefill_signals");
}

}  // namespace
}  // namespace kvevict
