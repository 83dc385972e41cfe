#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/streaming_llm.h"
#include "support.h"

namespace kvevict {
namespace {

std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }

TEST(StreamingLLM, SinksArePinnedAndTheWindowSlides) {
  StreamingLLM p({.budget = 4, .sinks = 2});
  EXPECT_EQ(p.sink_count(), 1);  // position 0 is a held sink
  for (std::int64_t t = 1; t <= 4; ++t) p.on_decode_step(t, std::nullopt);
  EXPECT_EQ(p.sink_count(), 2);
  EXPECT_EQ(p.kept_count(), 5U);
  EXPECT_EQ(victims(p.evict(4)), (std::vector<Position>{2}));
  p.on_decode_step(5, std::nullopt);
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{3, 4}));
  EXPECT_EQ(p.kept_count(), 3U);  // sinks 0, 1 and position 5
}

TEST(StreamingLLM, ABudgetBelowTheSinksEmptiesTheWindowAndStops) {
  StreamingLLM p({.budget = 4, .sinks = 3});
  for (std::int64_t t = 1; t <= 4; ++t) p.on_decode_step(t, std::nullopt);
  EXPECT_EQ(victims(p.evict(1)), (std::vector<Position>{3, 4}));
  EXPECT_EQ(p.kept_count(), 3U);
}

TEST(StreamingLLM, Rules) {
  try {
    StreamingLLM p({.budget = 4, .sinks = 4});
    FAIL();
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "StreamingLLM: sinks (4) must be smaller than budget (4): no room would "
                           "be left for a recency window");
  }
  EXPECT_THROW(StreamingLLM({.budget = 4, .sinks = -1}), ParameterError);
  EXPECT_EQ(StreamingLLM({.budget = 512, .sinks = 4}).memory_bytes(), 4U * 509U);
}

TEST(StreamingLLM, OnlyTheWindowIsBounded) {
  StreamingLLM p({.budget = 3, .sinks = 2});
  p.on_decode_step(1, std::nullopt);  // sink
  p.on_decode_step(2, std::nullopt);  // window 1
  p.on_decode_step(3, std::nullopt);  // window 2 = budget - sinks + 1
  EXPECT_THROW(p.on_decode_step(4, std::nullopt), ContractError);
  EXPECT_EQ(p.kept_count(), 4U);
}

TEST(StreamingLLMCanonical, ZeroSinksIsExactlyASlidingWindow) {
  for (const std::int64_t b : {256, 512, 1024}) {
    const RunRow zero = testing::run_one("streaming-llm", {{"sinks", 0}}, b);
    const RunRow& window = testing::canonical_row("sliding-window", b);
    EXPECT_EQ(zero.totals.total_retained_mass, window.totals.total_retained_mass);
    EXPECT_EQ(zero.totals.total_heavy_hits, window.totals.total_heavy_hits);
    EXPECT_EQ(zero.totals.eviction_calls, window.totals.eviction_calls);
  }
}

TEST(StreamingLLMCanonical, SinksClearlyBeatASinklessWindowAt256) {
  const auto& with_sinks = testing::canonical_row("streaming-llm", 256).metrics;
  const auto& window = testing::canonical_row("sliding-window", 256).metrics;
  EXPECT_GT(with_sinks.retained_attention_mass - window.retained_attention_mass, 0.1);
  EXPECT_GT(with_sinks.heavy_hitter_recall - window.heavy_hitter_recall, 0.1);
}

}  // namespace
}  // namespace kvevict
