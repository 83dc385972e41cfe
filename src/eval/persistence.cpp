#include "kvevict/eval/persistence.h"

#include <algorithm>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

std::vector<PersistenceRow> persistence(std::span<Trace* const> heads, std::vector<std::uint32_t> lags) {
  if (heads.empty()) throw ParameterError("persistence: no trace heads");
  if (lags.empty()) throw ParameterError("persistence: no lags given");
  std::sort(lags.begin(), lags.end());
  lags.erase(std::unique(lags.begin(), lags.end()), lags.end());
  const std::uint32_t steps = heads.front()->steps();
  if (lags.front() < 1 || lags.back() >= steps) {
    throw ParameterError(fmt::format("persistence: lags must be in 1 ... {} (the trace has {} steps)",
                                     steps - 1, steps));
  }
  const std::uint32_t max_lag = lags.back();
  std::vector<PersistenceRow> rows(lags.size());
  std::vector<double> share_sum(lags.size(), 0.0), base_sum(lags.size(), 0.0);

  for (Trace* trace : heads) {
    trace->rewind();
    // Ring of the last max_lag + 1 steps' important sets.
    std::vector<std::vector<std::uint32_t>> ring(max_lag + 1);
    std::vector<std::uint64_t> important(lags.size(), 0), persisted(lags.size(), 0);
    std::vector<double> base(lags.size(), 0.0);
    std::vector<std::uint64_t> base_n(lags.size(), 0);
    for (std::uint32_t t = 1; t <= steps; ++t) {
      const std::span<const float> w = trace->next();
      const double fair = 1.0 / static_cast<double>(t);
      std::vector<std::uint32_t>& now = ring[t % (max_lag + 1)];
      now.clear();
      for (std::uint32_t i = 0; i < t; ++i) {
        if (static_cast<double>(w[i]) > fair) now.push_back(i);
      }
      const double rate = static_cast<double>(now.size()) / static_cast<double>(t);
      for (std::size_t j = 0; j < lags.size(); ++j) {
        const std::uint32_t k = lags[j];
        if (t <= k) continue;
        base[j] += rate;
        ++base_n[j];
        for (const std::uint32_t i : ring[(t - k) % (max_lag + 1)]) {
          ++important[j];
          persisted[j] += static_cast<double>(w[i]) > fair ? 1 : 0;
        }
      }
    }
    for (std::size_t j = 0; j < lags.size(); ++j) {
      rows[j].important += important[j];
      rows[j].persisted += persisted[j];
      share_sum[j] += important[j] == 0 ? 0.0
                                        : static_cast<double>(persisted[j]) / static_cast<double>(important[j]);
      base_sum[j] += base_n[j] == 0 ? 0.0 : base[j] / static_cast<double>(base_n[j]);
    }
  }
  const auto h = static_cast<double>(heads.size());
  for (std::size_t j = 0; j < lags.size(); ++j) {
    rows[j].lag = lags[j];
    rows[j].share = share_sum[j] / h;
    rows[j].base_rate = base_sum[j] / h;
  }
  return rows;
}

}  // namespace kvevict
