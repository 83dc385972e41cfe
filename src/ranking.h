// Ranking of comparison rows, shared by compare() (retained mass) and
// compare_model() (perplexity): each policy is scored by its row at the
// ranking budget; rows are ordered best policy first (each policy's rows by
// ascending budget, equal scores keeping the given order) and get competition
// ranks (equal scores share a rank: 1, 2, 2, 4).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>

namespace kvevict::detail {

// `score(row)`: higher is better. Rows of other budgets only follow their policy.
template <class Row, class Score>
void rank_rows(std::span<Row> rows, std::int64_t rank_budget, Score score) {
  std::map<std::string, double> at_rank;
  for (const Row& r : rows) {
    if (r.budget == rank_budget) at_rank[r.policy] = score(r);
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (a.policy == b.policy) return a.budget < b.budget;
    return at_rank[a.policy] > at_rank[b.policy];
  });
  for (Row& r : rows) {
    r.rank = 1;
    for (const auto& [policy, value] : at_rank) {
      if (value > at_rank[r.policy]) ++r.rank;
    }
  }
}

}  // namespace kvevict::detail
