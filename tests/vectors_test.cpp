#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/vectors.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

std::string all_failures(const VectorReport& r) {
  std::string s;
  for (const auto& f : r.failures) s += describe(f) + "\n";
  return s;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& param) {
  std::string n = param.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

class OwnVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(OwnVectors, PassAndCoverTheFourKindsOfCase) {
  const fs::path file = testing::source_dir() / "vectors" / (GetParam() + ".vectors.json");
  ASSERT_TRUE(fs::exists(file)) << "every registered policy needs " << file;
  const VectorReport report = run_vector_file(file);
  EXPECT_EQ(report.failed, 0U) << all_failures(report);
  EXPECT_GE(report.passed, 4U);
}

std::vector<std::string> registered() {
  std::vector<std::string> names;
  for (const PolicyInfo* info : policies()) names.push_back(info->name);
  return names;
}

// The peer catalogue has the seven attention and positional policies.
std::vector<std::string> in_the_peer_catalogue() {
  std::vector<std::string> names;
  for (const PolicyInfo* info : testing::attention_policies()) names.push_back(info->name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, OwnVectors, ::testing::ValuesIn(registered()),
                         test_name);

class PeerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(PeerVectors, Pass) {
  const auto dir = testing::conformance_dir();
  if (!dir) GTEST_SKIP() << "../shared/conformance is absent: peer vectors not replayed";
  const fs::path file = *dir / (GetParam() + ".vectors.json");
  ASSERT_TRUE(fs::exists(file)) << file;
  const VectorReport report = run_vector_file(file);
  EXPECT_EQ(report.failed, 0U) << all_failures(report);
  EXPECT_GT(report.passed, 0U);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, PeerVectors, ::testing::ValuesIn(in_the_peer_catalogue()),
                         test_name);

// Writes `text` to a temporary vector file and replays it.
VectorReport replay(const std::string& text) {
  const fs::path file = fs::temp_directory_path() /
                        ("kvevict-test-" + std::to_string(::getpid()) + "-" +  // one file per process: ctest runs several
                         std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".vectors.json");
  {
    std::ofstream out(file);
    out << text;
  }
  VectorReport report = run_vector_file(file);
  fs::remove(file);
  return report;
}

TEST(VectorRunner, AMissingMethodFailsThatCaseAndTheRunGoesOn) {
  const VectorReport r = replay(R"({"policy": "kv-cache/h2o", "version": 1, "cases": [
    {"name": "asks for votes", "params": {"budget": 3, "recentWindow": 1},
     "steps": [{"call": "votesOf", "args": [0], "expect": 0}]},
    {"name": "fine", "params": {"budget": 3, "recentWindow": 1},
     "steps": [{"call": "keptCount", "expect": 1}]}]})");
  EXPECT_EQ(r.passed, 1U);
  EXPECT_EQ(r.failed, 1U);
  ASSERT_EQ(r.failures.size(), 1U);
  EXPECT_EQ(r.failures[0].case_name, "asks for votes");
  EXPECT_EQ(r.failures[0].step, 0);
  EXPECT_EQ(r.failures[0].message, "malformed: h2o has no method 'votesOf'");
}

TEST(VectorRunner, AFailedExpectationIsRecordedAndTheCaseGoesOn) {
  const VectorReport r = replay(R"({"policy": "kv-cache/sliding-window", "version": 1, "cases": [
    {"name": "wrong twice", "params": {"budget": 1},
     "steps": [{"call": "keptCount", "expect": 2},
               {"call": "onDecodeStep", "args": [1, null]},
               {"call": "evict", "args": [1], "expect": [1]}]}]})");
  EXPECT_EQ(r.failed, 1U);
  ASSERT_EQ(r.failures.size(), 2U);
  EXPECT_EQ(r.failures[0].expected, "2");
  EXPECT_EQ(r.failures[0].actual, "1");
  EXPECT_EQ(r.failures[1].step, 2);
  EXPECT_EQ(r.failures[1].expected, "[1]");
  EXPECT_EQ(r.failures[1].actual, "[0]");
}

TEST(VectorRunner, ComparisonRules) {
  // Tolerance applies to numbers; null expectations are assertions too.
  const VectorReport r = replay(R"({"policy": "kv-cache/h2o", "version": 1, "cases": [
    {"name": "tolerant", "tolerance": 0.01, "params": {"budget": 3, "recentWindow": 1},
     "steps": [{"call": "onDecodeStep", "args": [1, [0.5]], "expect": null},
               {"call": "scoreOf", "args": [0], "expect": 0.505}]},
    {"name": "strict", "params": {"budget": 3, "recentWindow": 1},
     "steps": [{"call": "onDecodeStep", "args": [1, [0.5]]},
               {"call": "scoreOf", "args": [0], "expect": 0.505}]},
    {"name": "boolean is not a number", "params": {"budget": 3, "recentWindow": 1},
     "steps": [{"call": "keptCount", "expect": true}]}]})");
  EXPECT_EQ(r.passed, 1U);
  EXPECT_EQ(r.failed, 2U);
}

TEST(VectorRunner, MalformedFilesSayWhichFileAndWhat) {
  VectorReport r = replay("{ not json");
  ASSERT_EQ(r.failures.size(), 1U);
  EXPECT_EQ(r.failed, 1U);
  EXPECT_NE(r.failures[0].message.find("is not valid JSON"), std::string::npos);
  EXPECT_NE(describe(r.failures[0]).find(".vectors.json: file: is not valid JSON"), std::string::npos);

  r = replay(R"({"policy": "kv-cache/lru", "version": 1, "cases": []})");
  ASSERT_EQ(r.failures.size(), 1U);
  EXPECT_NE(r.failures[0].message.find("unknown policy 'lru'"), std::string::npos);

  r = replay(R"({"policy": "kv-cache/h2o", "version": 2, "cases": []})");
  EXPECT_EQ(r.failures.at(0).message, "'version' must be 1");

  r = replay(R"({"policy": "kv-cache/h2o", "version": 1})");
  EXPECT_EQ(r.failures.at(0).message, "needs a 'cases' array");
}

TEST(VectorRunner, FuzzFindingsStayFixed) {
  // Found by fuzz/fuzz_vectors: a number too large for a double escaped the
  // parser as out_of_range and terminated the program.
  VectorReport r = replay(R"({"policy": "kv-cache/h2o", "version": 1, "cases": [1e99999]})");
  ASSERT_EQ(r.failures.size(), 1U);
  EXPECT_NE(r.failures[0].message.find("is not valid JSON"), std::string::npos);
  // Every kept regression input replays without escaping.
  for (const auto& entry : fs::directory_iterator(testing::source_dir() / "fuzz" / "regressions" / "vectors")) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NO_THROW(run_vector_text(text, entry.path().string())) << entry.path();
  }
}

TEST(VectorRunner, DeepNestingIsRefused) {
  std::string deep = "{\"policy\": \"kv-cache/h2o\", \"version\": 1, \"cases\": [";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  deep += "]}";
  const VectorReport r = replay(deep);
  ASSERT_EQ(r.failures.size(), 1U);
  EXPECT_EQ(r.failures[0].message, "nests deeper than 32 levels");
}

TEST(VectorRunner, MalformedCasesSayWhichCaseAndWhat) {
  const VectorReport r = replay(R"({"policy": "kv-cache/h2o", "version": 1, "cases": [
    {"name": "fractional budget", "params": {"budget": 2.5}, "steps": []},
    {"name": "no steps"},
    {"name": "bad attention", "steps": [{"call": "onDecodeStep", "args": [1, ["x"]]}]},
    {"name": "no call", "steps": [{"args": []}]},
    {"name": "bad params", "params": {"budget": 0}, "steps": []}]})");
  EXPECT_EQ(r.failed, 5U);
  ASSERT_EQ(r.failures.size(), 5U);
  EXPECT_EQ(r.failures[0].message, "malformed: params.budget must be an integer, got 2.5");
  EXPECT_EQ(r.failures[1].message, "malformed: a case needs a 'steps' array");
  EXPECT_EQ(r.failures[2].message, "malformed: attention weight 0 must be a number, got \"x\"");
  EXPECT_EQ(r.failures[3].message, "malformed: a step needs a string 'call'");
  EXPECT_EQ(r.failures[4].message, "threw");
  EXPECT_EQ(r.failures[4].actual, "H2O: budget (0) must be at least 1");
}

// A vector file reaches LayerBudget's bounds too: the case fails with the
// one-line refusal, before 1,024 heads of 2^18 positions are allocated.
TEST(VectorRunner, AnOversizedLayerCaseIsRefusedNotAllocated) {
  const VectorReport r = replay(R"({"policy": "kv-cache/h2o", "version": 1, "cases": [
    {"name": "huge layer", "params": {}, "layer": {"heads": 1024, "layerBudget": 262144, "headFloor": 0},
     "steps": []},
    {"name": "wrapping floor", "params": {}, "layer": {"heads": 2, "layerBudget": 128, "headFloor": 4611686018427387904},
     "steps": []}]})");
  EXPECT_EQ(r.failed, 2U);
  ASSERT_EQ(r.failures.size(), 2U);
  EXPECT_NE(r.failures[0].actual.find("bytes one layer may hold"), std::string::npos) << r.failures[0].actual;
  EXPECT_NE(r.failures[1].actual.find("headFloor (4611686018427387904) times heads (2)"), std::string::npos)
      << r.failures[1].actual;
}

TEST(VectorRunner, AThrowingStepEndsTheCase) {
  const VectorReport r = replay(R"({"policy": "kv-cache/sliding-window", "version": 1, "cases": [
    {"name": "overrun", "params": {"budget": 1},
     "steps": [{"call": "onDecodeStep", "args": [1, null]},
               {"call": "onDecodeStep", "args": [2, null]},
               {"call": "keptCount", "expect": 99}]}]})");
  ASSERT_EQ(r.failures.size(), 1U);
  EXPECT_EQ(r.failures[0].step, 1);
  EXPECT_EQ(r.failures[0].message, "threw");
}

TEST(VectorRunner, FoldersAreSearchedForVectorFilesOnly) {
  const auto files = collect_vector_files({testing::source_dir() / "vectors"});
  // One file per policy, plus the block and layer-budget cases (docs/paged.md).
  const auto paged = std::count_if(files.begin(), files.end(),
                                   [](const auto& f) { return f.string().ends_with(".paged.vectors.json"); });
  EXPECT_EQ(files.size() - static_cast<std::size_t>(paged), policies().size());
  EXPECT_GE(paged, 1);
  for (const auto& f : files) EXPECT_TRUE(f.string().ends_with(".vectors.json"));
  EXPECT_THROW(collect_vector_files({"/no/such/place"}), InputError);
}

}  // namespace
}  // namespace kvevict
