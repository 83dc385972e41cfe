// The real model: the committed weights load, the C++ forward pass matches
// PyTorch's logits, the KV cache really loses what a policy evicts (and RoPE
// keeps true positions), a budget that never binds changes nothing, and bad
// weight files fail with one clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <zlib.h>

#include "kvevict/core/errors.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/eval/npy.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/eval/persistence.h"
#include "kvevict/core/registry.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::source_dir;

using testing::committed_model;
using testing::heldout_prefix;
using testing::model_dir;

std::vector<char> file_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A float32 [rows, cols] .npy (version 1) as train.py writes it with numpy.
// Fatal checks: the header's numbers size the copy, so a malformed file must
// stop the test before they are used (call under ASSERT_NO_FATAL_FAILURE).
void read_matrix(const std::filesystem::path& file, std::vector<float>& out, std::uint64_t& rows,
                 std::uint64_t& cols) {
  const std::vector<char> bytes = file_bytes(file);
  ASSERT_GT(bytes.size(), 10U) << file;
  ASSERT_EQ(std::string(bytes.data() + 1, 5), "NUMPY") << file;
  const std::size_t header_len = static_cast<unsigned char>(bytes[8]) |
                                 (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  ASSERT_LE(10 + header_len, bytes.size()) << file;
  const std::string header(bytes.data() + 10, header_len);
  ASSERT_NE(header.find("'<f4'"), std::string::npos) << header;
  const std::size_t open = header.find("'shape': (");
  ASSERT_NE(open, std::string::npos) << header;
  const std::size_t comma = header.find(',', open + 10);
  ASSERT_NE(comma, std::string::npos) << header;
  rows = std::stoull(header.substr(open + 10));
  cols = std::stoull(header.substr(comma + 1));
  ASSERT_EQ(bytes.size(), 10 + header_len + rows * cols * 4) << file;
  out.resize(rows * cols);
  std::memcpy(out.data(), bytes.data() + 10 + header_len, out.size() * 4);
}

TEST(Model, CommittedWeightsLoadWithTheDocumentedShape) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.vocab, 256U);
  EXPECT_EQ(c.layers, 4U);
  EXPECT_EQ(c.heads, 4U);
  EXPECT_EQ(c.kv_heads, 2U);  // grouped-query attention: 8 caches, one policy each
  EXPECT_EQ(c.width, 128U);
  EXPECT_EQ(c.ff, 512U);
  EXPECT_GE(c.context, 1024U);
  EXPECT_LE(std::filesystem::file_size(model_dir() / "kvevict-tiny.kvm"), 16U << 20);
}

TEST(Model, LogitsMatchPyTorchOnTheReferencePrompt) {
  const auto model = committed_model();
  std::uint64_t rows = 0, cols = 0;
  std::vector<float> reference;
  ASSERT_NO_FATAL_FAILURE(read_matrix(model_dir() / "reference.npy", reference, rows, cols));
  // An empty reference (and prompt) would compare nothing and pass.
  ASSERT_GT(rows, 0U) << "reference.npy has no rows";
  const std::vector<char> prompt = file_bytes(model_dir() / "reference-prompt.txt");
  ASSERT_EQ(rows, prompt.size());
  ASSERT_EQ(cols, 256U);
  Decoder decoder(model);
  double worst = 0.0;
  for (std::size_t t = 0; t < prompt.size(); ++t) {
    const std::span<const float> logits = decoder.step(static_cast<std::uint8_t>(prompt[t]));
    for (std::size_t v = 0; v < cols; ++v) {
      worst = std::max(worst, std::abs(static_cast<double>(logits[v]) - reference[t * cols + v]));
    }
  }
  EXPECT_LE(worst, 1e-4) << "largest |C++ - PyTorch| logit difference over " << rows << " positions";
}

TEST(Model, AProfiledDecoderGivesTheSameLogitsAndAccountsForItsTime) {
  // The profile reads the clock; it must not change a bit of the logits, and
  // its parts must add up to no more than the whole steps.
  const auto model = committed_model();
  const std::vector<char> prompt = file_bytes(model_dir() / "reference-prompt.txt");
  ASSERT_GT(prompt.size(), 8U);
  Decoder plain(model);
  Decoder timed(model);
  std::vector<std::unique_ptr<Policy>> a, b;
  for (std::uint32_t h = 0; h < model->config().head_count(); ++h) {
    a.push_back(make_policy("h2o", {{"budget", 8}, {"recentWindow", 2}}));
    b.push_back(make_policy("h2o", {{"budget", 8}, {"recentWindow", 2}}));
    plain.set_policy(h, a.back().get(), 8);
    timed.set_policy(h, b.back().get(), 8);
  }
  DecodeProfile profile;
  timed.set_profile(&profile);
  for (const char c : prompt) {
    const std::span<const float> x = plain.step(static_cast<std::uint8_t>(c));
    const std::vector<float> want(x.begin(), x.end());
    const std::span<const float> y = timed.step(static_cast<std::uint8_t>(c));
    ASSERT_TRUE(std::equal(want.begin(), want.end(), y.begin(), y.end()));
  }
  EXPECT_EQ(profile.tokens, prompt.size());
  EXPECT_GT(profile.projections, 0.0);
  EXPECT_GT(profile.activation, 0.0);
  EXPECT_GT(profile.attention, 0.0);
  EXPECT_GT(profile.policies, 0.0);  // the budget of 8 binds within the prompt
  EXPECT_LE(profile.projections + profile.activation + profile.attention + profile.policies, profile.total);
  EXPECT_EQ(plain.evicted(), timed.evicted());
}

TEST(Model, TheModelHasLearnedSomething) {
  // A model that learned nothing scores 8 bits per byte; the model card
  // quotes its held-out figure, and the engine must agree it is far below.
  const std::vector<std::uint8_t> text = heldout_prefix(2048);
  const std::vector<PerplexityRow> rows = perplexity(*committed_model(), text, {});
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_LT(rows[0].bits_per_byte, 3.0);
  EXPECT_EQ(rows[0].predictions, text.size() - 2);  // two windows of 1,024
}

TEST(Model, EveryPolicyWithABudgetThatNeverBindsGivesExactlyTheFullCachePerplexity) {
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  std::vector<RunSpec> specs;
  for (const PolicyInfo* info : policies()) {
    specs.push_back({info->name, {}, 300});
    specs.push_back({info->name, {}, 1023});  // the largest a context of 1,024 takes
  }
  const std::vector<PerplexityRow> rows = perplexity(*committed_model(), text, specs);
  ASSERT_EQ(rows.size(), specs.size() + 1);
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].perplexity, rows[0].perplexity) << rows[i].policy << " at " << rows[i].budget;
    EXPECT_EQ(rows[i].evicted, 0U) << rows[i].policy;
    EXPECT_EQ(rows[i].extra_bits_per_byte, 0.0) << rows[i].policy;
    EXPECT_FALSE(rows[i].has_extra_interval) << "one window of 300 bytes is one draw";
  }
}

// One rule for a budget at or above the context (nothing would ever be
// evicted: it ran as a silent no-op): refused, naming the context.
TEST(Model, ABudgetAtTheContextIsRefusedNamingIt) {
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  testing::expect_error<ParameterError>(
      [&] { (void)perplexity(*committed_model(), text, {RunSpec{"h2o", {}, 1024}}); },
      "h2o: budget (1024) must be 1 ... 1023: a cache holds the budget and the new token, within the model's "
      "context of 1024 positions");
}

TEST(Model, TheExtraCostsIntervalIsPairedByWindow) {
  // Four windows of 1,024 bytes. Each window scored on its own gives that
  // window's extra bits per byte d_i; the row's interval must be the t
  // interval of those four (equal weights: 1,023 predictions each).
  const ModelConfig& cfg = committed_model()->config();
  const std::vector<std::uint8_t> text = heldout_prefix(4 * cfg.context);
  const RunSpec window{"sliding-window", {}, 16};
  const std::vector<PerplexityRow> rows = perplexity(*committed_model(), text, {window});
  ASSERT_EQ(rows.size(), 2U);
  std::vector<double> d;
  for (std::size_t w = 0; w < 4; ++w) {
    const std::span<const std::uint8_t> part(text.data() + w * cfg.context, cfg.context);
    const std::vector<PerplexityRow> one = perplexity(*committed_model(), part, {window});
    d.push_back(one[1].bits_per_byte - one[0].bits_per_byte);
    EXPECT_NEAR(one[1].extra_bits_per_byte, one[1].bits_per_byte - one[0].bits_per_byte, 1e-12);
    EXPECT_FALSE(one[1].has_extra_interval);
  }
  const double mean = (d[0] + d[1] + d[2] + d[3]) / 4.0;
  double var = 0.0;
  for (const double x : d) var += (x - mean) * (x - mean) / 3.0;
  const double half = 3.1824 * std::sqrt(var / 4.0);  // t(3)
  const PerplexityRow& r = rows[1];
  ASSERT_TRUE(r.has_extra_interval);
  EXPECT_NEAR(r.extra_bits_per_byte, rows[1].bits_per_byte - rows[0].bits_per_byte, 1e-12);
  EXPECT_NEAR(r.extra_bits_per_byte, mean, 1e-9);
  EXPECT_NEAR(r.extra_low, mean - half, 1e-9);
  EXPECT_NEAR(r.extra_high, mean + half, 1e-9);
  // 16 recent bytes lose context in every window: the interval excludes 0.
  EXPECT_GT(r.extra_low, 0.0);
}

TEST(Model, ABindingBudgetChangesThePerplexity) {
  const std::vector<std::uint8_t> text = heldout_prefix(400);
  const std::vector<PerplexityRow> rows =
      perplexity(*committed_model(), text, {{"sliding-window", {}, 8}, {"scissorhands", {}, 64}});
  EXPECT_NE(rows[1].perplexity, rows[0].perplexity);
  EXPECT_GT(rows[1].bits_per_byte, rows[0].bits_per_byte);  // 8 recent bytes lose context
  EXPECT_EQ(rows[1].evicted, std::uint64_t{committed_model()->config().head_count()} * (399 - 8));  // every cache, one a step once full
  EXPECT_GT(rows[2].evicted, 0U);
}

// Wraps a real policy and remembers everything it evicted.
class Probe final : public Policy {
 public:
  explicit Probe(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const noexcept override { return inner_->name(); }
  void on_decode_step(std::int64_t pos, Attention attn) override {
    if (pos == throw_at) {
      throw_at = -1;  // once: a transient failure, before the inner policy sees the step
      throw ContractError(fmt::format("probe: refused position {} on purpose", pos));
    }
    if (attn) last_weights.assign(attn->begin(), attn->end());
    inner_->on_decode_step(pos, attn);
  }
  std::span<const Position> evict(std::int64_t budget) override {
    const auto victims = inner_->evict(budget);
    evicted.insert(victims.begin(), victims.end());
    return victims;
  }
  std::size_t kept_count() const noexcept override { return inner_->kept_count(); }
  std::size_t memory_bytes() const noexcept override { return inner_->memory_bytes(); }
  std::set<Position> evicted;
  std::vector<float> last_weights;
  std::int64_t throw_at = -1;  // a position whose decode step throws

 private:
  std::unique_ptr<Policy> inner_;
};

// Gives every head of `decoder` its own instance of `name` at `budget`,
// wrapped as `P` (a Probe, or the policy itself).
template <typename P>
std::vector<std::unique_ptr<P>> attach(Decoder& decoder, const char* name, std::int64_t budget) {
  std::vector<std::unique_ptr<P>> out;
  for (std::uint32_t h = 0; h < decoder.config().head_count(); ++h) {
    ParamMap params;
    set_param(params, "budget", budget);
    if constexpr (std::is_same_v<P, Policy>) {
      out.push_back(make_policy(name, params));
    } else {
      out.push_back(std::make_unique<P>(make_policy(name, params)));
    }
    decoder.set_policy(h, out.back().get(), budget);
  }
  return out;
}

TEST(Model, AnEvictedPositionIsNeverAttendedAgain) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(200);
  for (const char* name : {"scissorhands", "h2o", "tova", "snapkv"}) {
    constexpr std::int64_t kBudget = 40;
    Decoder decoder(model, 200);
    const auto probes = attach<Probe>(decoder, name, kBudget);
    for (std::uint32_t t = 0; t < text.size(); ++t) {
      // Evicted before this step (a victim of this step was attended in it:
      // a policy acts on the attention it has just seen).
      std::vector<std::set<Position>> before;
      for (const auto& p : probes) before.push_back(p->evicted);
      decoder.step(text[t]);
      for (std::uint32_t h = 0; h < model->config().head_count(); ++h) {
        const auto attended = decoder.attended(h);
        ASSERT_EQ(attended.back(), t) << name << ": the newest token attends to itself";
        for (const Position p : attended) {
          ASSERT_EQ(before[h].count(p), 0U)
              << name << ": head " << h << " attended position " << p << " at step " << t
              << " after evicting it";
        }
        // The policy saw the weights over the held positions, ascending.
        if (t > 0) {
          ASSERT_EQ(probes[h]->last_weights.size(), attended.size() - 1);
          for (std::size_t i = 0; i + 1 < attended.size(); ++i) {
            ASSERT_EQ(probes[h]->last_weights[i], decoder.attention(h)[i]);
          }
        }
        const auto held = decoder.held(h);
        ASSERT_LE(held.size(), static_cast<std::size_t>(kBudget));
        ASSERT_EQ(held.size(), probes[h]->kept_count());
        ASSERT_TRUE(std::is_sorted(held.begin(), held.end()));
        for (const Position p : held) ASSERT_EQ(probes[h]->evicted.count(p), 0U);
      }
    }
    EXPECT_EQ(decoder.evicted(), std::uint64_t{model->config().head_count()} * (200 - kBudget)) << name;
  }
}

// An independent, plain forward pass: every key and value stays in memory and
// an evicted position is masked out instead of removed. It takes each head's
// attended set from the decoder; the logits must agree, which they would not
// if the decoder rotated keys by their slot instead of their true position or
// mixed up which values belong to which position.
// With grouped-query attention the query heads of a group read one cache, and
// `mean_weights` receives, per step and cache, the mean of their softmax
// weights (what the decoder gives the cache's policy).
std::vector<std::vector<float>> masked_reference(const Model& model, std::span<const std::uint8_t> text,
                                                 const std::vector<std::vector<std::vector<Position>>>& masks,
                                                 std::vector<std::vector<std::vector<double>>>* mean_weights = nullptr) {
  const ModelConfig& c = model.config();
  const std::uint32_t d = c.head_dim(), half = d / 2, W = c.width, G = c.group();
  const std::uint32_t kv_rows = c.kv_heads * d;
  std::vector<std::vector<float>> keys(c.head_count()), values(c.head_count());
  std::vector<std::vector<float>> logits;
  auto norm = [&](const std::vector<float>& x, const float* w) {
    double s = 0;
    for (float v : x) s += double(v) * v;
    const double r = 1.0 / std::sqrt(s / W + c.norm_eps);
    std::vector<float> o(W);
    for (std::uint32_t i = 0; i < W; ++i) o[i] = float(x[i] * r * w[i]);
    return o;
  };
  // kvevict-tiny's matrices are float32 (Model::uses_kernels() is false).
  auto f32 = [](const WeightMatrix& m) { return reinterpret_cast<const float*>(m.data); };
  auto mat = [](const float* m, const std::vector<float>& x, std::size_t rows) {
    std::vector<float> y(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      double s = 0;
      for (std::size_t i = 0; i < x.size(); ++i) s += double(m[r * x.size() + i]) * x[i];
      y[r] = float(s);
    }
    return y;
  };
  for (std::uint32_t t = 0; t < text.size(); ++t) {
    std::vector<float> x(f32(model.embed()) + std::size_t{text[t]} * W, f32(model.embed()) + (std::size_t{text[t]} + 1) * W);
    for (std::uint32_t l = 0; l < c.layers; ++l) {
      const Model::Layer& w = model.layer(l);
      std::vector<float> qkv = mat(f32(w.q), norm(x, w.attn_norm), W + 2 * kv_rows);
      std::vector<float> out(W, 0.0F);
      auto rotate = [&](float* v) {
        for (std::uint32_t i = 0; i < half; ++i) {
          const double ang = t * std::pow(double(c.rope_base), -2.0 * i / d);
          const double cs = std::cos(ang), sn = std::sin(ang);
          const double a = v[i], b = v[i + half];
          v[i] = float(a * cs - b * sn);
          v[i + half] = float(a * sn + b * cs);
        }
      };
      if (mean_weights != nullptr && l == 0) mean_weights->emplace_back(c.head_count());
      for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) {
        const std::uint32_t h = l * c.kv_heads + kv;
        float* k = &qkv[W + kv * d];
        rotate(k);
        keys[h].insert(keys[h].end(), k, k + d);
        values[h].insert(values[h].end(), &qkv[W + kv_rows + kv * d], &qkv[W + kv_rows + kv * d] + d);
      }
      for (std::uint32_t hd = 0; hd < c.heads; ++hd) {
        const std::uint32_t h = l * c.kv_heads + hd / G;  // the cache this query head reads
        float* q = &qkv[hd * d];
        rotate(q);
        const std::vector<Position>& allowed = masks[t][h];
        std::vector<double> s;
        for (const Position p : allowed) {
          double dot = 0;
          for (std::uint32_t i = 0; i < d; ++i) dot += double(q[i]) * keys[h][p * d + i];
          s.push_back(dot / std::sqrt(double(d)));
        }
        const double top = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - top));
        for (std::size_t j = 0; j < allowed.size(); ++j) {
          for (std::uint32_t i = 0; i < d; ++i) out[hd * d + i] += float(s[j] / sum * values[h][allowed[j] * d + i]);
        }
        if (mean_weights != nullptr) {
          std::vector<double>& mw = mean_weights->back()[h];
          mw.resize(allowed.size(), 0.0);
          for (std::size_t j = 0; j < allowed.size(); ++j) mw[j] += s[j] / sum / G;
        }
      }
      std::vector<float> y = mat(f32(w.proj), out, W);
      for (std::uint32_t i = 0; i < W; ++i) x[i] += y[i];
      std::vector<float> u = mat(f32(w.up), norm(x, w.mlp_norm), c.ff);
      for (float& v : u) v = float(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
      y = mat(f32(w.down), u, W);
      for (std::uint32_t i = 0; i < W; ++i) x[i] += y[i];
    }
    logits.push_back(mat(f32(model.embed()), norm(x, model.final_norm()), c.vocab));
  }
  return logits;
}

TEST(Model, AnEvictingDecoderMatchesAPlainMaskedForwardPass) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(120);
  for (const char* name : {"scissorhands", "streaming-llm"}) {
    constexpr std::int64_t kBudget = 40;
    Decoder decoder(model, 120);
    const auto built = attach<Policy>(decoder, name, kBudget);
    std::vector<std::vector<float>> got;
    std::vector<std::vector<std::vector<Position>>> masks;
    for (const std::uint8_t b : text) {
      const auto logits = decoder.step(b);
      got.emplace_back(logits.begin(), logits.end());
      masks.emplace_back();
      for (std::uint32_t h = 0; h < model->config().head_count(); ++h) {
        const auto a = decoder.attended(h);
        masks.back().emplace_back(a.begin(), a.end());
      }
    }
    ASSERT_LT(masks.back().front().size(), text.size());  // it really evicted
    std::vector<std::vector<std::vector<double>>> mean_weights;
    const auto want = masked_reference(*model, text, masks, &mean_weights);
    double worst = 0.0;
    for (std::size_t t = 0; t < text.size(); ++t) {
      for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, double(std::abs(got[t][v] - want[t][v])));
    }
    EXPECT_LE(worst, 1e-4) << name;
    // The last step's weights each cache's policy saw: the mean over the
    // cache's query heads (one head per cache in a version-1 model).
    double worst_weight = 0.0;
    for (std::uint32_t h = 0; h < model->config().head_count(); ++h) {
      const auto seen = decoder.attention(h);
      ASSERT_EQ(seen.size(), mean_weights.back()[h].size()) << h;
      for (std::size_t j = 0; j < seen.size(); ++j) {
        worst_weight = std::max(worst_weight, std::abs(double(seen[j]) - mean_weights.back()[h][j]));
      }
    }
    EXPECT_LE(worst_weight, 1e-5) << name;
  }
}

TEST(Model, BudgetOneRunsAndHoldsOnePositionPerHead) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(64);
  for (const PolicyInfo* info : policies()) {
    try {
      info->make(head_params({info->name, {}, 1}, model->config(), 0));
    } catch (const ParameterError& e) {
      // A policy may refuse a budget its own windows cannot fit: cleanly, by name.
      EXPECT_NE(std::string(e.what()).find(info->title), std::string::npos) << e.what();
      EXPECT_THROW(perplexity(*model, text, {{info->name, {}, 1}}), ParameterError);
      continue;
    }
    const std::vector<PerplexityRow> rows = perplexity(*model, text, {{info->name, {}, 1}});
    EXPECT_TRUE(std::isfinite(rows[1].perplexity)) << info->name;
    EXPECT_EQ(rows[1].evicted, std::uint64_t{model->config().head_count()} * 62) << info->name;  // steps 1 ... 62, every head
  }
}

TEST(Model, RecordedAttentionReplaysAsATrace) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(96);
  const testing::ScratchFolder dir("kvevict-model-test");
  const std::filesystem::path file = dir / "attention.npy";
  EXPECT_EQ(record_attention(*model, text, file, false), 96U);
  EXPECT_THROW(record_attention(*model, text, file, false), InputError);  // never overwritten silently
  const auto heads = open_trace_heads(file.string());
  ASSERT_EQ(heads.size(), committed_model()->config().head_count());
  ASSERT_EQ(heads.front()->length(), 96U);
  // Row t over 0 ... t-1 plus the token's weight on itself make a softmax:
  // every recorded row sums to less than 1 and every weight is positive.
  for (const auto& h : heads) {
    h->rewind();
    for (std::uint32_t t = 1; t < 96; ++t) {
      const auto w = h->next();
      double sum = 0;
      for (const float v : w) {
        ASSERT_GT(v, 0.0F);
        sum += v;
      }
      ASSERT_LT(sum, 1.0);
    }
  }
  // The same weights the decoder reports, head 5 (layer 1, head 1), step 50.
  Decoder decoder(model);
  for (std::uint32_t t = 0; t <= 50; ++t) decoder.step(text[t]);
  heads[5]->rewind();
  std::span<const float> row;
  for (std::uint32_t t = 1; t <= 50; ++t) row = heads[5]->next();
  for (std::uint32_t i = 0; i < 50; ++i) EXPECT_EQ(row[i], decoder.attention(5)[i]);
  std::filesystem::remove(file);
}

// ---- bad weight files ---------------------------------------------------------

class BadWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    good = file_bytes(model_dir() / "kvevict-tiny.kvm");
    // One file per test: ctest runs the tests of this fixture in parallel.
    path = std::filesystem::temp_directory_path() /
           (std::string("kvevict-bad-weights-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".kvm");
  }
  void TearDown() override { std::filesystem::remove(path); }
  void expect_error(const std::vector<char>& bytes, const std::string& phrase) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    try {
      Model::load(path);
      ADD_FAILURE() << "loaded a bad file; expected: " << phrase;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path.string()), std::string::npos) << what;
      EXPECT_NE(what.find(phrase), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
    }
  }
  std::vector<char> good;
  std::filesystem::path path;
};

TEST_F(BadWeights, MissingFile) {
  EXPECT_THROW(Model::load(path), InputError);
}

TEST_F(BadWeights, WrongMagic) {
  std::vector<char> b = good;
  b[0] = 'X';
  expect_error(b, "not a kvevict model");
  expect_error(std::vector<char>{'h', 'i'}, "not a kvevict model");
}

TEST_F(BadWeights, TruncatedAnywhere) {
  for (const std::size_t keep : {std::size_t{12}, std::size_t{40}, good.size() / 2, good.size() - 1}) {
    expect_error(std::vector<char>(good.begin(), good.begin() + static_cast<long>(keep)), "truncated");
  }
}

TEST_F(BadWeights, TrailingBytes) {
  std::vector<char> b = good;
  b.push_back('\0');
  expect_error(b, "trailing bytes");
}

TEST_F(BadWeights, OneFlippedBitFailsTheChecksum) {
  std::vector<char> b = good;
  b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x10);
  expect_error(b, "checksum mismatch");
}

TEST_F(BadWeights, UnsupportedVersion) {
  std::vector<char> b = good;
  b[8] = 9;
  expect_error(b, "format version 9");
}

// The configuration words at body offsets 24 (KV heads; reserved in version
// 1) with the version set and the CRC-32 recomputed, so the header check is
// what refuses the file.
std::vector<char> with_header(std::vector<char> b, std::uint32_t version, std::uint32_t kv_word,
                              std::uint32_t reserved = 0) {
  auto put = [&](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  put(8, version);
  put(20 + 24, kv_word);
  put(20 + 28, reserved);
  const uLong crc = crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(b.data()), b.size() - 4);
  put(b.size() - 4, static_cast<std::uint32_t>(crc));
  return b;
}

TEST_F(BadWeights, KVHeadsMustDivideTheQueryHeadsAndVersionOneHasNone) {
  const std::uint32_t heads = committed_model()->config().heads;
  expect_error(with_header(good, 2, 0), "0 KV heads do not divide");
  expect_error(with_header(good, 2, heads + 1), fmt::format("{} KV heads do not divide {} query heads", heads + 1, heads));
  expect_error(with_header(good, 1, 3), "reserved word 3 is not 0 in a version-1 file");
}

// FORMAT.md: the word after the KV heads is reserved and must be 0, in both
// versions (it was read and ignored).
TEST_F(BadWeights, TheReservedWordMustBeZero) {
  const std::uint32_t kv = committed_model()->config().kv_heads;
  expect_error(with_header(good, 2, kv, 7), "the reserved word after the KV heads is 7; it must be 0");
  expect_error(with_header(good, 1, 0, 1), "the reserved word after the KV heads is 1; it must be 0");
}

TEST_F(BadWeights, TheQKVShapeFollowsTheKVHeads) {
  // The same tensors under a header that promises another grouping: the
  // fused q|k|v matrix no longer has the rows that grouping needs.
  const ModelConfig& c = committed_model()->config();
  ASSERT_GT(c.kv_heads, 1U) << "the test shrinks the grouping to one KV head";
  const std::uint32_t other = 1;
  expect_error(with_header(good, 2, other),
               fmt::format("tensor 'blocks.0.qkv' has shape [{}, {}], expected [{}, {}]",
                           (c.heads + 2 * c.kv_heads) * c.head_dim(), c.width,
                           (c.heads + 2 * other) * c.head_dim(), c.width));
}

TEST(Decoder, RefusesToRunPastItsCapacityAndLateOrBadPolicies) {
  const auto model = committed_model();
  Decoder decoder(model, 4);
  for (int i = 0; i < 4; ++i) decoder.step('a');
  EXPECT_THROW(decoder.step('a'), InputError);
  auto policy = make_policy("h2o");
  EXPECT_THROW(decoder.set_policy(0, policy.get(), 512), ContractError);  // after the first token
  Decoder fresh(model, 4);
  EXPECT_THROW(fresh.set_policy(99, policy.get(), 512), ContractError);
  EXPECT_THROW(fresh.set_policy(0, policy.get(), 0), ParameterError);
  EXPECT_THROW(Decoder(model, model->config().context + 1), InputError);
}

// A policy that throws in the middle of a step leaves the heads before it
// (their caches and their policies) a token ahead of the heads after it, and a
// policy cannot be rolled back, so the decoder refuses to go on until reset()
// instead of computing from caches that disagree.
TEST(Decoder, AStepThatAPolicyThrowsInRefusesFurtherStepsUntilReset) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(40);
  constexpr std::int64_t kBudget = 16;
  Decoder decoder(model, 64);
  auto probes = attach<Probe>(decoder, "tova", kBudget);
  probes[5]->throw_at = 20;  // layer 1, head 1: heads 0 ... 4 have seen position 20 by then
  for (std::uint32_t t = 0; t < 20; ++t) decoder.step(text[t]);
  try {
    decoder.step(text[20]);
    ADD_FAILURE() << "the probe did not throw";
  } catch (const ContractError& e) {
    EXPECT_STREQ(e.what(), "probe: refused position 20 on purpose");
  }
  EXPECT_EQ(decoder.position(), 20U);
  for (int again = 0; again < 2; ++again) {
    try {
      decoder.step(text[20]);
      ADD_FAILURE() << "a step after the failed one ran";
    } catch (const ContractError& e) {
      EXPECT_STREQ(e.what(),
                   "decoder: the step at position 20 failed (probe: refused position 20 on purpose), "
                   "leaving the heads' caches and policies out of step: call reset() and give new policies");
    }
  }
  EXPECT_EQ(decoder.position(), 20U);
  // reset() and new policies: the same logits as a decoder that never failed.
  decoder.reset();
  probes = attach<Probe>(decoder, "tova", kBudget);
  Decoder clean(model, 64);
  const auto clean_probes = attach<Probe>(clean, "tova", kBudget);
  for (std::uint32_t t = 0; t < text.size(); ++t) {
    const std::span<const float> got = decoder.step(text[t]);
    const std::vector<float> logits(got.begin(), got.end());
    const std::span<const float> want = clean.step(text[t]);
    ASSERT_EQ(logits, std::vector<float>(want.begin(), want.end())) << "step " << t;
  }
  EXPECT_EQ(decoder.evicted(), clean.evicted());
}

TEST(Text, TooShortOrMissingIsAClearError) {
  const testing::ScratchFolder dir("kvevict-model-test");
  const std::filesystem::path file = dir / "one-byte.txt";
  {
    std::ofstream out(file);
    out << "a";
  }
  EXPECT_THROW(read_text(file), InputError);
  EXPECT_THROW(read_text(file.string() + ".missing"), InputError);
}

TEST(Persistence, UniformAttentionNeverBeatsFairShareAndAStickyPositionAlwaysDoes) {
  MatrixTrace uniform("uniform", 40);
  MatrixTrace sticky("sticky", 40);
  for (std::uint32_t t = 1; t < 40; ++t) {
    auto u = uniform.row(t);
    std::fill(u.begin(), u.end(), 0.5F / static_cast<float>(t));  // below fair share
    auto s = sticky.row(t);
    std::fill(s.begin(), s.end(), 0.0F);
    s[0] = 1.0F;  // position 0 above fair share at every step
  }
  Trace* u = &uniform;
  auto rows = persistence(std::span<Trace* const>(&u, 1), {1, 8});
  EXPECT_EQ(rows[0].important, 0U);
  EXPECT_EQ(rows[0].share, 0.0);
  Trace* s = &sticky;
  rows = persistence(std::span<Trace* const>(&s, 1), {8, 1});
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows[0].lag, 1U);
  // At step 1 position 0 holds exactly its fair share 1/1, which is not above
  // it; from step 2 on it is above. Steps 2 ... 38 have a successor.
  EXPECT_EQ(rows[0].important, 37U);
  EXPECT_EQ(rows[0].share, 1.0);
  EXPECT_EQ(rows[1].important, 30U);  // steps 2 ... 31 have one 8 later
  EXPECT_EQ(rows[1].share, 1.0);
  // Chance level: one of t positions above fair share, averaged over t = 9 ... 39.
  double base = 0;
  for (int t = 9; t <= 39; ++t) base += 1.0 / t;
  EXPECT_NEAR(rows[1].base_rate, base / 31, 1e-12);
  EXPECT_THROW(persistence(std::span<Trace* const>(&s, 1), {39}), ParameterError);
  EXPECT_THROW(persistence(std::span<Trace* const>(&s, 1), {}), ParameterError);
}

}  // namespace
}  // namespace kvevict
