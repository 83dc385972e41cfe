// Prefill compression (include/kvevict/core/prefill.h, docs/prefill.md). Each
// policy's rule is written out here in its plainest form: a score per prompt
// position from the window rows, a set of protected positions, and one
// eviction of the lowest scores (ties: the lower position goes), as the
// policy's repeated strict argmin would choose at decode time.
#include "kvevict/core/prefill.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "policies/common.h"

namespace kvevict {

namespace {

std::string weight_text(float w) {
  if (std::isnan(w)) return "NaN";
  return fmt::format("{}", w);
}

void check_window(const PrefillWindow& window) {
  if (window.length == 0) throw InputError("prefill: the prompt is empty (length 0)");
  if (window.length > std::size_t{std::numeric_limits<Position>::max()} + 1) {
    throw InputError(fmt::format("prefill: the prompt's length ({}) does not fit in 32-bit positions",
                                 window.length));
  }
  if (window.rows == 0) {
    throw InputError("prefill: the window has no rows: pass the attention rows of the prompt's last w >= 1 positions");
  }
  if (window.rows > window.length) {
    throw InputError(fmt::format(
        "prefill: the window has {} rows but the prompt only {} positions: one row per query "
        "position, the last ones",
        window.rows, window.length));
  }
  if (window.weights.size() / window.rows != window.length || window.weights.size() % window.rows != 0) {
    throw InputError(fmt::format(
        "prefill: the window holds {} weights, but {} rows over a {}-position prompt need {}",
        window.weights.size(), window.rows, window.length, window.rows * window.length));
  }
  for (std::size_t i = 0; i < window.rows; ++i) {
    const std::size_t q = window.length - window.rows + i;  // this row's query position
    const float* row = window.weights.data() + i * window.length;
    for (std::size_t j = 0; j <= q; ++j) {
      if (!(row[j] >= 0.0F && row[j] <= std::numeric_limits<float>::max())) {
        throw InputError(fmt::format("prefill: row {} column {} is {}: weights must be finite and at least 0",
                                     i, j, weight_text(row[j])));
      }
    }
    for (std::size_t j = q + 1; j < window.length; ++j) {
      if (row[j] != 0.0F) {
        throw InputError(fmt::format(
            "prefill: row {} column {} is {}, after the diagonal: row {} is the query at position {}, "
            "which cannot attend position {} (causal attention is 0 there)",
            i, j, weight_text(row[j]), i, q, j));
      }
    }
  }
}

std::int64_t param(const ParamMap& effective, std::string_view key) {
  for (const auto& [k, v] : effective) {
    if (k == key) return v;
  }
  return 0;  // not a parameter of this policy
}

// Column j of the window, summed over rows [first, rows) in row order, in float64.
std::vector<double> column_sums(const PrefillWindow& w, std::size_t first) {
  std::vector<double> sum(w.length, 0.0);
  for (std::size_t i = first; i < w.rows; ++i) {
    const float* row = w.weights.data() + i * w.length;
    for (std::size_t j = 0; j < w.length; ++j) sum[j] += static_cast<double>(row[j]);
  }
  return sum;
}

// How many of the window's rows [first, rows) cover position j: row i is the
// query at q = length - rows + i and covers the positions 0 ... q.
std::uint32_t queries_covering(const PrefillWindow& w, std::size_t first, std::size_t j) {
  const std::size_t q0 = w.length - w.rows;  // the first row's query
  const std::size_t from = std::max(first, j > q0 ? j - q0 : 0);
  return static_cast<std::uint32_t>(w.rows > from ? w.rows - from : 0);
}

// Keeps `keep` of the positions [0, n): every protected one, then the
// evictable ones with the highest scores; among equal scores the lower
// position is evicted first. `keep` must be at least the protected count.
template <class Score>
std::vector<Position> keep_highest(const std::vector<Score>& score, const std::vector<bool>& is_protected,
                                   std::size_t keep) {
  const std::size_t n = score.size();
  std::vector<Position> evictable;
  for (std::size_t j = 0; j < n; ++j) {
    if (!is_protected[j]) evictable.push_back(static_cast<Position>(j));
  }
  const std::size_t needed = n - keep;
  // The victims are the `needed` smallest by (score, position): what a
  // repeated strict argmin over ascending positions picks, one at a time.
  const auto before = [&](Position a, Position b) {
    return score[a] < score[b] || (score[a] == score[b] && a < b);
  };
  std::vector<bool> evicted(n, false);
  if (needed > 0) {
    std::nth_element(evictable.begin(), evictable.begin() + static_cast<std::ptrdiff_t>(needed - 1),
                     evictable.end(), before);
    for (std::size_t k = 0; k < needed; ++k) evicted[evictable[k]] = true;
  }
  std::vector<Position> kept;
  kept.reserve(keep);
  for (std::size_t j = 0; j < n; ++j) {
    if (!evicted[j]) kept.push_back(static_cast<Position>(j));
  }
  return kept;
}

// The newest `recent` positions and those below `sinks`.
std::vector<bool> protect(std::size_t n, std::int64_t recent, std::int64_t sinks) {
  std::vector<bool> p(n, false);
  const std::size_t r = std::min(n, static_cast<std::size_t>(std::max<std::int64_t>(recent, 0)));
  for (std::size_t j = n - r; j < n; ++j) p[j] = true;
  const std::size_t s = std::min(n, static_cast<std::size_t>(std::max<std::int64_t>(sinks, 0)));
  for (std::size_t j = 0; j < s; ++j) p[j] = true;
  return p;
}

void check_window_fits(const std::string& title, std::size_t rows, std::size_t target, std::string_view what_target) {
  if (rows > target) {
    throw ParameterError(fmt::format(
        "{} prefill: the window ({} rows) is larger than {} ({}): the window's positions are "
        "always kept, so it must fit",
        title, rows, what_target, target));
  }
}

// SnapKV's prefill rule (Li et al., Algorithm 1): the window's positions are
// kept; every earlier position is scored by its attention summed over the
// window rows, max-pooled over its neighbours (kernel `kernel`, clipped to the
// earlier positions), and the top `target - rows` are kept.
std::vector<Position> snapkv_prefill(const std::string& title, const PrefillWindow& w, std::size_t target,
                                     std::int64_t kernel, const std::string& what_target) {
  check_window_fits(title, w.rows, target, what_target);
  const std::size_t prefix = w.length - w.rows;
  const std::vector<double> sum = column_sums(w, 0);
  const std::size_t radius = static_cast<std::size_t>((kernel - 1) / 2);
  std::vector<double> pooled(w.length, 0.0);
  for (std::size_t j = 0; j < prefix; ++j) {
    const std::size_t lo = j >= radius ? j - radius : 0;
    const std::size_t hi = std::min(prefix - 1, j + radius);
    double m = sum[lo];
    for (std::size_t k = lo + 1; k <= hi; ++k) m = std::max(m, sum[k]);
    pooled[j] = m;
  }
  std::vector<bool> is_protected(w.length, false);
  for (std::size_t j = prefix; j < w.length; ++j) is_protected[j] = true;
  return keep_highest(pooled, is_protected, target);
}

// The policy built with the budget (its rules check the parameters and name
// any unknown one), its effective parameters, and for SnapKV/PyramidKV how
// many positions the window must fit in.
struct Checked {
  const PolicyInfo* info = nullptr;
  std::unique_ptr<Policy> built;
  ParamMap effective;
  std::size_t target = 0;     // SnapKV: the budget; PyramidKV: min(budget, the layer's share)
  std::string what_target;
};

Checked check_request(std::string_view policy, const ParamMap& params, std::int64_t budget) {
  Checked c;
  c.info = &find_policy(policy);
  for (const auto& [key, value] : params) {
    if (key == "budget") {
      throw ParameterError(fmt::format(
          "prefill: params give budget ({}): pass the budget as prefill's own argument, not as a parameter",
          value));
    }
  }
  if (budget < 1) throw ParameterError(fmt::format("prefill: budget ({}) must be at least 1", budget));
  ParamMap with_budget = params;
  set_param(with_budget, "budget", budget);
  c.built = c.info->make(with_budget);
  c.effective = c.info->effective(with_budget);
  c.target = static_cast<std::size_t>(budget);
  c.what_target = "the budget";
  if (c.info->name == "pyramidkv") {
    const QueryInfo* share = c.info->find_query("effectiveBudget");
    const auto effective = static_cast<std::size_t>(share->call(*c.built, {}));
    if (effective < c.target) {
      c.target = effective;
      c.what_target = fmt::format("layer {}'s share", param(c.effective, "layer"));
    }
  }
  return c;
}

}  // namespace

std::vector<Position> prefill_signals(std::string_view policy, const ParamMap& params, std::int64_t budget,
                                      const PrefillSignals& prompt) {
  const Checked c = check_request(policy, params, budget);
  const PolicyInfo& info = *c.info;
  if ((info.signals & kSignalKey) == 0) {
    throw ParameterError(fmt::format("prefill: {} scores attention rows, not keys: give it a window of attention (prefill)",
                                     info.name));
  }
  const std::size_t n = prompt.length;
  const std::size_t d = prompt.head_dim;
  const auto rows_of = [&](std::span<const float> data, std::size_t width, const char* what) {
    if (data.empty()) return;
    if (data.size() != n * width) {
      throw InputError(fmt::format("prefill: {} holds {} floats; a prompt of {} positions x {} needs {}", what,
                                   data.size(), n, width, n * width));
    }
  };
  rows_of(prompt.keys, d, "keys");
  rows_of(prompt.values, d, "values");
  rows_of(prompt.queries, prompt.query_width, "queries");
  const auto b = static_cast<std::size_t>(budget);
  if (b >= n) {  // the prompt fits: nothing to compress
    std::vector<Position> all(n);
    std::iota(all.begin(), all.end(), Position{0});
    return all;
  }
  // Room for the whole prompt: the policy evicts once, after the last position.
  ParamMap whole = params;
  set_param(whole, "budget", static_cast<std::int64_t>(n));
  const std::unique_ptr<Policy> scorer = info.make(whole);
  const auto inputs = [&](std::size_t i) {
    const auto row = [&](std::span<const float> data, std::size_t width) {
      return data.empty() ? std::span<const float>{} : data.subspan(i * width, width);
    };
    return StepInputs{.attention = std::nullopt,
                      .key = row(prompt.keys, d),
                      .value = row(prompt.values, d),
                      .queries = row(prompt.queries, prompt.query_width)};
  };
  scorer->on_origin(inputs(0));
  for (std::size_t i = 1; i < n; ++i) scorer->on_step(static_cast<std::int64_t>(i), inputs(i));
  const std::span<const Position> victims = scorer->evict(budget);
  std::vector<Position> kept;
  kept.reserve(n - victims.size());
  std::size_t v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (v < victims.size() && victims[v] == i) {
      ++v;
    } else {
      kept.push_back(static_cast<Position>(i));
    }
  }
  return kept;
}

void check_prefill(std::string_view policy, const ParamMap& params, std::int64_t budget, std::size_t rows) {
  const Checked c = check_request(policy, params, budget);
  if (c.info->name == "snapkv" || c.info->name == "pyramidkv") check_window_fits(c.info->title, rows, c.target, c.what_target);
}

std::vector<Position> prefill(std::string_view policy, const ParamMap& params, std::int64_t budget,
                              const PrefillWindow& window) {
  const Checked c = check_request(policy, params, budget);
  const PolicyInfo& info = *c.info;
  const ParamMap& p = c.effective;
  if ((info.signals & ~kSignalAttention) != 0) {
    throw ParameterError(fmt::format("prefill: {} reads the prompt's {}, not attention rows: use prefill_signals",
                                     info.name, signal_names(info.signals)));
  }
  check_window(window);

  const std::size_t n = window.length;
  const auto b = static_cast<std::size_t>(budget);
  if (b >= n) {  // the prompt fits: nothing to compress
    std::vector<Position> all(n);
    std::iota(all.begin(), all.end(), Position{0});
    return all;
  }

  const std::string& name = info.name;
  if (name == "sliding-window") {
    return keep_highest(std::vector<std::size_t>(n, 0), protect(n, budget, 0), b);
  }
  if (name == "streaming-llm") {
    const std::int64_t sinks = param(p, "sinks");
    return keep_highest(std::vector<std::size_t>(n, 0), protect(n, budget - sinks, sinks), b);
  }
  if (name == "h2o") {
    std::vector<double> sum = column_sums(window, 0);
    if (param(p, "normalize") != 0) {
      // kvpress's ObservedAttention: each sum over the queries that could attend to it.
      for (std::size_t j = 0; j < n; ++j) sum[j] = detail::rate(sum[j], queries_covering(window, 0, j));
    }
    return keep_highest(sum, protect(n, param(p, "recentWindow"), param(p, "sinks")), b);
  }
  if (name == "scissorhands") {
    const std::int64_t history = param(p, "historyWindow");
    const std::size_t first =
        history > 0 && static_cast<std::size_t>(history) < window.rows ? window.rows - static_cast<std::size_t>(history) : 0;
    std::vector<std::uint32_t> votes(n, 0);
    for (std::size_t i = first; i < window.rows; ++i) {
      const std::size_t covered = n - window.rows + i + 1;  // positions 0 ... q
      const double share = 1.0 / static_cast<double>(covered);
      const float* row = window.weights.data() + i * n;
      for (std::size_t j = 0; j < covered; ++j) {
        if (static_cast<double>(row[j]) > share) ++votes[j];
      }
    }
    if (param(p, "normalize") != 0) {  // historyWindow is 0 here (the policy's rule)
      std::vector<double> rates(n);
      for (std::size_t j = 0; j < n; ++j) rates[j] = detail::rate(votes[j], queries_covering(window, first, j));
      return keep_highest(rates, protect(n, param(p, "recentWindow"), param(p, "sinks")), b);
    }
    return keep_highest(votes, protect(n, param(p, "recentWindow"), param(p, "sinks")), b);
  }
  if (name == "tova") {
    const float* last = window.weights.data() + (window.rows - 1) * n;
    return keep_highest(std::vector<float>(last, last + n), std::vector<bool>(n, false), b);
  }
  if (name == "snapkv" || name == "pyramidkv") {
    return snapkv_prefill(info.title, window, c.target, param(p, "poolKernel"), c.what_target);
  }
  throw ParameterError(fmt::format("prefill: policy '{}' has no prefill rule", name));
}

}  // namespace kvevict
