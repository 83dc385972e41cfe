#include "kvevict/core/policies/expected_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "policies/common.h"
#include "policies/describe.h"
#include "policies/key_signals.h"
#include "policies/key_signals_kernels.h"
#include "policies/removal.h"

namespace kvevict {

namespace {
constexpr std::string_view kTitle = "ExpectedAttention";
// Keys and the query ring are allocated at construction; these bounds keep a
// mistyped size from asking for more than a GiB of either.
constexpr std::int64_t kMaxFloats = std::int64_t{1} << 28;
}  // namespace

ExpectedAttention::ExpectedAttention(const ExpectedAttentionParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  detail::check_at_least(kTitle, "headDim", params.head_dim, 1);
  detail::check_at_most(kTitle, "headDim", params.head_dim, 1024);
  detail::check_at_least(kTitle, "groups", params.groups, 1);
  detail::check_at_most(kTitle, "groups", params.groups, 64);
  detail::check_at_least(kTitle, "sinks", params.sinks, 0);
  detail::check_at_least(kTitle, "recentWindow", params.recent_window, 0);
  detail::check_sinks_and_recent(kTitle, params.sinks, params.recent_window, params.budget, "the scores");
  detail::check_at_least(kTitle, "queryWindow", params.query_window, 1);
  detail::check_at_most(kTitle, "queryWindow", params.query_window, 65536);
  detail::check_at_least(kTitle, "futurePositions", params.future_positions, 1);
  detail::check_at_most(kTitle, "futurePositions", params.future_positions, std::int64_t{1} << 24);
  if (params.rope_base != 0 && params.rope_base < 2) {
    detail::fail_param(kTitle, "ropeBase", params.rope_base, "must be 0 (no RoPE) or at least 2");
  }
  if (params.rope_base != 0 && params.head_dim % 2 != 0) {
    detail::fail_param(kTitle, "headDim", params.head_dim,
                       "must be even when ropeBase > 0 (RoPE rotates pairs of dimensions)");
  }
  detail::check_flag(kTitle, "covariance", params.covariance);
  detail::check_flag(kTitle, "valueNorm", params.value_norm);
  detail::check_at_least(kTitle, "evictEvery", params.evict_every, 1);
  detail::check_at_most(kTitle, "evictEvery", params.evict_every, 65536);
  if ((params.budget + 1) * params.head_dim > kMaxFloats) {
    detail::fail_param(kTitle, "budget", params.budget,
                       fmt::format("x headDim ({}) keys would take more than 1 GiB", params.head_dim));
  }
  if (params.query_window * params.groups * params.head_dim > kMaxFloats) {
    detail::fail_param(kTitle, "queryWindow", params.query_window,
                       fmt::format("x groups ({}) x headDim ({}) queries would take more than 1 GiB", params.groups,
                                   params.head_dim));
  }
  dim_ = static_cast<std::size_t>(params.head_dim);
  groups_ = static_cast<std::size_t>(params.groups);
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  positions_.resize(capacity_);
  keys_.resize(capacity_ * dim_);
  value_norms_.resize(capacity_);
  observed_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  ring_.resize(static_cast<std::size_t>(params.query_window) * groups_ * dim_);
  score_.resize(capacity_);
  logit_.resize(capacity_);
  rope_cos_.resize(dim_ / 2);
  rope_sin_.resize(dim_ / 2);
  mean_.resize(dim_);
  mean_r_.resize(dim_);
  cov_.resize(dim_ * dim_);
  kcov_.resize(4 * dim_);
  tile_.resize(detail::kKeyTile * dim_);
  // theta_i and the averaged rotation's scale depend on the params alone:
  // computed once, by the expressions average_rotation() used to evaluate at
  // every eviction (the same bits).
  rope_theta_.resize(dim_ / 2);
  rope_ratio_.resize(dim_ / 2);
  if (params.rope_base != 0) {
    const auto f = static_cast<double>(params.future_positions);
    for (std::size_t i = 0; i < dim_ / 2; ++i) {
      const double theta = std::pow(static_cast<double>(params.rope_base),
                                    -static_cast<double>(i) * 2.0 / static_cast<double>(dim_));
      rope_theta_[i] = theta;
      rope_ratio_[i] = std::sin(f * theta / 2.0) / (f * std::sin(theta / 2.0));
    }
  }
  cached_ = params.evict_every > 1;
  if (cached_) {
    fit_mean_.resize(groups_ * dim_);
    if (params.covariance != 0) fit_cov_.resize(groups_ * dim_ * dim_);
    fit_logit_.resize(groups_ * capacity_);
    has_logit_.resize(capacity_);
  }
  positions_[0] = 0;  // spec/domain.md 1.2: position 0 is held, unobserved until on_origin
  kept_ = 1;
}

std::size_t ExpectedAttention::memory_bytes() const noexcept {
  std::size_t bytes = capacity_ * (30 + 4 * dim_) + ring_.size() * sizeof(float) + 8 * (dim_ * dim_ + 8 * dim_) +
                      8 * detail::kKeyTile * dim_;
  if (cached_) {
    bytes += capacity_ * (1 + 8 * groups_) + 8 * groups_ * dim_;
    if (params_.covariance != 0) bytes += 8 * groups_ * dim_ * dim_;
  }
  return bytes;
}

void ExpectedAttention::on_decode_step(std::int64_t /*pos*/, Attention /*attn*/) {
  detail::fail_attention_only(kTitle, kSignals);
}

void ExpectedAttention::check_signals(const StepInputs& in) const {
  detail::check_step_signals(kTitle, kSignals, in, {dim_, groups_});
}

void ExpectedAttention::admit(std::size_t slot, std::int64_t pos, const StepInputs& in) noexcept {
  std::copy_n(in.key.data(), dim_, keys_.data() + slot * dim_);
  value_norms_[slot] = std::sqrt(detail::squared_norm(in.value.data(), dim_));
  observed_[slot] = 1;
  if (cached_) has_logit_[slot] = 0;  // scored under the last fit when next scored
  // kvpress fits the Gaussian to the queries after the first n_sink: the
  // sinks' queries are outliers.
  if (pos < params_.sinks) return;
  const auto window = static_cast<std::size_t>(params_.query_window);
  const std::size_t width = groups_ * dim_;
  std::size_t at = 0;
  if (ring_count_ < window) {
    at = (ring_start_ + ring_count_) % window;
    ++ring_count_;
  } else {
    at = ring_start_;
    ring_start_ = (ring_start_ + 1) % window;
  }
  std::copy_n(in.queries.data(), width, ring_.data() + at * width);
}

void ExpectedAttention::on_origin(const StepInputs& in) {
  if (stepped_ || observed_[0] != 0 || kept_ == 0 || positions_[0] != 0) detail::fail_origin(kTitle, !stepped_);
  check_signals(in);
  admit(0, 0, in);
}

void ExpectedAttention::on_step(std::int64_t pos, const StepInputs& in) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  detail::check_admission(kTitle, pos, newest, kept_ + 1, capacity_, params_.budget);
  check_signals(in);
  positions_[kept_] = static_cast<Position>(pos);
  admit(kept_, pos, in);
  ++kept_;
  stepped_ = true;
}

bool ExpectedAttention::is_scored(std::size_t slot) const noexcept {
  return observed_[slot] != 0 && std::int64_t{positions_[slot]} >= params_.sinks;
}

std::size_t ExpectedAttention::first_scored() const noexcept {
  // The scored slots are one range, from this slot to the newest: only sinks
  // (a prefix, positions ascending) and the unobserved position 0 (slot 0)
  // are not scored.
  std::size_t first = 0;
  while (first < kept_ && !is_scored(first)) ++first;
  return first;
}

bool ExpectedAttention::is_protected(std::size_t slot) const noexcept {
  const std::size_t recent = std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  return !is_scored(slot) || slot >= kept_ - recent;
}

void ExpectedAttention::average_rotation() const noexcept {
  if (params_.rope_base == 0) return;
  // RoPE at position t turns pair i by t * theta_i. Its mean over t = a ...
  // a + F - 1 is a turn by theta_i (a + (F - 1) / 2) scaled by
  // sin(F theta_i / 2) / (F sin(theta_i / 2)) (the Dirichlet kernel), in
  // closed form rather than F cosines. theta_i is in (0, 1], so the sine
  // in the ratio (computed at construction) is never 0.
  const double next = kept_ == 0 ? 0.0 : static_cast<double>(positions_[kept_ - 1]) + 1.0;
  const auto f = static_cast<double>(params_.future_positions);
  const std::size_t half = dim_ / 2;
  for (std::size_t i = 0; i < half; ++i) {
    const double theta = rope_theta_[i];
    const double ratio = rope_ratio_[i];
    const double turn = theta * (next + (f - 1.0) / 2.0);
    rope_cos_[i] = ratio * std::cos(turn);
    rope_sin_[i] = ratio * std::sin(turn);
  }
}

void ExpectedAttention::head_statistics(std::size_t head) const noexcept {
  // Every element is its own chain of float64 operations in the order the
  // definition gives (the kernels' lanes run across elements, never across
  // the terms of one sum): the same bits on every SIMD target.
  const std::size_t n = ring_count_;
  const auto window = static_cast<std::size_t>(params_.query_window);
  const std::size_t width = groups_ * dim_;
  const auto query = [&](std::size_t r) { return ring_.data() + ((ring_start_ + r) % window) * width + head * dim_; };
  std::fill(mean_.begin(), mean_.end(), 0.0);
  if (params_.covariance != 0) std::fill(cov_.begin(), cov_.end(), 0.0);
  if (n > 0) {
    // Oldest to newest, each component in float64, then one division.
    for (std::size_t r = 0; r < n; ++r) detail::add_widened(mean_.data(), query(r), dim_);
    for (double& m : mean_) m /= static_cast<double>(n);
    if (params_.covariance != 0) {
      // The population covariance (divided by n, as kvpress), upper triangle
      // then mirrored: x * y and y * x round alike.
      const auto centre = [&](std::size_t r, double* to) {
        const float* q = query(r);
        for (std::size_t c = 0; c < dim_; ++c) to[c] = static_cast<double>(q[c]) - mean_[c];
      };
      std::size_t r = 0;
      for (; r + 4 <= n; r += 4) {  // four queries a pass over the matrix, each element's sum still in order
        for (std::size_t j = 0; j < 4; ++j) centre(r + j, kcov_.data() + j * dim_);
        detail::add_outer_upper4(cov_.data(), kcov_.data(), dim_);
      }
      for (; r < n; ++r) {
        centre(r, kcov_.data());
        detail::add_outer_upper(cov_.data(), kcov_.data(), dim_);
      }
      for (std::size_t a = 0; a < dim_; ++a) {
        for (std::size_t b = a; b < dim_; ++b) {
          cov_[a * dim_ + b] /= static_cast<double>(n);
          cov_[b * dim_ + a] = cov_[a * dim_ + b];
        }
      }
    }
  }
  std::copy(mean_.begin(), mean_.end(), mean_r_.begin());
  if (params_.rope_base == 0) return;
  // mu' = R mu; Sigma' = R Sigma R^T (columns turned, then rows), R the
  // averaged rotation: pair (i, i + d/2) maps (x, y) to (c x - s y, s x + c y).
  const std::size_t half = dim_ / 2;
  detail::turn_pairs(mean_r_.data(), mean_r_.data() + half, rope_cos_.data(), rope_sin_.data(), half);
  if (params_.covariance == 0) return;
  for (std::size_t i = 0; i < half; ++i) {
    detail::turn_rows(cov_.data() + i * dim_, cov_.data() + (i + half) * dim_, rope_cos_[i], rope_sin_[i], dim_);
  }
  for (std::size_t a = 0; a < dim_; ++a) {
    double* row = cov_.data() + a * dim_;
    detail::turn_pairs(row, row + half, rope_cos_.data(), rope_sin_.data(), half);
  }
}

void ExpectedAttention::logits(std::size_t from, std::size_t to, const double* mean, const double* cov,
                               double* out) const noexcept {
  // Per key z = mu'.k / sqrt(d) + (k' Sigma' k / d) / 2, every sum in index
  // order (k' Sigma' k row by row); the kernel's lanes are keys.
  if (from >= to) return;
  detail::expected_logits(keys_.data() + from * dim_, to - from, dim_, mean, params_.covariance != 0 ? cov : nullptr,
                          tile_.data(), out + from);
}

void ExpectedAttention::add_softmax(const double* z, std::size_t first) const noexcept {
  // The softmax over the scored positions (held, observed, not sinks), as
  // kvpress takes it over every key after the sinks: the largest logit
  // subtracted, exp, the sum added in slot order.
  double largest = -std::numeric_limits<double>::infinity();
  for (std::size_t i = first; i < kept_; ++i) largest = std::max(largest, z[i]);
  double sum = 0.0;
  for (std::size_t i = first; i < kept_; ++i) {
    logit_[i] = std::exp(z[i] - largest);
    sum += logit_[i];
  }
  for (std::size_t i = first; i < kept_; ++i) score_[i] += logit_[i] / sum;
}

void ExpectedAttention::finish_scores(std::size_t first) const noexcept {
  for (std::size_t i = first; i < kept_; ++i) {
    score_[i] /= static_cast<double>(groups_);  // the mean over the query heads
    if (params_.value_norm != 0) score_[i] *= value_norms_[i];
  }
}

void ExpectedAttention::fill_scores() const noexcept {
  for (std::size_t i = 0; i < kept_; ++i) score_[i] = 0.0;
  average_rotation();
  const std::size_t first = first_scored();
  for (std::size_t h = 0; h < groups_; ++h) {
    head_statistics(h);
    logits(first, kept_, mean_r_.data(), cov_.data(), logit_.data());
    add_softmax(logit_.data(), first);
  }
  finish_scores(first);
}

void ExpectedAttention::cached_scores(bool refit) const noexcept {
  const std::size_t first = first_scored();
  if (refit) {
    // A fresh fit, kept: fill_scores()'s statistics and logits, stored.
    average_rotation();
    for (std::size_t h = 0; h < groups_; ++h) {
      head_statistics(h);
      std::copy(mean_r_.begin(), mean_r_.end(), fit_mean_.begin() + static_cast<std::ptrdiff_t>(h * dim_));
      if (params_.covariance != 0) {
        std::copy(cov_.begin(), cov_.end(), fit_cov_.begin() + static_cast<std::ptrdiff_t>(h * dim_ * dim_));
      }
      logits(first, kept_, mean_r_.data(), cov_.data(), fit_logit_.data() + h * capacity_);
    }
    std::fill(has_logit_.begin(), has_logit_.begin() + static_cast<std::ptrdiff_t>(first), std::uint8_t{0});
    std::fill(has_logit_.begin() + static_cast<std::ptrdiff_t>(first), has_logit_.begin() + static_cast<std::ptrdiff_t>(kept_),
              std::uint8_t{1});
  } else {
    // The keys admitted since the fit (the newest slots), under that fit.
    std::size_t at = first;
    while (at < kept_) {
      if (has_logit_[at] != 0) {
        ++at;
        continue;
      }
      std::size_t end = at;
      while (end < kept_ && has_logit_[end] == 0) ++end;
      for (std::size_t h = 0; h < groups_; ++h) {
        const double* cov = params_.covariance != 0 ? fit_cov_.data() + h * dim_ * dim_ : nullptr;
        logits(at, end, fit_mean_.data() + h * dim_, cov, fit_logit_.data() + h * capacity_);
      }
      std::fill(has_logit_.begin() + static_cast<std::ptrdiff_t>(at), has_logit_.begin() + static_cast<std::ptrdiff_t>(end),
                std::uint8_t{1});
      at = end;
    }
  }
  for (std::size_t i = 0; i < kept_; ++i) score_[i] = 0.0;
  for (std::size_t h = 0; h < groups_; ++h) add_softmax(fit_logit_.data() + h * capacity_, first);
  finish_scores(first);
}

void ExpectedAttention::score_call() {
  if (!cached_) {
    fill_scores();
    return;
  }
  const bool refit = refit_due();
  if (refit) {
    fitted_ = true;
    since_fit_ = 0;
  }
  ++since_fit_;
  cached_scores(refit);
}

std::size_t ExpectedAttention::compact_marked() noexcept {
  return detail::compact(kept_, marked_.data(), positions_.data(), victims_.data(),
                         [this](std::size_t to, std::size_t from, std::size_t n) {
                           std::copy_n(keys_.data() + from * dim_, n * dim_, keys_.data() + to * dim_);
                           std::copy_n(value_norms_.data() + from, n, value_norms_.data() + to);
                           std::copy_n(observed_.data() + from, n, observed_.data() + to);
                           if (!cached_) return;
                           std::copy_n(has_logit_.data() + from, n, has_logit_.data() + to);
                           for (std::size_t h = 0; h < groups_; ++h) {
                             double* z = fit_logit_.data() + h * capacity_;
                             std::copy_n(z + from, n, z + to);
                           }
                         });
}

std::span<const Position> ExpectedAttention::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  if (kept_ <= b) return {};
  const std::size_t needed = kept_ - b;
  score_call();  // once per call, before the first victim
  // The protected slots are a prefix (sinks; the unobserved position 0) and
  // a suffix (the recent window): the candidates are one range between them.
  const std::size_t begin = first_scored();
  const std::size_t end = kept_ - std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  if (begin < end) detail::mark_argmin_victims(score_.data(), marked_.data(), begin, end, needed);
  return {victims_.data(), compact_marked()};
}

double ExpectedAttention::logit_of(std::int64_t pos, std::int64_t head) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot || observed_[slot] == 0 || head < 0 || head >= params_.groups) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  average_rotation();
  head_statistics(static_cast<std::size_t>(head));
  double z = 0.0;
  detail::expected_logits(keys_.data() + slot * dim_, 1, dim_, mean_r_.data(),
                          params_.covariance != 0 ? cov_.data() : nullptr, tile_.data(), &z);
  return z;
}

double ExpectedAttention::score_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot || !is_scored(slot)) return -1.0;
  if (cached_ && !refit_due()) {
    cached_scores(false);  // what the next call will use: the fit's logits
  } else {
    fill_scores();  // a refit's scores are a fresh fit's
  }
  return score_[slot];
}

std::size_t ExpectedAttention::scores(std::span<Position> positions, std::span<double> scores) {
  detail::check_score_spans(kTitle, positions.size(), scores.size(), kept_);
  score_call();
  for (std::size_t i = 0; i < kept_; ++i) {
    positions[i] = positions_[i];
    scores[i] = is_protected(i) ? detail::kProtectedScore : score_[i];
  }
  return kept_;
}

void ExpectedAttention::remove(std::span<const Position> victims) {
  detail::mark_removal(kTitle, {positions_.data(), kept_}, victims, marked_.data(),
                       [&](std::size_t slot) { return !is_protected(slot); });
  compact_marked();
}

ScoreRules ExpectedAttention::score_rules() const {
  ScoreRules rules;
  // The unobserved position 0 is protected too: one more at the start.
  rules.protected_newest = params_.recent_window;
  rules.protected_below = std::max<std::int64_t>(params_.sinks, 1);
  return rules;
}

namespace detail {
const PolicyInfo& expected_attention_info() {
  static const PolicyInfo info = describe<ExpectedAttention, ExpectedAttentionParams>(
      "expected-attention", "ExpectedAttention",
      "Reads keys, values and queries, not attention: the key the modelled future queries would attend least goes.",
      {{"budget", &ExpectedAttentionParams::budget, "positions held after each eviction"},
       {"headDim", &ExpectedAttentionParams::head_dim, "floats in a key, a value and a query head (the model's)"},
       {"groups", &ExpectedAttentionParams::groups, "query heads sharing the cache (the model's)"},
       {"sinks", &ExpectedAttentionParams::sinks,
        "first positions never evicted, their queries not modelled (kvpress n_sink)"},
       {"recentWindow", &ExpectedAttentionParams::recent_window,
        "newest held positions that are never evicted (0: as published)"},
       {"queryWindow", &ExpectedAttentionParams::query_window,
        "the last queries (positions >= sinks) the Gaussian is fitted to"},
       {"futurePositions", &ExpectedAttentionParams::future_positions,
        "next positions RoPE is averaged over (kvpress n_future_positions)"},
       {"ropeBase", &ExpectedAttentionParams::rope_base, "the model's RoPE base; 0: no RoPE"},
       {"covariance", &ExpectedAttentionParams::covariance, "1: the logit's covariance term (use_covariance)"},
       {"valueNorm", &ExpectedAttentionParams::value_norm, "1: scores scaled by ||v|| (use_vnorm)"},
       {"evictEvery", &ExpectedAttentionParams::evict_every,
        "1: refit the Gaussian at every eviction (as published); k: every k-th, the keys between scored by the last fit"}},
      {QueryInfo{"logitOf", 2,
                 [](const Policy& p, std::span<const std::int64_t> args) {
                   return static_cast<const ExpectedAttention&>(p).logit_of(args[0], args[1]);
                 }},
       query1<ExpectedAttention>("scoreOf", [](const ExpectedAttention& p, std::int64_t pos) { return p.score_of(pos); }),
       query0<ExpectedAttention>("modelledQueries",
                                 [](const ExpectedAttention& p) { return p.modelled_queries(); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict
