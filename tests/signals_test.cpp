// Steps that carry more than attention (docs/signals.md): the registry's
// signals, the decoder giving every policy its key, value and queries, and
// attention computed from queries and keys choosing exactly what the
// materialised weights choose on the committed model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvevict/core/attention.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::committed_model;
using testing::heldout_prefix;

TEST(Signals, TheAttentionAndPositionalPoliciesReadWhatTheyAlwaysRead) {
  for (const char* name : {"scissorhands", "h2o", "tova", "snapkv", "pyramidkv"}) {
    EXPECT_EQ(find_policy(name).signals, Signals{kSignalAttention}) << name;
    EXPECT_EQ(make_policy(name)->signals(), Signals{kSignalAttention}) << name;
  }
  for (const char* name : {"sliding-window", "streaming-llm"}) {
    EXPECT_EQ(find_policy(name).signals, Signals{0}) << name;
    EXPECT_EQ(make_policy(name)->signals(), Signals{0}) << name;
  }
  // What a trace can feed is exactly the seven of the canonical compare.
  EXPECT_EQ(policy_names(kSignalAttention),
            (std::vector<std::string>{"scissorhands", "h2o", "streaming-llm", "sliding-window", "tova", "snapkv",
                                      "pyramidkv"}));
  EXPECT_EQ(parse_policy_list("all", kSignalAttention), policy_names(kSignalAttention));
  EXPECT_EQ(signal_names(kSignalKey | kSignalQueries), "key, queries");
  EXPECT_EQ(signal_names(0), "none");
}

TEST(Signals, OnStepIsOnDecodeStepForAnAttentionPolicy) {
  // The other signals are not read: the same votes and the same victim as
  // the spec's tie-break example.
  auto a = make_policy("scissorhands", {{"budget", 3}, {"recentWindow", 1}});
  auto b = make_policy("scissorhands", {{"budget", 3}, {"recentWindow", 1}});
  const std::vector<std::vector<float>> rows{{1.0F}, {0.5F, 0.5F}, {0.25F, 0.25F, 0.5F}};
  const std::vector<float> junk{9.0F, -9.0F};
  for (std::size_t t = 0; t < rows.size(); ++t) {
    a->on_decode_step(static_cast<std::int64_t>(t + 1), std::span<const float>(rows[t]));
    b->on_step(static_cast<std::int64_t>(t + 1),
               StepInputs{.attention = std::span<const float>(rows[t]), .key = junk, .value = junk, .queries = junk});
  }
  const auto va = a->evict(3);
  const std::vector<Position> want{0};
  EXPECT_EQ(std::vector<Position>(va.begin(), va.end()), want);
  const auto vb = b->evict(3);
  EXPECT_EQ(std::vector<Position>(vb.begin(), vb.end()), want);
}

TEST(Signals, AFixedMeanOfTwoHeadsAndTheSoftmaxAreTheModelsArithmetic) {
  // Two keys of head_dim 2, two query heads: head 0 scores (2, 0), head 1
  // (0, 0) -- after the scale of 1/2 -- so head 0's weights are
  // (e^2, 1) / (e^2 + 1) and head 1's (1/2, 1/2).
  const std::vector<float> queries{4.0F, 0.0F, 0.0F, 0.0F};
  const std::vector<float> keys{1.0F, 0.0F, 0.0F, 1.0F};
  std::vector<float> out(2), scratch(2);
  attention_from_keys(queries, 2, keys, 2, 2, 0.5F, out, scratch);
  const double e2 = std::exp(2.0);
  EXPECT_NEAR(out[0], (e2 / (e2 + 1.0) + 0.5) / 2.0, 1e-6);
  EXPECT_NEAR(out[1], (1.0 / (e2 + 1.0) + 0.5) / 2.0, 1e-6);
  EXPECT_THROW(attention_from_keys(queries, 2, keys, 3, 2, 0.5F, out, scratch), ContractError);
  // RoPE at position 0 is the identity; a quarter turn of the first pair at
  // an angle of exactly 0 for base^0 = 1 ... checked against cos/sin directly.
  std::vector<float> x{1.0F, 2.0F, 3.0F, 4.0F};
  rope_neox(x, 0, 10000.0);
  EXPECT_EQ(x, (std::vector<float>{1.0F, 2.0F, 3.0F, 4.0F}));
  rope_neox(x, 1, 10000.0);  // pair (0, 2) turns by 1 radian, pair (1, 3) by 1/100
  EXPECT_FLOAT_EQ(x[0], static_cast<float>(std::cos(1.0)) * 1.0F - static_cast<float>(std::sin(1.0)) * 3.0F);
  EXPECT_FLOAT_EQ(x[3], static_cast<float>(std::sin(0.01)) * 2.0F + static_cast<float>(std::cos(0.01)) * 4.0F);
}

// Records what the decoder gives a policy, and passes it on.
class SignalProbe final : public Policy {
 public:
  explicit SignalProbe(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const noexcept override { return inner_->name(); }
  Signals signals() const noexcept override { return kEverySignal; }
  void on_decode_step(std::int64_t, Attention) override { ADD_FAILURE() << "the decoder called on_decode_step"; }
  void on_step(std::int64_t pos, const StepInputs& in) override {
    last_key.assign(in.key.begin(), in.key.end());
    last_value.assign(in.value.begin(), in.value.end());
    last_queries.assign(in.queries.begin(), in.queries.end());
    last_pos = pos;
    inner_->on_step(pos, in);
  }
  void on_origin(const StepInputs& in) override {
    ++origins;
    last_key.assign(in.key.begin(), in.key.end());
    last_value.assign(in.value.begin(), in.value.end());
    last_pos = 0;
  }
  std::span<const Position> evict(std::int64_t budget) override { return inner_->evict(budget); }
  std::size_t kept_count() const noexcept override { return inner_->kept_count(); }
  std::size_t memory_bytes() const noexcept override { return inner_->memory_bytes(); }

  int origins = 0;
  std::int64_t last_pos = -1;
  std::vector<float> last_key, last_value, last_queries;

 private:
  std::unique_ptr<Policy> inner_;
};

// An engine with fused attention: it never has the weights, so it keeps the
// keys it holds and computes the one row an attention policy reads from the
// step's queries (rotated to their position, as the model rotates them).
class FromKeys final : public Policy {
 public:
  FromKeys(std::unique_ptr<Policy> inner, const ModelConfig& config)
      : inner_(std::move(inner)), d_(config.head_dim()), groups_(config.group()), base_(config.rope_base) {}
  std::string_view name() const noexcept override { return inner_->name(); }
  Signals signals() const noexcept override { return kSignalKey | kSignalQueries; }
  void on_decode_step(std::int64_t, Attention) override { ADD_FAILURE() << "the decoder called on_decode_step"; }
  void on_origin(const StepInputs& in) override {
    positions_ = {0};
    keys_.assign(in.key.begin(), in.key.end());
  }
  void on_step(std::int64_t pos, const StepInputs& in) override {
    rotated_.assign(in.queries.begin(), in.queries.end());
    for (std::size_t g = 0; g < groups_; ++g) rope_neox(std::span<float>(rotated_).subspan(g * d_, d_), pos, base_);
    const std::size_t held = positions_.size();
    all_ = keys_;
    all_.insert(all_.end(), in.key.begin(), in.key.end());
    weights_.assign(held + 1, 0.0F);
    scratch_.assign(held + 1, 0.0F);
    attention_from_keys(rotated_, groups_, all_, held + 1, d_, 1.0F / std::sqrt(static_cast<float>(d_)), weights_,
                        scratch_);
    last_weights.assign(weights_.begin(), weights_.begin() + static_cast<std::ptrdiff_t>(held));
    inner_->on_decode_step(pos, std::span<const float>(weights_.data(), held));
    positions_.push_back(static_cast<Position>(pos));
    keys_.insert(keys_.end(), in.key.begin(), in.key.end());
  }
  std::span<const Position> evict(std::int64_t budget) override {
    const std::span<const Position> victims = inner_->evict(budget);
    for (const Position v : victims) {
      const auto at = static_cast<std::size_t>(std::find(positions_.begin(), positions_.end(), v) - positions_.begin());
      positions_.erase(positions_.begin() + static_cast<std::ptrdiff_t>(at));
      keys_.erase(keys_.begin() + static_cast<std::ptrdiff_t>(at * d_),
                  keys_.begin() + static_cast<std::ptrdiff_t>((at + 1) * d_));
    }
    return victims;
  }
  std::size_t kept_count() const noexcept override { return inner_->kept_count(); }
  std::size_t memory_bytes() const noexcept override { return inner_->memory_bytes(); }

  std::vector<float> last_weights;

 private:
  std::unique_ptr<Policy> inner_;
  std::size_t d_, groups_;
  double base_;
  std::vector<Position> positions_;
  std::vector<float> keys_, all_, rotated_, weights_, scratch_;
};

TEST(DecoderSignals, EveryPolicyIsGivenTheKeyAsStoredTheValueAndTheQueries) {
  const auto model = committed_model();
  Decoder decoder(model, 256);
  const ModelConfig& cfg = model->config();
  std::vector<std::unique_ptr<SignalProbe>> probes;
  for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
    probes.push_back(std::make_unique<SignalProbe>(make_policy("h2o", {{"budget", 200}})));
    decoder.set_policy(h, probes.back().get(), 200);
  }
  const std::vector<std::uint8_t> text = heldout_prefix(120);
  const std::size_t d = cfg.head_dim();
  for (std::size_t t = 0; t < text.size(); ++t) {
    decoder.step(text[t]);
    for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
      const SignalProbe& p = *probes[h];
      ASSERT_EQ(p.origins, 1);
      ASSERT_EQ(p.last_pos, static_cast<std::int64_t>(t));
      // The newest held row is this token's: key (rotated) and value as stored.
      const auto [keys, values] = decoder.held_rows(h);
      const std::size_t newest = decoder.held(h).size() - 1;
      ASSERT_EQ(decoder.held(h)[newest], t);
      ASSERT_EQ(p.last_key.size(), d);
      EXPECT_EQ(std::memcmp(p.last_key.data(), keys + newest * d, d * sizeof(float)), 0) << "cache " << h;
      EXPECT_EQ(std::memcmp(p.last_value.data(), values + newest * d, d * sizeof(float)), 0) << "cache " << h;
      if (t > 0) {
        ASSERT_EQ(p.last_queries.size(), std::size_t{cfg.group()} * d);
      }
    }
  }
}

TEST(DecoderSignals, AttentionFromQueriesAndKeysChoosesWhatTheMaterialisedWeightsChoose) {
  // Two decoders over the same bytes: one gives each policy the weights it
  // wrote, the other an engine's view -- no weights, only the queries and the
  // keys. Every attention policy must hold exactly the same positions in
  // every cache after every step (and so give identical logits).
  const auto model = committed_model();
  const ModelConfig& cfg = model->config();
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  const std::int64_t budget = 48;
  double largest_gap = 0.0;
  for (const char* name : {"h2o", "scissorhands", "tova", "snapkv", "pyramidkv"}) {
    Decoder materialised(model, 512);
    Decoder fused(model, 512);
    std::vector<std::unique_ptr<Policy>> plain;
    std::vector<std::unique_ptr<FromKeys>> engine;
    for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
      plain.push_back(make_policy(name, {{"budget", budget}}));
      materialised.set_policy(h, plain.back().get(), budget);
      engine.push_back(std::make_unique<FromKeys>(make_policy(name, {{"budget", budget}}), cfg));
      fused.set_policy(h, engine.back().get(), budget);
    }
    for (std::size_t t = 0; t < text.size(); ++t) {
      const std::span<const float> a = materialised.step(text[t]);
      const std::span<const float> b = fused.step(text[t]);
      for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
        const std::span<const Position> ha = materialised.held(h);
        const std::span<const Position> hb = fused.held(h);
        ASSERT_TRUE(std::equal(ha.begin(), ha.end(), hb.begin(), hb.end()))
            << name << ": cache " << h << " differs after position " << t;
        if (t == 0) continue;
        const std::span<const float> w = materialised.attention(h);
        const std::vector<float>& v = engine[h]->last_weights;
        ASSERT_EQ(v.size() + 1, w.size());
        for (std::size_t i = 0; i < v.size(); ++i) largest_gap = std::max(largest_gap, std::fabs(double{w[i]} - v[i]));
      }
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name << " at position " << t;
    }
    EXPECT_GT(materialised.evicted(), 0U) << name;  // the budget bound
  }
  // The two computations differ only in the order of the dot products' sums.
  EXPECT_LT(largest_gap, 1e-5);
}

}  // namespace
}  // namespace kvevict
