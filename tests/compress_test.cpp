// Compression once after a prefill, through the real decoder: what it keeps
// is the policy's prefill choice, a budget that holds the whole prefill
// changes nothing, and perplexity with a prefill scores only the bytes after
// it, with clear errors for requests it cannot serve.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/eviction/compress.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::committed_model;
using testing::heldout_prefix;

TEST(PrefillCompression, ASlidingWindowKeepsTheLastBudgetPositionsOfThePrefillInEveryCache) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(200);
  const RunSpec spec{"sliding-window", {}, 48};
  Decoder decoder(model, 200);
  PrefillCompressor compressor(model->config(), spec, 150, 32);
  for (std::uint32_t i = 0; i < 180; ++i) {
    decoder.step(text[i]);
    EXPECT_EQ(compressor.after_step(decoder, i), i == 149) << i;
    if (i < 149) continue;
    for (std::uint32_t h = 0; h < model->config().head_count(); ++h) {
      // Positions 102 ... 149 survive the compression, then every later byte stays.
      const auto held = decoder.held(h);
      ASSERT_EQ(held.size(), 48U + (i - 149)) << h;
      for (std::size_t k = 0; k < held.size(); ++k) ASSERT_EQ(held[k], 102 + k) << h;
    }
  }
  EXPECT_EQ(decoder.evicted(), std::uint64_t{model->config().head_count()} * (150 - 48));
}

// next_read names the bytes whose after_step reads the decoder, worked out
// by hand: a chunk's last `window` bytes record their rows, its last byte
// compresses; a policy that reads queries keeps every byte's.
TEST(PrefillCompression, NextReadIsTheFirstByteWhoseStepTheCompressionReads) {
  const auto model = committed_model();
  const RunSpec snapkv{"snapkv", {}, 48};
  const PrefillCompressor once(model->config(), snapkv, 150, 32);  // one chunk: rows from byte 118
  EXPECT_EQ(once.next_read(0), 118U);
  EXPECT_EQ(once.next_read(117), 118U);
  EXPECT_EQ(once.next_read(118), 118U);
  EXPECT_EQ(once.next_read(149), 149U);
  EXPECT_EQ(once.next_read(150), PrefillCompressor::kNone);
  const PrefillCompressor chunked(model->config(), snapkv, 150, 8, 64);  // chunks end at 64, 128, 150
  EXPECT_EQ(chunked.next_read(0), 56U);
  EXPECT_EQ(chunked.next_read(63), 63U);
  EXPECT_EQ(chunked.next_read(64), 120U);
  EXPECT_EQ(chunked.next_read(128), 142U);
  const PrefillCompressor queries(model->config(), RunSpec{"expected-attention", {}, 48}, 150, 32);
  EXPECT_EQ(queries.next_read(0), 0U);
  EXPECT_EQ(queries.next_read(77), 77U);
  EXPECT_EQ(queries.next_read(150), PrefillCompressor::kNone);
}

// Passes of several bytes (Decoder::prefill) that end where next_read says,
// with after_step called at each pass's end only, compress exactly as a step
// and an after_step a byte do.
TEST(PrefillCompression, PassesEndingWhereItReadsCompressAsStepsDo) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(200);
  const RunSpec snapkv{"snapkv", {{"obsWindow", 8}, {"recentWindow", 4}}, 40};
  Decoder stepped(model, 200);
  Decoder passed(model, DecoderOptions{.capacity = 200, .prefill_chunk = 64});
  PrefillCompressor a(model->config(), snapkv, 150, 8, 64);
  PrefillCompressor b(model->config(), snapkv, 150, 8, 64);
  for (std::uint32_t i = 0; i < 180; ++i) {
    stepped.step(text[i]);
    a.after_step(stepped, i);
  }
  std::size_t passes = 0;
  for (std::uint32_t i = 0; i < 180; ++passes) {
    std::uint32_t end = std::min(180U, i + 64);
    if (const std::uint32_t read = b.next_read(i); read != PrefillCompressor::kNone) end = std::min(end, read + 1);
    std::vector<Token> tokens(text.begin() + i, text.begin() + end);
    passed.prefill(tokens);
    b.after_step(passed, end - 1);
    i = end;
  }
  EXPECT_LT(passes, 60U) << "most bytes must go several a pass";
  EXPECT_GT(stepped.evicted(), 0U);
  EXPECT_EQ(passed.evicted(), stepped.evicted());
  for (std::uint32_t h = 0; h < model->config().head_count(); ++h) {
    EXPECT_TRUE(std::ranges::equal(passed.held(h), stepped.held(h))) << h;
  }
}

TEST(PrefillCompression, ABudgetThatHoldsThePrefillGivesTheFullCachesPerplexityExactly) {
  const std::vector<std::uint8_t> text = heldout_prefix(1500);  // windows of 1,024 and 476 bytes
  ModelRunOptions options;
  options.prefill = 400;
  std::vector<RunSpec> specs;
  for (const PolicyInfo* info : policies()) specs.push_back({info->name, {}, 400});
  const std::vector<PerplexityRow> rows = perplexity(*committed_model(), text, specs, options);
  ASSERT_EQ(rows.size(), specs.size() + 1);
  EXPECT_EQ(rows[0].predictions, (1024U - 1 - 400) + (476U - 1 - 400));
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].perplexity, rows[0].perplexity) << rows[i].policy;
    EXPECT_EQ(rows[i].evicted, 0U) << rows[i].policy;
    EXPECT_EQ(rows[i].predictions, rows[0].predictions);
  }
}

TEST(PrefillCompression, ASmallerBudgetEvictsOnceAWindowAndChangesThePerplexity) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(1500);
  ModelRunOptions options;
  options.prefill = 400;
  const std::vector<PerplexityRow> rows = perplexity(*model, text, {{"sliding-window", {}, 64}}, options);
  // Each of the two windows: every cache drops 400 - 64 positions, once.
  EXPECT_EQ(rows[1].evicted, 2U * model->config().head_count() * (400 - 64));
  EXPECT_NE(rows[1].perplexity, rows[0].perplexity);
  // Without the prefill the same run evicts while decoding, every step past 64.
  const std::vector<PerplexityRow> decode = perplexity(*model, text, {{"sliding-window", {}, 64}});
  EXPECT_EQ(decode[1].evicted, std::uint64_t{model->config().head_count()} * ((1023 - 64) + (475 - 64)));
}

TEST(PrefillCompression, RequestsItCannotServeAreClearErrors) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(600);
  ModelRunOptions options;
  options.prefill = model->config().context;
  EXPECT_THROW(perplexity(*model, text, {{"h2o", {}, 64}}, options), ParameterError);
  options.prefill = 700;  // longer than the text's one window
  EXPECT_THROW(perplexity(*model, text, {{"h2o", {}, 64}}, options), InputError);
  options.prefill = 300;
  options.paged.block_size = 16;
  EXPECT_THROW(perplexity(*model, text, {{"h2o", {}, 64}}, options), ParameterError);
  options.paged.block_size = 0;
  options.prefill_window = 0;
  EXPECT_THROW(perplexity(*model, text, {{"h2o", {}, 64}}, options), ParameterError);
}

// Refused before any work: the progress callback never runs. Both were once
// raised only after every window had been decoded (SnapKV's window inside
// the parallel jobs, nothing-to-predict at the end).
TEST(PrefillCompression, RequestsItCannotServeAreRefusedBeforeAnyWork) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(600);
  std::uint32_t calls = 0;
  ModelRunOptions options;
  options.progress = [&](std::uint32_t, std::uint32_t) { ++calls; };
  options.prefill = 599;  // the window's 599 predictions all fall inside the prefill
  try {
    perplexity(*model, text, {{"h2o", {}, 64}}, options);
    ADD_FAILURE() << "ran with nothing to predict";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--prefill (599) leaves nothing to predict"), std::string::npos) << e.what();
  }
  options.prefill = 300;
  try {
    perplexity(*model, text, {{"sliding-window", {}, 64}, {"snapkv", {{"recentWindow", 4}}, 16}}, options);
    ADD_FAILURE() << "a 32-row window over a budget of 16 ran";
  } catch (const ParameterError& e) {
    EXPECT_NE(std::string(e.what()).find("SnapKV prefill: the window (32 rows) is larger than the budget (16)"),
              std::string::npos)
        << e.what();
  }
  // PyramidKV's deepest layer at 40: max(floor(2*40*3/15), 4 + 1) = 16 < 32.
  EXPECT_THROW(perplexity(*model, text, {{"pyramidkv", {{"recentWindow", 4}}, 40}}, options), ParameterError);
  EXPECT_EQ(calls, 0U) << "a refused request did work first";
  // A prefill that fits in the budget compresses nothing: no window check.
  options.prefill = 12;
  options.max_windows = 1;
  EXPECT_NO_THROW(perplexity(*model, heldout_prefix(40), {{"snapkv", {{"recentWindow", 4}}, 16}}, options));
}

}  // namespace
}  // namespace kvevict
