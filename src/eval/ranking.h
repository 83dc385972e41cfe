// Ranking of comparison rows, shared by compare() (retained mass) and
// compare_model() (perplexity): each policy is scored by its row at the
// ranking budget; rows are ordered best policy first (each policy's rows by
// ascending budget; policies with equal scores in the order they first appear
// in the rows) and get competition ranks (equal scores share a rank: 1, 2, 2, 4).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>

namespace kvevict::detail {

// The order rank_rows sorts by, a strict weak ordering on any rows: by the
// policy's score (higher first), then by where the policy first appears, then
// by budget. The middle key matters: SnapKV and PyramidKV tie at every
// canonical budget, and without it "equal score" made rows of different
// policies equivalent while rows of one policy were ordered by budget, which
// is not transitive, so the result depended on the rows arriving grouped.
// First appearance keeps the order callers already see (they pass rows
// grouped, in registry or command-line order). A policy without a row at the
// ranking budget, or scored NaN, gets -infinity: it ranks below every real
// score instead of breaking the comparison.
template <class Row>
class RankOrder {
 public:
  // `score(row)`: higher is better.
  template <class Score>
  RankOrder(std::span<const Row> rows, std::int64_t rank_budget, Score score) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      keys_.try_emplace(rows[i].policy, Key{-std::numeric_limits<double>::infinity(), i});
    }
    for (const Row& r : rows) {
      if (r.budget != rank_budget) continue;
      const double s = static_cast<double>(score(r));
      keys_.at(r.policy).score = std::isnan(s) ? -std::numeric_limits<double>::infinity() : s;
    }
  }

  bool operator()(const Row& a, const Row& b) const {
    const Key& ka = keys_.at(a.policy);
    const Key& kb = keys_.at(b.policy);
    if (ka.score != kb.score) return ka.score > kb.score;
    if (ka.first != kb.first) return ka.first < kb.first;
    return a.budget < b.budget;
  }

  // 1 + the number of policies scored strictly higher.
  int rank(const Row& r) const {
    const double own = keys_.at(r.policy).score;
    int rank = 1;
    for (const auto& [policy, key] : keys_) {
      if (key.score > own) ++rank;
    }
    return rank;
  }

 private:
  struct Key {
    double score;
    std::size_t first;  // index of the policy's first row
  };
  std::map<std::string, Key, std::less<>> keys_;
};

template <class Row, class Score>
void rank_rows(std::span<Row> rows, std::int64_t rank_budget, Score score) {
  const RankOrder<Row> order(std::span<const Row>(rows), rank_budget, score);
  std::stable_sort(rows.begin(), rows.end(), order);
  for (Row& r : rows) r.rank = order.rank(r);
}

}  // namespace kvevict::detail
