// Expected Attention as the library computed it before its kernels (issue 43):
// src/core/policies/expected_attention.cpp's scalar loops, copied verbatim
// in their arithmetic -- every sum in the same order -- with the checks left
// out. The differential test (tests/policies/expected_attention_differential_test.cpp)
// holds the library at evictEvery = 1 to these victims and these scores, to
// the bit, on every SIMD target. Test-only; never built into the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvevict/core/policies/expected_attention.h"
#include "kvevict/core/policy.h"

namespace kvevict::oracle {

class LegacyExpectedAttention {
 public:
  explicit LegacyExpectedAttention(const ExpectedAttentionParams& params) : params_(params) {
    dim_ = static_cast<std::size_t>(params.head_dim);
    groups_ = static_cast<std::size_t>(params.groups);
    capacity_ = static_cast<std::size_t>(params.budget) + 1;
    positions_.resize(capacity_);
    keys_.resize(capacity_ * dim_);
    value_norms_.resize(capacity_);
    observed_.resize(capacity_);
    ring_.resize(static_cast<std::size_t>(params.query_window) * groups_ * dim_);
    score_.resize(capacity_);
    logit_.resize(capacity_);
    rope_cos_.resize(dim_ / 2);
    rope_sin_.resize(dim_ / 2);
    mean_.resize(dim_);
    mean_r_.resize(dim_);
    cov_.resize(dim_ * dim_);
    kcov_.resize(dim_);
    positions_[0] = 0;
    kept_ = 1;
  }

  void on_origin(const StepInputs& in) { admit(0, 0, in); }
  void on_step(std::int64_t pos, const StepInputs& in) {
    positions_[kept_] = static_cast<Position>(pos);
    admit(kept_, pos, in);
    ++kept_;
  }
  std::size_t kept_count() const { return kept_; }

  // The victims, ascending; the held state compacted.
  std::vector<Position> evict(std::int64_t budget) {
    const auto b = static_cast<std::size_t>(budget);
    if (kept_ <= b) return {};
    const std::size_t needed = kept_ - b;
    fill_scores();
    const std::size_t begin = first_scored();
    const std::size_t end = kept_ - std::min(static_cast<std::size_t>(params_.recent_window), kept_);
    std::vector<std::uint8_t> marked(kept_, 0);
    for (std::size_t chosen = 0; chosen < needed && begin < end; ++chosen) {
      std::size_t best = end;
      for (std::size_t i = begin; i < end; ++i) {
        if (marked[i] != 0) continue;
        if (best == end || score_[i] < score_[best]) best = i;
      }
      if (best == end) break;
      marked[best] = 1;
    }
    std::vector<Position> victims;
    std::size_t to = 0;
    for (std::size_t i = 0; i < kept_; ++i) {
      if (marked[i] != 0) {
        victims.push_back(positions_[i]);
        continue;
      }
      positions_[to] = positions_[i];
      std::copy_n(keys_.data() + i * dim_, dim_, keys_.data() + to * dim_);
      value_norms_[to] = value_norms_[i];
      observed_[to] = observed_[i];
      ++to;
    }
    kept_ = to;
    return victims;
  }

  // For the evictEvery reference: the fit now (each head's rotated mean and
  // covariance, by the loops above), one key's logit under a fit, the held
  // state, and removal of given positions.
  struct Fit {
    std::vector<std::vector<double>> mean;  // [groups][dim]
    std::vector<std::vector<double>> cov;   // [groups][dim x dim]
  };
  Fit fit() {
    Fit f;
    average_rotation();
    for (std::size_t h = 0; h < groups_; ++h) {
      head_statistics(h);
      f.mean.push_back(mean_r_);
      f.cov.push_back(cov_);
    }
    return f;
  }
  double logit_under(const Fit& f, std::size_t head, std::size_t slot) {
    mean_r_ = f.mean[head];
    cov_ = f.cov[head];
    return logit(slot);
  }
  Position position(std::size_t slot) const { return positions_[slot]; }
  bool scored(std::size_t slot) const { return is_scored(slot); }
  double value_norm(std::size_t slot) const { return value_norms_[slot]; }
  void drop(const std::vector<Position>& gone) {
    std::size_t to = 0;
    for (std::size_t i = 0; i < kept_; ++i) {
      if (std::find(gone.begin(), gone.end(), positions_[i]) != gone.end()) continue;
      positions_[to] = positions_[i];
      std::copy_n(keys_.data() + i * dim_, dim_, keys_.data() + to * dim_);
      value_norms_[to] = value_norms_[i];
      observed_[to] = observed_[i];
      ++to;
    }
    kept_ = to;
  }

  // The scores (the library's scores(), protected slots +infinity).
  std::vector<double> scores() {
    fill_scores();
    std::vector<double> out(kept_);
    const std::size_t recent = std::min(static_cast<std::size_t>(params_.recent_window), kept_);
    for (std::size_t i = 0; i < kept_; ++i) {
      const bool protect = !is_scored(i) || i >= kept_ - recent;
      out[i] = protect ? std::numeric_limits<double>::infinity() : score_[i];
    }
    return out;
  }

 private:
  void admit(std::size_t slot, std::int64_t pos, const StepInputs& in) {
    std::copy_n(in.key.data(), dim_, keys_.data() + slot * dim_);
    double sq = 0.0;
    for (std::size_t c = 0; c < dim_; ++c) sq += static_cast<double>(in.value[c]) * static_cast<double>(in.value[c]);
    value_norms_[slot] = std::sqrt(sq);
    observed_[slot] = 1;
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

  bool is_scored(std::size_t slot) const {
    return observed_[slot] != 0 && std::int64_t{positions_[slot]} >= params_.sinks;
  }
  std::size_t first_scored() const {
    std::size_t first = 0;
    while (first < kept_ && !is_scored(first)) ++first;
    return first;
  }

  void average_rotation() {
    if (params_.rope_base == 0) return;
    const double next = kept_ == 0 ? 0.0 : static_cast<double>(positions_[kept_ - 1]) + 1.0;
    const auto f = static_cast<double>(params_.future_positions);
    const std::size_t half = dim_ / 2;
    for (std::size_t i = 0; i < half; ++i) {
      const double theta = std::pow(static_cast<double>(params_.rope_base),
                                    -static_cast<double>(i) * 2.0 / static_cast<double>(dim_));
      const double ratio = std::sin(f * theta / 2.0) / (f * std::sin(theta / 2.0));
      const double turn = theta * (next + (f - 1.0) / 2.0);
      rope_cos_[i] = ratio * std::cos(turn);
      rope_sin_[i] = ratio * std::sin(turn);
    }
  }

  void head_statistics(std::size_t head) {
    const std::size_t n = ring_count_;
    const auto window = static_cast<std::size_t>(params_.query_window);
    const std::size_t width = groups_ * dim_;
    const auto query = [&](std::size_t r) {
      return ring_.data() + ((ring_start_ + r) % window) * width + head * dim_;
    };
    std::fill(mean_.begin(), mean_.end(), 0.0);
    std::fill(cov_.begin(), cov_.end(), 0.0);
    if (n > 0) {
      for (std::size_t r = 0; r < n; ++r) {
        const float* q = query(r);
        for (std::size_t c = 0; c < dim_; ++c) mean_[c] += static_cast<double>(q[c]);
      }
      for (double& m : mean_) m /= static_cast<double>(n);
      if (params_.covariance != 0) {
        for (std::size_t r = 0; r < n; ++r) {
          const float* q = query(r);
          for (std::size_t c = 0; c < dim_; ++c) kcov_[c] = static_cast<double>(q[c]) - mean_[c];
          for (std::size_t a = 0; a < dim_; ++a) {
            const double da = kcov_[a];
            double* row = cov_.data() + a * dim_;
            for (std::size_t b = a; b < dim_; ++b) row[b] += da * kcov_[b];
          }
        }
        for (std::size_t a = 0; a < dim_; ++a) {
          for (std::size_t b = a; b < dim_; ++b) {
            cov_[a * dim_ + b] /= static_cast<double>(n);
            cov_[b * dim_ + a] = cov_[a * dim_ + b];
          }
        }
      }
    }
    if (params_.rope_base == 0) {
      std::copy(mean_.begin(), mean_.end(), mean_r_.begin());
      return;
    }
    const std::size_t half = dim_ / 2;
    const auto turn = [&](double& x, double& y, std::size_t i) {
      const double c = rope_cos_[i];
      const double s = rope_sin_[i];
      const double nx = c * x - s * y;
      const double ny = s * x + c * y;
      x = nx;
      y = ny;
    };
    for (std::size_t i = 0; i < half; ++i) {
      mean_r_[i] = mean_[i];
      mean_r_[i + half] = mean_[i + half];
      turn(mean_r_[i], mean_r_[i + half], i);
    }
    if (params_.covariance == 0) return;
    for (std::size_t b = 0; b < dim_; ++b) {
      for (std::size_t i = 0; i < half; ++i) turn(cov_[i * dim_ + b], cov_[(i + half) * dim_ + b], i);
    }
    for (std::size_t a = 0; a < dim_; ++a) {
      double* row = cov_.data() + a * dim_;
      for (std::size_t i = 0; i < half; ++i) turn(row[i], row[i + half], i);
    }
  }

  double logit(std::size_t slot) const {
    const float* k = keys_.data() + slot * dim_;
    const auto d = static_cast<double>(dim_);
    double dot = 0.0;
    for (std::size_t c = 0; c < dim_; ++c) dot += mean_r_[c] * static_cast<double>(k[c]);
    double z = dot / std::sqrt(d);
    if (params_.covariance != 0) {
      double quad = 0.0;
      for (std::size_t a = 0; a < dim_; ++a) {
        const double* row = cov_.data() + a * dim_;
        double sum = 0.0;
        for (std::size_t b = 0; b < dim_; ++b) sum += row[b] * static_cast<double>(k[b]);
        quad += static_cast<double>(k[a]) * sum;
      }
      z += quad / d / 2.0;
    }
    return z;
  }

  void fill_scores() {
    for (std::size_t i = 0; i < kept_; ++i) score_[i] = 0.0;
    average_rotation();
    const std::size_t first = first_scored();
    for (std::size_t h = 0; h < groups_; ++h) {
      head_statistics(h);
      for (std::size_t at = first; at < kept_; ++at) logit_[at] = logit(at);
      double largest = -std::numeric_limits<double>::infinity();
      for (std::size_t i = first; i < kept_; ++i) largest = std::max(largest, logit_[i]);
      double sum = 0.0;
      for (std::size_t i = first; i < kept_; ++i) {
        logit_[i] = std::exp(logit_[i] - largest);
        sum += logit_[i];
      }
      for (std::size_t i = first; i < kept_; ++i) score_[i] += logit_[i] / sum;
    }
    for (std::size_t i = first; i < kept_; ++i) {
      score_[i] /= static_cast<double>(groups_);
      if (params_.value_norm != 0) score_[i] *= value_norms_[i];
    }
  }

  ExpectedAttentionParams params_;
  std::size_t dim_ = 0;
  std::size_t groups_ = 0;
  std::size_t capacity_ = 0;
  std::size_t kept_ = 0;
  std::vector<Position> positions_;
  std::vector<float> keys_;
  std::vector<double> value_norms_;
  std::vector<std::uint8_t> observed_;
  std::vector<float> ring_;
  std::size_t ring_start_ = 0;
  std::size_t ring_count_ = 0;
  std::vector<double> score_;
  std::vector<double> logit_;
  std::vector<double> rope_cos_;
  std::vector<double> rope_sin_;
  std::vector<double> mean_;
  std::vector<double> mean_r_;
  std::vector<double> cov_;
  std::vector<double> kcov_;
};

}  // namespace kvevict::oracle
