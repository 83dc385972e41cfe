// Positions in the cache and decoding past the context (docs/streaming.md):
//  - a key shifted by delta positions (llama.cpp's K-shift) equals the same
//    key rotated at its new position directly, within float rounding, in both
//    rope layouts and with Llama-3 scaling;
//  - `cache` positions with nothing evicted are `original` positions, to the bit;
//  - in a one-layer model (keys and values depend on their token alone), a
//    cache whose policy keeps tokens S at indices 0 ... |S|-1 gives the logits
//    of a fresh full-cache decoder fed exactly S -- the reference for what
//    re-rotation must do, independent of how the decoder does it;
//  - a decoder with a policy runs past its capacity and the context, holding
//    at most budget + 1 positions; the full cache stops with one line;
//  - the stream's rows: segments tile the predictions, the full cache stops at
//    the context, the recomputed window costs what it says; bad requests refused.

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/arch/model_writer.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/evaluation/stream.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using testing::committed_model;
using testing::heldout_prefix;

// A random llama of `layers` layers (GGUF, NORMAL rope) in a scratch folder.
std::shared_ptr<const Model> random_llama(std::uint32_t layers, std::uint32_t context = 256) {
  static const testing::ScratchFolder cache("kvevict-stream-test");  // the process's models, removed as it exits
  const fs::path& dir = cache.path();
  const fs::path file = dir / ("llama-" + std::to_string(layers) + "-" + std::to_string(context) + ".gguf");
  if (!fs::exists(file)) {
    RandomModelSpec s;
    s.layers = layers;
    s.width = 64;
    s.heads = 4;
    s.kv_heads = 2;
    s.ff = 96;
    s.context = context;
    s.merges = 64;
    const std::vector<std::uint8_t> text = heldout_prefix(4000);
    s.tokenizer_text.assign(text.begin(), text.end());
    write_random_model(s, file, true);
  }
  return Model::load(file);
}

std::vector<Token> tokens_of(const Model& model, std::size_t count) {
  const std::vector<Token> all = sequence_tokens(model, heldout_prefix(16384));
  EXPECT_GE(all.size(), count);
  return {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(count, all.size()))};
}

std::vector<float> unit_vector(std::uint32_t d, std::uint32_t seed) {
  std::vector<float> v(d);
  for (std::uint32_t i = 0; i < d; ++i) v[i] = std::sin(0.7F * static_cast<float>(i + 1) * static_cast<float>(seed));
  return v;
}

TEST(Rope, ShiftedKeyEqualsKeyRotatedAtItsNewPosition) {
  const std::vector<float> divisors = {1.0F, 1.5F, 2.0F, 4.0F, 6.0F, 8.0F, 8.0F, 8.0F};
  for (const RopeMode mode : {RopeMode::kNeox, RopeMode::kNormal}) {
    for (const bool scaled : {false, true}) {
      Rope rope(16, 10000.0F, mode, scaled ? std::span<const float>(divisors) : std::span<const float>{}, 64);
      for (const std::uint64_t p : {0ULL, 5ULL, 63ULL, 1000ULL, 40000ULL}) {
        for (const std::int64_t delta : {-5LL, -1LL, 1LL, 37LL}) {
          if (static_cast<std::int64_t>(p) + delta < 0) continue;
          std::vector<float> shifted = unit_vector(16, 3);
          rope.rotate(shifted.data(), p);
          rope.shift(shifted.data(), delta);
          std::vector<float> direct = unit_vector(16, 3);
          rope.rotate(direct.data(), static_cast<std::uint64_t>(static_cast<std::int64_t>(p) + delta));
          for (std::size_t i = 0; i < direct.size(); ++i) {
            // |v| <= 1: two roundings of a product of unit-size numbers, and
            // angles of ~4e4 radians carry float64's 1e-12 relative error.
            EXPECT_NEAR(shifted[i], direct[i], 2e-6) << "mode " << int(mode) << " p " << p << " delta " << delta;
          }
        }
      }
      // A wrong shift is not within that tolerance: the test can fail.
      std::vector<float> a = unit_vector(16, 3), b = unit_vector(16, 3);
      rope.rotate(a.data(), 10);
      rope.shift(a.data(), 1);
      rope.rotate(b.data(), 10);
      float most = 0.0F;
      for (std::size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
      EXPECT_GT(most, 1e-2F);
    }
  }
}

TEST(Rope, PositionsPastTheTableUseTheTablesArithmetic) {
  Rope tabled(16, 500000.0F, RopeMode::kNormal, {}, 4096);
  Rope untabled(16, 500000.0F, RopeMode::kNormal, {}, 1);
  for (const std::uint64_t p : {1ULL, 17ULL, 4095ULL}) {
    std::vector<float> a = unit_vector(16, 5), b = unit_vector(16, 5);
    tabled.rotate(a.data(), p, 0.25F);
    untabled.rotate(b.data(), p, 0.25F);
    EXPECT_EQ(a, b) << p;
  }
}

TEST(Rope, PositionModesParseAndRefuseOthers) {
  EXPECT_EQ(parse_position_mode("original"), PositionMode::kOriginal);
  EXPECT_EQ(parse_position_mode("cache"), PositionMode::kCache);
  EXPECT_EQ(position_mode_name(PositionMode::kCache), "cache");
  testing::expect_error<InputError>([] { (void)parse_position_mode("absolute"); },
                                    "positions 'absolute': expected 'original' (a key at its token's position) or "
                                    "'cache' (at its index among the positions held)");
}

std::vector<float> run(const std::shared_ptr<const Model>& model, const std::vector<Token>& tokens,
                       PositionMode mode, const RunSpec* spec, std::uint32_t capacity, KvFormat kv = {},
                       std::uint32_t block_size = 0) {
  DecoderOptions options;
  options.capacity = capacity;
  options.positions = mode;
  options.kv = kv;
  options.block_size = block_size;
  Decoder decoder(model, options);
  DecoderPolicies policies;
  if (spec != nullptr) {
    policies = DecoderPolicies(*spec, model->config(), PagedOptions{});
    policies.attach(decoder);
  }
  std::vector<float> out;
  for (const Token t : tokens) {
    const auto l = decoder.step(t);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

TEST(StreamPositions, CachePositionsWithoutEvictionAreOriginalToTheBit) {
  for (const auto& model : {committed_model(), random_llama(2)}) {
    const std::vector<Token> tokens = tokens_of(*model, 200);
    const std::uint32_t cap = static_cast<std::uint32_t>(tokens.size());
    EXPECT_EQ(run(model, tokens, PositionMode::kCache, nullptr, cap),
              run(model, tokens, PositionMode::kOriginal, nullptr, cap))
        << model->config().architecture;
    // A budget the sequence never reaches: a policy that evicts nothing.
    const RunSpec spec{"h2o", {}, std::int64_t{model->config().context} - 1};
    EXPECT_EQ(run(model, tokens, PositionMode::kCache, &spec, cap),
              run(model, tokens, PositionMode::kOriginal, nullptr, cap));
  }
}

TEST(StreamPositions, PagedAndContiguousStoresAgreeUnderCachePositions) {
  const auto model = committed_model();
  const std::vector<Token> tokens = tokens_of(*model, 300);
  const RunSpec spec{"h2o", {}, 64};
  EXPECT_EQ(run(model, tokens, PositionMode::kCache, &spec, 300, {}, 0),
            run(model, tokens, PositionMode::kCache, &spec, 300, {}, 16));
}

// The logits of a fresh full-cache decoder fed `kept` (which end with the newest token).
std::vector<float> fresh(const std::shared_ptr<const Model>& model, const std::vector<Token>& kept) {
  const std::vector<float> all = run(model, kept, PositionMode::kOriginal, nullptr,
                                     static_cast<std::uint32_t>(kept.size()));
  return {all.end() - model->config().vocab, all.end()};
}

TEST(StreamPositions, OneLayerCacheIndicesEqualAFreshDecoderOverTheKeptTokens) {
  const auto model = random_llama(1);
  const std::uint32_t vocab = model->config().vocab;
  const std::vector<Token> tokens = tokens_of(*model, 120);
  struct Case {
    RunSpec spec;
    std::uint32_t sinks;
  };
  const std::vector<Case> cases = {{{"sliding-window", {}, 24}, 0},
                                   {{"streaming-llm", {{"sinks", 4}}, 24}, 4},
                                   {{"streaming-llm", {{"sinks", 1}}, 24}, 1}};
  for (const Case& c : cases) {
    const std::vector<float> cache = run(model, tokens, PositionMode::kCache, &c.spec, 25);
    const std::vector<float> original = run(model, tokens, PositionMode::kOriginal, &c.spec, 25);
    double moved = 0.0;  // how far original positions are from the reference once tokens leave
    for (std::size_t t = 30; t < tokens.size(); t += 7) {
      // Token t attends before its step's eviction: to what the policy kept
      // after token t-1 (the sinks, then the newest 24 - sinks) and to itself.
      const std::size_t recent = 24 - c.sinks + 1;
      std::vector<Token> kept(tokens.begin(), tokens.begin() + c.sinks);
      kept.insert(kept.end(), tokens.begin() + static_cast<std::ptrdiff_t>(t + 1 - recent),
                  tokens.begin() + static_cast<std::ptrdiff_t>(t + 1));
      ASSERT_EQ(kept.size(), 25U);
      const std::vector<float> want = fresh(model, kept);
      for (std::uint32_t i = 0; i < vocab; ++i) {
        ASSERT_NEAR(cache[t * vocab + i], want[i], 1e-5F * std::max(1.0F, std::abs(want[i])))
            << c.spec.policy << " sinks " << c.sinks << " t " << t << " logit " << i;
        moved = std::max(moved, static_cast<double>(std::abs(original[t * vocab + i] - want[i])));
      }
    }
    // Without sinks the window's relative distances are the same either way;
    // with sinks, original positions put them far away: a different result.
    if (c.sinks == 0) {
      EXPECT_LT(moved, 1e-3) << "a sliding window sees the same relative positions";
    } else {
      EXPECT_GT(moved, 1e-3) << c.spec.policy << " sinks " << c.sinks;
    }
  }
}

TEST(StreamPositions, QuantizedStoresRotateAfterDecodingWithinTheirOwnError) {
  const auto model = committed_model();
  const std::vector<Token> tokens = tokens_of(*model, 160);
  const std::vector<float> exact = run(model, tokens, PositionMode::kOriginal, nullptr, 160);
  for (const KvPrecision p : {KvPrecision::kFp16, KvPrecision::kInt8, KvPrecision::kInt4}) {
    KvFormat kv;
    kv.precision = p;
    const std::vector<float> original = run(model, tokens, PositionMode::kOriginal, nullptr, 160, kv);
    const std::vector<float> cache = run(model, tokens, PositionMode::kCache, nullptr, 160, kv);
    double err_original = 0.0, err_cache = 0.0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      err_original = std::max(err_original, static_cast<double>(std::abs(original[i] - exact[i])));
      err_cache = std::max(err_cache, static_cast<double>(std::abs(cache[i] - exact[i])));
    }
    // Quantizing keys before rotation is its own error, of the same size.
    EXPECT_LE(err_cache, 3.0 * err_original + 1e-4) << precision_name(p);
    EXPECT_GT(err_original, 0.0) << precision_name(p) << ": the test needs a lossy store";
  }
}

TEST(StreamPositions, DecodesPastTheCapacityAndTheContextWithAPolicy) {
  const auto model = random_llama(2, 64);
  const std::vector<Token> tokens = tokens_of(*model, 64 * 5);
  ASSERT_EQ(tokens.size(), 320U);
  for (const PositionMode mode : {PositionMode::kOriginal, PositionMode::kCache}) {
    DecoderOptions options;
    options.capacity = 17;
    options.positions = mode;
    Decoder decoder(model, options);
    const RunSpec spec{"streaming-llm", {{"sinks", 4}}, 16};
    DecoderPolicies policies(spec, model->config(), PagedOptions{});
    policies.attach(decoder);
    for (const Token t : tokens) {
      const auto logits = decoder.step(t);
      for (const float l : logits) ASSERT_TRUE(std::isfinite(l));
    }
    EXPECT_EQ(decoder.position(), 320U);
    EXPECT_EQ(decoder.store().peak_cache, 17U);  // the budget and the newest token
    const auto held = decoder.held(0);
    ASSERT_EQ(held.size(), 16U);
    EXPECT_EQ(held[3], 3U);     // the sinks
    EXPECT_EQ(held[4], 308U);   // then the newest twelve
    EXPECT_EQ(held[15], 319U);
  }
  // The full cache stops at its capacity, saying why, and stays usable.
  Decoder full(model, 8);
  for (std::uint32_t i = 0; i < 8; ++i) full.step(tokens[i]);
  testing::expect_error<InputError>(
      [&] { full.step(tokens[8]); },
      "decoder: position 8 is past the capacity of 8 positions (cache 0 is full: a cache without a policy, or with "
      "a budget of the capacity or more, ends there)");
  full.reset();
  EXPECT_NO_THROW(full.step(tokens[0]));
}

TEST(Stream, SegmentsTileThePredictionsAndTheFullCacheStopsAtTheContext) {
  const auto model = committed_model();  // bytes: a token is a byte
  const std::uint32_t context = model->config().context;
  StreamRequest request;
  request.specs = stream_specs("sliding-window,streaming-llm:sinks=4", std::vector<std::int64_t>{64});
  request.tokens = 3 * context + 100;
  const std::vector<std::uint8_t> text = heldout_prefix(16384);
  const std::vector<StreamRow> rows = stream_perplexity(*model, text, request);
  ASSERT_EQ(rows.size(), 5U);  // full cache, then 2 policies x 2 position modes
  EXPECT_EQ(rows[0].policy, "");
  EXPECT_EQ(rows[0].tokens, context);
  EXPECT_EQ(rows[0].predictions, context - 1);
  ASSERT_EQ(rows[0].segments.size(), 1U);
  EXPECT_EQ(stream_label(rows[2]), "sliding-window");
  EXPECT_EQ(rows[2].positions, PositionMode::kCache);
  EXPECT_EQ(stream_label(rows[3]), "streaming-llm sinks=4");
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const StreamRow& row = rows[r];
    EXPECT_EQ(row.tokens, request.tokens);
    EXPECT_EQ(row.predictions, request.tokens - 1);
    EXPECT_EQ(row.bytes, request.tokens - 1);
    EXPECT_EQ(row.peak_positions, 65U);
    EXPECT_EQ(row.past_trained_context, row.positions == PositionMode::kOriginal);
    ASSERT_EQ(row.segments.size(), 4U);
    std::uint64_t predictions = 0;
    double nll = 0.0;
    for (std::size_t s = 0; s < row.segments.size(); ++s) {
      EXPECT_EQ(row.segments[s].begin, s * context);
      predictions += row.segments[s].predictions;
      nll += row.segments[s].nll;
    }
    EXPECT_EQ(row.segments[0].predictions, context - 1);  // position 0 is never predicted
    EXPECT_EQ(row.segments[3].predictions, 100U);
    EXPECT_EQ(predictions, row.predictions);
    EXPECT_NEAR(nll, row.nll, 1e-9 * row.nll);
    EXPECT_NEAR(stream_span_bits_per_byte(row, 0, 4), row.bits_per_byte, 1e-12);
  }
  // The full cache has no second segment: a span past where it stopped is refused (negative).
  EXPECT_LT(stream_span_bits_per_byte(rows[0], 1, 2), 0.0);
}

TEST(Stream, TheRecomputedWindowPredictsFromTheLastTokensOnly) {
  const auto model = committed_model();
  StreamRequest request;
  request.full_cache = false;
  request.recompute_window = 32;
  request.recompute_tokens = 80;
  request.segment = 40;
  const std::vector<std::uint8_t> text = heldout_prefix(4096);
  const std::vector<StreamRow> rows = stream_perplexity(*model, text, request);
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_EQ(rows[0].policy, "recompute");
  EXPECT_EQ(rows[0].predictions, 79U);
  ASSERT_EQ(rows[0].segments.size(), 2U);
  // Token 79 predicted from tokens 47 ... 78 on a fresh cache: the same
  // negative log-likelihood as a fresh decoder computes by hand.
  const std::vector<Token> tokens = sequence_tokens(*model, text);
  const std::vector<Token> last(tokens.begin() + 47, tokens.begin() + 79);
  const std::vector<float> logits = fresh(model, last);
  double top = logits[0], sum = 0.0;
  for (const float l : logits) top = std::max(top, static_cast<double>(l));
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - top);
  const double nll79 = std::log(sum) + top - logits[tokens[79]];
  // Segment 1 holds tokens 40 ... 79; recompute it from fresh decoders.
  double segment1 = 0.0;
  for (std::size_t t = 40; t < 80; ++t) {
    const std::vector<Token> window(tokens.begin() + static_cast<std::ptrdiff_t>(t - 32),
                                    tokens.begin() + static_cast<std::ptrdiff_t>(t));
    const std::vector<float> l = fresh(model, window);
    double m = l[0], s = 0.0;
    for (const float v : l) m = std::max(m, static_cast<double>(v));
    for (const float v : l) s += std::exp(static_cast<double>(v) - m);
    segment1 += std::log(s) + m - l[tokens[t]];
  }
  EXPECT_GT(nll79, 0.0);
  EXPECT_DOUBLE_EQ(rows[0].segments[1].nll, segment1);
}

TEST(Stream, BadRequestsAreRefusedBeforeAnyWork) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(2048);
  StreamRequest request;
  request.tokens = 5000;
  testing::expect_error<InputError>(
      [&] { (void)stream_perplexity(*model, text, request); },
      "the stream asks for 5000 tokens, but the text makes 2048 (BOS included where the model adds it): give a "
      "longer text or fewer tokens");
  request.tokens = 0;
  request.specs = stream_specs("h2o", std::vector<std::int64_t>{1024});
  testing::expect_error<ParameterError>(
      [&] { (void)stream_perplexity(*model, text, request); },
      "h2o: budget (1024) must be 1 ... 1023: a cache holds the budget and the new token, within the model's "
      "context of 1024 positions");
  testing::expect_error<ParameterError>([&] { (void)stream_specs("h2o:sink=4", std::vector<std::int64_t>{64}); },
                                        "--policy h2o:sink=4: h2o has no parameter 'sink': did you mean 'sinks'?");
  ModelRunOptions windows;
  windows.max_windows = 2;
  request.specs.clear();
  testing::expect_error<ParameterError>([&] { (void)stream_perplexity(*model, text, request, windows); },
                                        "a stream has no windows: --max-windows does not apply");
}

TEST(Stream, DefaultPoliciesAreTheDocumentedSet) {
  const std::vector<RunSpec> specs = stream_specs("default", std::vector<std::int64_t>{256, 512});
  ASSERT_EQ(specs.size(), 14U);
  EXPECT_EQ(specs[0].policy, "sliding-window");
  EXPECT_EQ(specs[2].policy, "streaming-llm");
  EXPECT_EQ(specs[2].params, (ParamMap{{"sinks", 1}}));
  EXPECT_EQ(specs[4].params, (ParamMap{{"sinks", 4}}));
  EXPECT_EQ(specs[13].policy, "snapkv");
  EXPECT_EQ(specs[13].budget, 512);
}

TEST(Stream, SinkSharesAreSharesOfEachStep) {
  const auto model = committed_model();
  const std::vector<SinkShare> shares = sink_shares(*model, heldout_prefix(4096), 256);
  ASSERT_EQ(shares.size(), model->config().layers);
  for (const SinkShare& s : shares) {
    EXPECT_GE(s.first, 0.0);
    EXPECT_LE(s.first, s.first_four);
    EXPECT_LE(s.first_four, 1.0);
    // Spread evenly: the mean of 1/(t+1) over t = 16 ... 255, worked out here.
    double even = 0.0;
    for (int t = 16; t < 256; ++t) even += 1.0 / (t + 1);
    EXPECT_NEAR(s.even_first, even / 240.0, 1e-12);
    EXPECT_NEAR(s.even_first_four, 4.0 * even / 240.0, 1e-12);
  }
}

}  // namespace
}  // namespace kvevict
