// The two generated workloads beyond the canonical trace (docs/traces.md):
// their check hashes, their spike tokens, and the direction and rough size
// of the Scissorhands-versus-H2O difference each was built to show.
#include <gtest/gtest.h>

#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/trace.h"

namespace kvevict {
namespace {

std::vector<RunRow> sh_and_h2o(const std::string& trace) {
  CompareRequest request;
  request.policies = {"scissorhands", "h2o"};
  EvaluateOptions options;
  options.trace = trace;
  return compare(request, options);
}

const Metrics& metrics(const std::vector<RunRow>& rows, const std::string& policy, std::int64_t budget) {
  for (const RunRow& r : rows) {
    if (r.policy == policy && r.budget == budget) return r.metrics;
  }
  throw std::runtime_error("missing row");
}

TEST(Workloads, CheckHashes) {
  auto stale = open_trace("stale-spike-4096");
  EXPECT_EQ(trace_hash(*stale, 4095), 351924777U);
  EXPECT_EQ(trace_hash(*stale, 200), 3020915039U);
  auto fact = open_trace("recalled-fact-4096");
  EXPECT_EQ(trace_hash(*fact, 4095), 4203937376U);
  EXPECT_EQ(trace_hash(*fact, 200), 1676441410U);  // recalls start at step 641
  EXPECT_EQ(trace_hash(*fact, 700), 3644671661U);
  // Before the first spike token (position 128) both equal the canonical trace.
  auto canonical = open_trace("decode-4096");
  EXPECT_EQ(trace_hash(*stale, 128), trace_hash(*canonical, 128));
  EXPECT_EQ(trace_hash(*fact, 128), trace_hash(*canonical, 128));
}

TEST(Workloads, ASpikeTokenIsAttendedTwiceThenOnlyByNoise) {
  // stale-spike-4096: positions 128, 132, 136, ... are spike tokens.
  auto trace = open_trace("stale-spike-4096");
  for (std::uint32_t t = 1; t <= 128; ++t) trace->next();
  const auto s129 = trace->next();
  EXPECT_GT(s129[128], 0.5F);  // spike_mass 2 of a total of 3
  const auto s130 = trace->next();
  EXPECT_GT(s130[128], 0.5F);
  const auto s131 = trace->next();
  EXPECT_LT(s131[128], 0.0005F);  // noise only, no local band
  EXPECT_GT(s131[129], 0.001F);   // an ordinary neighbour keeps its band weight
}

TEST(Workloads, RecalledFactsComeBackAfter512StepsForSixSteps) {
  auto trace = open_trace("recalled-fact-4096");
  std::span<const float> w;
  for (std::uint32_t t = 1; t <= 128 + 512 + 1; ++t) w = trace->next();
  // Step 641: the fact at 128 is recalled while the new spike token 640 takes
  // its own spike (512 is a multiple of 32): 2 of a total of 5.
  EXPECT_GT(w[128], 0.35F);
  EXPECT_GT(w[640], 0.35F);
  w = trace->next();  // step 642: the same sharing
  EXPECT_GT(w[128], 0.35F);
  EXPECT_LT(w[128], 0.5F);
  // Steps 643 ... 646: the recall goes on alone, 2 of a total of 3.
  for (std::uint32_t t = 643; t <= 646; ++t) {
    w = trace->next();
    EXPECT_GT(w[128], 0.6F) << t;
    EXPECT_LT(w[640], 0.0005F) << t;  // the fresh spike is over
  }
  w = trace->next();  // step 647: six recall steps are done
  EXPECT_LT(w[128], 0.0005F);
}

TEST(Workloads, StaleSpikesFavourScissorhands) {
  const auto rows = sh_and_h2o("stale-spike-4096");
  for (const std::int64_t b : {256, 512, 1024}) {
    const Metrics& sh = metrics(rows, "scissorhands", b);
    const Metrics& h2o = metrics(rows, "h2o", b);
    EXPECT_GT(sh.retained_attention_mass - h2o.retained_attention_mass, 0.01) << b;
    EXPECT_GE(sh.heavy_hitter_recall, h2o.heavy_hitter_recall) << b;
  }
  EXPECT_GT(metrics(rows, "scissorhands", 512).heavy_hitter_recall -
                metrics(rows, "h2o", 512).heavy_hitter_recall, 0.03);
}

TEST(Workloads, RecalledFactsFavourH2O) {
  const auto rows = sh_and_h2o("recalled-fact-4096");
  for (const std::int64_t b : {256, 512, 1024}) {
    const Metrics& sh = metrics(rows, "scissorhands", b);
    const Metrics& h2o = metrics(rows, "h2o", b);
    EXPECT_GT(h2o.retained_attention_mass - sh.retained_attention_mass, 0.01) << b;
    EXPECT_GT(h2o.heavy_hitter_recall, sh.heavy_hitter_recall) << b;
  }
}

TEST(Workloads, RecalledFactsGiveH2OAClearLead) {
  // Issue 18: the recalls carry 0.092 of the mean step's attention (six steps
  // of a fact, about 0.4 on the first two and 0.67 on the next four), so H2O,
  // which still holds the facts, keeps at least 0.05 more mass than
  // Scissorhands, which dropped them, at each documented budget.
  const auto rows = sh_and_h2o("recalled-fact-4096");
  for (const std::int64_t b : {256, 512, 1024}) {
    EXPECT_GE(metrics(rows, "h2o", b).retained_attention_mass -
                  metrics(rows, "scissorhands", b).retained_attention_mass, 0.05) << b;
  }
}

}  // namespace
}  // namespace kvevict
