// The ranking shared by compare and compare --model (src/eval/ranking.h): rows in
// any order come back best policy first, each policy's rows by ascending
// budget, with competition ranks; equal scores keep the order in which the
// policies first appear. The masses are the canonical table's
// (docs/domain.md section 5), where SnapKV and PyramidKV tie at every budget.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "ranking.h"

namespace kvevict {
namespace {

struct Mass {
  const char* policy;
  std::int64_t budget;
  double mass;
};

// The canonical rows, keyed by hand from docs/domain.md.
constexpr Mass kCanonical[] = {
    {"scissorhands", 256, 0.641318},   {"scissorhands", 512, 0.711377},   {"scissorhands", 1024, 0.784746},
    {"h2o", 256, 0.643895},            {"h2o", 512, 0.714859},            {"h2o", 1024, 0.784413},
    {"streaming-llm", 256, 0.736691},  {"streaming-llm", 512, 0.786153},  {"streaming-llm", 1024, 0.866203},
    {"sliding-window", 256, 0.596637}, {"sliding-window", 512, 0.655518}, {"sliding-window", 1024, 0.754149},
    {"tova", 256, 0.778128},           {"tova", 512, 0.824012},           {"tova", 1024, 0.885888},
    {"snapkv", 256, 0.783378},         {"snapkv", 512, 0.821190},         {"snapkv", 1024, 0.888049},
    {"pyramidkv", 256, 0.783378},      {"pyramidkv", 512, 0.821190},      {"pyramidkv", 1024, 0.888049},
};

RunRow row_of(const std::string& policy, std::int64_t budget) {
  for (const Mass& m : kCanonical) {
    if (m.policy == policy && m.budget == budget) {
      RunRow r;
      r.policy = policy;
      r.budget = budget;
      r.metrics.retained_attention_mass = m.mass;
      return r;
    }
  }
  ADD_FAILURE() << "no canonical row " << policy << " at " << budget;
  return {};
}

// "rank policy budget" per row, to compare whole tables in one message.
std::vector<std::string> table(const std::vector<RunRow>& rows) {
  std::vector<std::string> out;
  for (const RunRow& r : rows) out.push_back(std::to_string(r.rank) + " " + r.policy + " " + std::to_string(r.budget));
  return out;
}

// docs/domain.md's table, ranked at 512: TOVA 0.824012, then SnapKV and
// PyramidKV at 0.821190 (both 2nd), streaming-llm, H2O, Scissorhands,
// sliding-window.
const std::vector<std::string> kCanonicalTable{
    "1 tova 256",         "1 tova 512",          "1 tova 1024",          //
    "2 snapkv 256",       "2 snapkv 512",        "2 snapkv 1024",        //
    "2 pyramidkv 256",    "2 pyramidkv 512",     "2 pyramidkv 1024",     //
    "4 streaming-llm 256", "4 streaming-llm 512", "4 streaming-llm 1024", //
    "5 h2o 256",          "5 h2o 512",           "5 h2o 1024",           //
    "6 scissorhands 256", "6 scissorhands 512",  "6 scissorhands 1024",  //
    "7 sliding-window 256", "7 sliding-window 512", "7 sliding-window 1024"};

const char* const kRegistryOrder[] = {"scissorhands", "h2o",    "streaming-llm", "sliding-window",
                                      "tova",         "snapkv", "pyramidkv"};

TEST(Ranking, RowsInBudgetMajorOrderGetTheCanonicalTable) {
  // Not grouped by policy: budget-major, the budgets out of order. SnapKV
  // still appears before PyramidKV, as in the registry.
  std::vector<RunRow> rows;
  for (const std::int64_t b : {1024, 256, 512}) {
    for (const char* p : kRegistryOrder) rows.push_back(row_of(p, b));
  }
  rank_compare_rows(rows, {256, 512, 1024});
  EXPECT_EQ(table(rows), kCanonicalTable);
}

TEST(Ranking, ScrambledRowsGetTheCanonicalTable) {
  // A fixed shuffle of the 21 rows in which SnapKV's first row comes before
  // PyramidKV's first row.
  const std::vector<std::pair<const char*, std::int64_t>> order{
      {"h2o", 1024},          {"snapkv", 512},         {"sliding-window", 256}, {"tova", 1024},
      {"pyramidkv", 256},     {"scissorhands", 512},   {"streaming-llm", 1024}, {"snapkv", 1024},
      {"tova", 256},          {"pyramidkv", 1024},     {"h2o", 256},            {"sliding-window", 1024},
      {"scissorhands", 256},  {"streaming-llm", 256},  {"pyramidkv", 512},      {"snapkv", 256},
      {"tova", 512},          {"sliding-window", 512}, {"scissorhands", 1024},  {"h2o", 512},
      {"streaming-llm", 512}};
  std::vector<RunRow> rows;
  for (const auto& [p, b] : order) rows.push_back(row_of(p, b));
  rank_compare_rows(rows, {1024, 512, 256});
  EXPECT_EQ(table(rows), kCanonicalTable);
}

TEST(Ranking, EqualScoresKeepTheOrderInWhichPoliciesFirstAppear) {
  std::vector<RunRow> rows{row_of("pyramidkv", 1024), row_of("snapkv", 256), row_of("snapkv", 512),
                           row_of("pyramidkv", 512),  row_of("tova", 512),   row_of("snapkv", 1024),
                           row_of("pyramidkv", 256)};
  rank_compare_rows(rows, {256, 512, 1024});
  EXPECT_EQ(table(rows), (std::vector<std::string>{"1 tova 512", "2 pyramidkv 256", "2 pyramidkv 512",
                                                   "2 pyramidkv 1024", "2 snapkv 256", "2 snapkv 512",
                                                   "2 snapkv 1024"}));
}

TEST(Ranking, TheOrderIsAStrictWeakOrderingOnTiedRows) {
  std::vector<RunRow> rows;
  for (const char* p : {"snapkv", "tova", "pyramidkv"}) {
    for (const std::int64_t b : {512, 256, 1024}) rows.push_back(row_of(p, b));
  }
  // A policy with no row at the ranking budget, and one scored NaN: both
  // below every real score, tied with each other.
  rows.push_back(row_of("h2o", 256));
  rows.back().policy = "absent";
  rows.push_back(row_of("h2o", 512));
  rows.back().policy = "nan";
  rows.back().metrics.retained_attention_mass = std::nan("");
  const auto score = [](const RunRow& r) { return r.metrics.retained_attention_mass; };
  const detail::RankOrder<RunRow> less(std::span<const RunRow>(rows), 512, score);
  const std::size_t n = rows.size();
  const auto equivalent = [&](const RunRow& a, const RunRow& b) { return !less(a, b) && !less(b, a); };
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_FALSE(less(rows[i], rows[i])) << "irreflexive: " << rows[i].policy << " " << rows[i].budget;
    for (std::size_t j = 0; j < n; ++j) {
      if (i != j) {
        // Distinct rows here differ in policy or budget: never equivalent.
        EXPECT_NE(less(rows[i], rows[j]), less(rows[j], rows[i]))
            << rows[i].policy << " " << rows[i].budget << " vs " << rows[j].policy << " " << rows[j].budget;
      }
      for (std::size_t k = 0; k < n; ++k) {
        if (less(rows[i], rows[j]) && less(rows[j], rows[k])) {
          EXPECT_TRUE(less(rows[i], rows[k])) << "transitive: " << i << " " << j << " " << k;
        }
        if (equivalent(rows[i], rows[j]) && equivalent(rows[j], rows[k])) {
          EXPECT_TRUE(equivalent(rows[i], rows[k])) << "equivalence is transitive: " << i << " " << j << " " << k;
        }
      }
    }
  }
  // Competition ranks at 512: TOVA 1, SnapKV and PyramidKV 2; the rows
  // without a usable score share the last rank.
  EXPECT_EQ(less.rank(rows[0]), 2);  // snapkv
  EXPECT_EQ(less.rank(rows[3]), 1);  // tova
  EXPECT_EQ(less.rank(rows[6]), 2);  // pyramidkv
  EXPECT_EQ(less.rank(rows[9]), 4);  // absent
  EXPECT_EQ(less.rank(rows[10]), 4); // nan
  EXPECT_TRUE(less(rows[3], rows[0]));   // tova before snapkv
  EXPECT_TRUE(less(rows[2], rows[6]));   // snapkv (first to appear) before pyramidkv, any budgets
  EXPECT_TRUE(less(rows[1], rows[0]));   // a policy's own rows by ascending budget
  EXPECT_TRUE(less(rows[9], rows[10]));  // "absent" appears before "nan"
}

}  // namespace
}  // namespace kvevict
