// The oracle: the plainest possible implementation of each policy, straight
// from spec/policies.md, kept in the test tree. The library's fast paths must
// choose exactly the victims these choose (tests/differential_test.cpp), and
// the benchmarks report speed against them (bench/).
//
// Plain on purpose: one record per held position in a std::vector, a strict
// argmin per victim, std::vector::erase for each removal, no precomputation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"

namespace kvevict::oracle {

inline std::int64_t param(const ParamMap& p, const std::string& key, std::int64_t fallback) {
  for (const auto& [k, v] : p) {
    if (k == key) return v;
  }
  return fallback;
}

struct Record {
  Position pos = 0;
  double score = 0.0;          // H2O: sum; Scissorhands: votes; TOVA: last weight
  bool observed = false;       // TOVA
  std::uint32_t steps = 0;     // H2O / Scissorhands with normalize=1: steps that scored it
  std::vector<float> ring;     // SnapKV / PyramidKV
  std::vector<bool> voted;     // Scissorhands with a history window
};

// One class for all seven: the spec's rules selected by name.
class Oracle final : public Policy {
 public:
  Oracle(std::string name, const ParamMap& p)
      : name_(std::move(name)),
        budget_(param(p, "budget", 512)),
        recent_(param(p, "recentWindow", name_ == "tova" || name_ == "sliding-window" ||
                                                  name_ == "streaming-llm"
                                              ? 0
                                              : 32)),
        sinks_(param(p, "sinks", name_ == "streaming-llm" ? 4 : 0)),
        obs_(param(p, "obsWindow", 16)),
        kernel_(param(p, "poolKernel", 7)),
        history_(param(p, "historyWindow", 0)),
        drop_(param(p, "dropAmount", 1)),
        normalize_(param(p, "normalize", 0) != 0) {
    if (name_ == "pyramidkv") {
      const std::int64_t layers = param(p, "numLayers", 1);
      const std::int64_t layer = param(p, "layer", 0);
      const std::int64_t r = param(p, "pyramidRatio", 4);
      const std::int64_t share =
          layers <= 1 ? budget_ : (2 * budget_ * (r * (layers - 1) - layer * (r - 1))) / ((r + 1) * (layers - 1));
      effective_ = std::max(share, recent_ + 1);
    }
    held_.push_back(fresh(0));
  }

  std::string_view name() const noexcept override { return name_; }
  std::size_t kept_count() const noexcept override { return held_.size(); }
  std::size_t memory_bytes() const noexcept override { return 0; }

  void on_decode_step(std::int64_t pos, Attention attn) override {
    if (attn) {
      const std::size_t n = std::min(attn->size(), held_.size());
      if (name_ == "h2o") {
        for (std::size_t i = 0; i < n; ++i) {
          held_[i].score += (*attn)[i];
          ++held_[i].steps;
        }
      } else if (name_ == "scissorhands" && !attn->empty()) {
        const double share = 1.0 / static_cast<double>(attn->size());
        for (std::size_t i = 0; i < held_.size(); ++i) {
          const bool vote = i < n && static_cast<double>((*attn)[i]) > share;
          if (i < n) ++held_[i].steps;
          if (history_ > 0) {
            held_[i].voted.push_back(vote);
            if (std::ssize(held_[i].voted) > history_) held_[i].voted.erase(held_[i].voted.begin());
            held_[i].score = static_cast<double>(std::count(held_[i].voted.begin(), held_[i].voted.end(), true));
          } else if (vote) {
            held_[i].score += 1;
          }
        }
      } else if (name_ == "tova") {
        for (std::size_t i = 0; i < n; ++i) {
          held_[i].score = (*attn)[i];
          held_[i].observed = true;
        }
      } else if (name_ == "snapkv" || name_ == "pyramidkv") {
        for (std::size_t i = 0; i < n; ++i) held_[i].ring[cursor_] = (*attn)[i];
        cursor_ = (cursor_ + 1) % static_cast<std::size_t>(obs_);
      }
    }
    held_.push_back(fresh(static_cast<Position>(pos)));
  }

  std::span<const Position> evict(std::int64_t budget) override {
    victims_.clear();
    std::int64_t target = budget;
    if (name_ == "pyramidkv") target = std::min(budget, effective_);
    const auto kept = static_cast<std::int64_t>(held_.size());
    if (kept <= target) return {};
    std::int64_t needed = kept - target;
    if (name_ == "scissorhands") needed = std::max(needed, drop_);

    if (name_ == "sliding-window" || name_ == "streaming-llm") {
      // Oldest non-sink first.
      for (std::size_t i = 0; i < held_.size() && std::ssize(victims_) < needed; ++i) {
        if (std::int64_t{held_[i].pos} >= sinks_) victims_.push_back(held_[i].pos);
      }
    } else {
      std::vector<double> key(held_.size());
      for (std::size_t i = 0; i < held_.size(); ++i) key[i] = value_of("rankOf", held_[i]);
      if (name_ == "snapkv" || name_ == "pyramidkv") {
        std::vector<double> sums(held_.size());
        for (std::size_t i = 0; i < held_.size(); ++i) {
          for (const float w : held_[i].ring) sums[i] += w;
        }
        const auto r = static_cast<std::int64_t>((kernel_ - 1) / 2);
        for (std::int64_t i = 0; i < std::ssize(held_); ++i) {
          double best = -1.0;
          for (std::int64_t j = std::max<std::int64_t>(0, i - r); j <= std::min(kept - 1, i + r); ++j) {
            best = std::max(best, sums[static_cast<std::size_t>(j)]);
          }
          key[static_cast<std::size_t>(i)] = best;
        }
      }
      std::vector<bool> chosen(held_.size(), false);
      const std::int64_t end = kept - std::min(recent_, kept);
      for (std::int64_t v = 0; v < needed; ++v) {
        std::int64_t best = -1;
        for (std::int64_t i = 0; i < end; ++i) {
          const auto& rec = held_[static_cast<std::size_t>(i)];
          if (chosen[static_cast<std::size_t>(i)] || std::int64_t{rec.pos} < sinks_) continue;
          if (name_ == "tova" && !rec.observed) continue;
          if (best < 0 || key[static_cast<std::size_t>(i)] < key[static_cast<std::size_t>(best)]) best = i;
        }
        if (best < 0) break;
        chosen[static_cast<std::size_t>(best)] = true;
      }
      for (std::size_t i = 0; i < held_.size(); ++i) {
        if (chosen[i]) victims_.push_back(held_[i].pos);
      }
    }
    for (const Position v : victims_) {
      held_.erase(std::find_if(held_.begin(), held_.end(), [&](const Record& r) { return r.pos == v; }));
    }
    return victims_;
  }

  // What the introspection query `query` reports for `pos`, from the spec's
  // definitions: votesOf the votes, scoreOf the cumulative sum, lastAttentionOf
  // the last weight (-1 for a position no present vector has covered yet),
  // windowScoreOf the unpooled ring sum (ring-index order, float64). -1 for a
  // position not held.
  // With normalize=1 scoreOf (H2O) and rankOf (Scissorhands) divide by the
  // steps that scored the position (0 when none has).
  double query(std::string_view query, Position pos) const {
    for (const Record& r : held_) {
      if (r.pos == pos) return value_of(query, r);
    }
    return -1.0;
  }

  // The same for every held position, ascending by position, into `out`.
  void query_all(std::string_view query, std::vector<std::pair<Position, double>>& out) const {
    out.clear();
    for (const Record& r : held_) out.emplace_back(r.pos, value_of(query, r));
  }

 private:
  double value_of(std::string_view query, const Record& r) const {
    if (query == "lastAttentionOf") return r.observed ? r.score : -1.0;
    if (query == "windowScoreOf") {
      double sum = 0.0;
      for (const float w : r.ring) sum += static_cast<double>(w);
      return sum;
    }
    const bool rank = query == "rankOf" || (query == "scoreOf" && name_ == "h2o");
    if (rank && normalize_) return r.steps == 0 ? 0.0 : r.score / static_cast<double>(r.steps);
    return r.score;  // votesOf, scoreOf, and the ranks without normalize
  }

  Record fresh(Position pos) const {
    Record r;
    r.pos = pos;
    if (name_ == "snapkv" || name_ == "pyramidkv") r.ring.assign(static_cast<std::size_t>(obs_), 0.0F);
    return r;
  }

  std::string name_;
  std::int64_t budget_;
  std::int64_t recent_;
  std::int64_t sinks_;
  std::int64_t obs_;
  std::int64_t kernel_;
  std::int64_t history_;
  std::int64_t drop_;
  bool normalize_;
  std::int64_t effective_ = 0;
  std::size_t cursor_ = 0;
  std::vector<Record> held_;
  std::vector<Position> victims_;
};

}  // namespace kvevict::oracle
