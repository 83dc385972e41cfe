#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include <omp.h>

#include "kvevict/core/errors.h"
#include "kvevict/eval/harness.h"
#include "kvevict/core/policies/pyramidkv.h"
#include "kvevict/core/policies/sliding_window.h"
#include "kvevict/core/registry.h"
#include "support.h"

namespace kvevict {
namespace {

// A test double whose victims are chosen by the test.
class ScriptedPolicy final : public Policy {
 public:
  using Chooser = std::function<std::vector<Position>(std::uint32_t newest)>;
  explicit ScriptedPolicy(Chooser choose) : choose_(std::move(choose)) {}
  std::string_view name() const noexcept override { return "scripted"; }
  void on_decode_step(std::int64_t pos, Attention) override {
    newest_ = static_cast<std::uint32_t>(pos);
    ++kept_;
  }
  std::span<const Position> evict(std::int64_t) override {
    victims_ = choose_(newest_);
    kept_ -= victims_.size();
    return victims_;
  }
  std::size_t kept_count() const noexcept override { return kept_; }
  std::size_t memory_bytes() const noexcept override { return 0; }

 private:
  Chooser choose_;
  std::uint32_t newest_ = 0;
  std::size_t kept_ = 1;
  std::vector<Position> victims_;
};

std::string error_of(Policy& p, std::int64_t budget, std::int64_t steps) {
  DecodeTrace trace;
  try {
    run(p, trace, budget, steps);
  } catch (const ContractError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Harness, BudgetFirstBindsAtStepBudget) {
  // Budget 64 over 300 steps, one victim per call: 300 - 64 + 1 = 237.
  SlidingWindow window({.budget = 64});
  DecodeTrace trace;
  const RunTotals t = run(window, trace, 64, 300);
  EXPECT_EQ(t.steps, 300);
  EXPECT_EQ(t.eviction_calls, 237);
  EXPECT_EQ(t.evicted, 237);
  SlidingWindow shorter({.budget = 64});
  EXPECT_EQ(run(shorter, trace, 64, 63).eviction_calls, 0);
  SlidingWindow exact({.budget = 64});
  EXPECT_EQ(run(exact, trace, 64, 64).eviction_calls, 1);
}

TEST(Harness, WholeTraceCountsAreFixedByTheSpec) {
  for (const std::int64_t b : {256, 512, 1024}) {
    const RunRow& row = testing::canonical_row("scissorhands", b);
    EXPECT_EQ(row.totals.eviction_calls, 4096 - b);
    EXPECT_EQ(row.totals.total_heavy_possible, 130544);
    EXPECT_EQ(row.totals.steps, 4095);
  }
}

TEST(Harness, ABudgetThatNeverBindsKeepsEverything) {
  const RunRow row = testing::run_one("h2o", {}, 4096, 200);
  EXPECT_EQ(row.metrics.retained_attention_mass, 1.0);
  EXPECT_EQ(row.metrics.heavy_hitter_recall, 1.0);
  EXPECT_EQ(row.metrics.eviction_calls, 0);
}

TEST(Harness, ADeepPyramidLayerDropsToItsShareInBatches) {
  const RunRow row = testing::run_one("pyramidkv", {{"layer", 3}, {"numLayers", 4}}, 512);
  EXPECT_EQ(row.totals.eviction_calls, 12);
  EXPECT_EQ(row.totals.evicted, 3708);
}

TEST(Harness, BudgetBelowOneIsRefused) {
  SlidingWindow window({.budget = 4});
  DecodeTrace trace;
  EXPECT_THROW(run(window, trace, 0, 10), ParameterError);
}

TEST(Harness, StepsBeyondTheTraceAreRefused) {
  SlidingWindow window({.budget = 4});
  DecodeTrace trace;
  EXPECT_THROW(run(window, trace, 4, 5000), InputError);
}

TEST(Harness, AVictimOutsideTheSequenceIsNamed) {
  ScriptedPolicy p([](std::uint32_t) { return std::vector<Position>{9000}; });
  EXPECT_EQ(error_of(p, 2, 5), "scripted: victim 9000 at step 2 is outside the sequence (0 ... 4095)");
}

TEST(Harness, AVictimNotHeldIsNamed) {
  // At step 3 with budget 2 the harness holds 1, 2, 3 after step 2 evicted 0.
  ScriptedPolicy p([](std::uint32_t) { return std::vector<Position>{0}; });
  EXPECT_EQ(error_of(p, 2, 5), "scripted: victim 0 at step 3 is not held");
}

TEST(Harness, ADuplicateVictimFailsOnItsSecondOccurrence) {
  ScriptedPolicy p([](std::uint32_t) { return std::vector<Position>{1, 1}; });
  EXPECT_EQ(error_of(p, 2, 5), "scripted: victim 1 at step 2 is not held");
}

TEST(Harness, TooFewVictimsAreReported) {
  ScriptedPolicy p([](std::uint32_t) { return std::vector<Position>{}; });
  EXPECT_EQ(error_of(p, 2, 5),
            "scripted: returned 0 positions at step 2, leaving 3 held against a budget of 2");
}

TEST(Harness, RunManyFeedsEveryRunTheSameSteps) {
  // Two runs in one pass give exactly what two separate runs give.
  auto a = make_policy("scissorhands", {{"budget", 128}});
  auto b = make_policy("h2o", {{"budget", 64}});
  DecodeTrace trace;
  const RunSlot slots[] = {{a.get(), 128}, {b.get(), 64}};
  const auto both = run_many(slots, trace, 700);
  auto a2 = make_policy("scissorhands", {{"budget", 128}});
  auto b2 = make_policy("h2o", {{"budget", 64}});
  const RunTotals ra = run(*a2, trace, 128, 700);
  const RunTotals rb = run(*b2, trace, 64, 700);
  EXPECT_EQ(both[0].total_retained_mass, ra.total_retained_mass);
  EXPECT_EQ(both[0].total_heavy_hits, ra.total_heavy_hits);
  EXPECT_EQ(both[1].total_retained_mass, rb.total_retained_mass);
  EXPECT_EQ(both[1].total_heavy_hits, rb.total_heavy_hits);
}

// The 21 canonical runs in one pass, on one thread or spread over several
// (run_many's chunks): the same totals to the bit, and a run's error the same
// one the serial loop throws.
std::vector<RunTotals> canonical_pass(int threads, std::int64_t steps, Policy* failing = nullptr) {
  std::vector<std::unique_ptr<Policy>> built;
  std::vector<RunSlot> slots;
  for (const PolicyInfo* info : policies()) {
    if ((info->signals & ~kSignalAttention) != 0) continue;
    for (const std::int64_t b : {256, 512, 1024}) {
      built.push_back(info->make({{"budget", b}}));
      slots.push_back({built.back().get(), b});
    }
  }
  if (failing != nullptr) slots.insert(slots.begin() + 5, RunSlot{failing, 2});
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  DecodeTrace trace;
  try {
    auto totals = run_many(slots, trace, steps);
    omp_set_num_threads(before);
    return totals;
  } catch (...) {
    omp_set_num_threads(before);
    throw;
  }
}

TEST(Harness, RunsSpreadOverCoresGiveTheSerialTotals) {
  // 600 steps: the chunks of 256 steps end mid-trace, twice and a part.
  const auto serial = canonical_pass(1, 600);
  const auto spread = canonical_pass(2, 600);
  ASSERT_EQ(serial.size(), 21U);
  ASSERT_EQ(spread.size(), serial.size());
  for (std::size_t i = 0; i < serial.size(); ++i) {
    EXPECT_EQ(spread[i].total_retained_mass, serial[i].total_retained_mass) << i;
    EXPECT_EQ(spread[i].total_heavy_hits, serial[i].total_heavy_hits) << i;
    EXPECT_EQ(spread[i].total_heavy_possible, serial[i].total_heavy_possible) << i;
    EXPECT_EQ(spread[i].eviction_calls, serial[i].eviction_calls) << i;
    EXPECT_EQ(spread[i].evicted, serial[i].evicted) << i;
    EXPECT_EQ(spread[i].steps, 600);
  }
}

TEST(Harness, ARunsErrorIsTheSerialOneWhenRunsAreSpread) {
  // A run that fails at step 300 (the second chunk), among the 21.
  for (const int threads : {1, 2}) {
    ScriptedPolicy p([](std::uint32_t newest) {
      return newest == 300 ? std::vector<Position>{0} : std::vector<Position>{newest - 2};
    });
    try {
      (void)canonical_pass(threads, 600, &p);
      ADD_FAILURE() << threads << " threads: no error";
    } catch (const ContractError& e) {
      EXPECT_STREQ(e.what(), "scripted: victim 0 at step 300 is not held") << threads << " threads";
    }
  }
}

TEST(Metrics, Round6IsHalfUpNotBankers) {
  // 2.5e-6 * 1e6 is exactly 2.5 in double: half-up gives 3e-6, banker's 2e-6.
  EXPECT_EQ(round6(0.0000025), 0.000003);
  EXPECT_EQ(round6(0.1234564), 0.123456);
  EXPECT_EQ(round6(0.1234566), 0.123457);
  EXPECT_TRUE(std::isnan(round6(NAN)));
  EXPECT_EQ(round6(INFINITY), INFINITY);
}

TEST(Metrics, EmptyRunsGiveZero) {
  const Metrics m = metrics_of(RunTotals{});
  EXPECT_EQ(m.retained_attention_mass, 0.0);
  EXPECT_EQ(m.heavy_hitter_recall, 0.0);
  EXPECT_EQ(m.eviction_calls, 0);
}

TEST(Metrics, RecallPoolsHitsOverPossible) {
  RunTotals t;
  t.steps = 4;
  t.total_retained_mass = 3.0;
  t.total_heavy_hits = 1;
  t.total_heavy_possible = 3;
  const Metrics m = metrics_of(t);
  EXPECT_EQ(m.retained_attention_mass, 0.75);
  EXPECT_EQ(m.heavy_hitter_recall, 0.333333);
}

}  // namespace
}  // namespace kvevict
