#include "kvevict/core/layer_budget.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict {

namespace {

constexpr const char* kTitle = "LayerBudget";
constexpr std::int64_t kMaxHeads = 1024;
constexpr double kProtected = std::numeric_limits<double>::infinity();
constexpr std::int64_t kUncapped = std::numeric_limits<std::int64_t>::max();
// The most one LayerBudget may allocate, its heads' policies included: four
// times the largest single structure a policy may size (256 MiB).
constexpr std::uint64_t kMaxLayerBytes = std::uint64_t{1} << 30;

[[noreturn]] void fail(std::string_view name, std::int64_t value, std::string_view rule) {
  throw ParameterError(fmt::format("{}: {} ({}) {}", kTitle, name, value, rule));
}

}  // namespace

std::int64_t default_head_floor(std::int64_t layer_budget, std::int64_t heads) noexcept {
  return heads < 1 ? 0 : layer_budget / (5 * heads);
}

LayerBudget::LayerBudget(std::string_view policy, const ParamMap& params, const LayerBudgetParams& layer)
    : layer_(layer) {
  if (layer.heads < 1) fail("heads", layer.heads, "must be at least 1");
  if (layer.heads > kMaxHeads) fail("heads", layer.heads, fmt::format("must be at most {}", kMaxHeads));
  if (layer.layer_budget < layer.heads) {
    fail("layerBudget", layer.layer_budget, fmt::format("must be at least heads ({}): one position a head", layer.heads));
  }
  if (layer.layer_budget > kMaxLayerBudget) fail("layerBudget", layer.layer_budget, fmt::format("must be at most {}", kMaxLayerBudget));
  floor_ = layer.head_floor == -1 ? default_head_floor(layer.layer_budget, layer.heads) : layer.head_floor;
  if (floor_ < 0) fail("headFloor", floor_, "must be at least 0 (or -1 for the default)");
  // floor x heads <= layer_budget, compared by division so a huge floor
  // cannot wrap the product.
  if (floor_ > layer.layer_budget / layer.heads) {
    fail("headFloor", floor_,
         fmt::format("times heads ({}) must be at most layerBudget ({}): the floors must fit in the budget", layer.heads,
                     layer.layer_budget));
  }
  head_budget_ = layer.layer_budget - (layer.heads - 1) * floor_;  // >= floor_ >= 0 by the check above
  const PolicyInfo& info = find_policy(policy);
  ParamMap given = params;
  for (const auto& [key, value] : params) {
    if (key == "budget" && value != head_budget_) {
      throw ParameterError(fmt::format(
          "{}: budget ({}) must equal layerBudget - (heads - 1) x headFloor ({} - {} x {} = {}), or be left out",
          kTitle, value, layer.layer_budget, layer.heads - 1, floor_, head_budget_));
    }
  }
  set_param(given, "budget", head_budget_);
  heads_.push_back(info.make(given));
  rules_ = heads_.front()->score_rules();

  // Storage is sized before it is taken: every head as large as the first,
  // plus this class's own arrays (capacity below), within kMaxLayerBytes.
  const std::uint64_t per_head = heads_.front()->memory_bytes() +
                                 (static_cast<std::uint64_t>(head_budget_) + 1) * kBytesPerSlot;
  if (per_head > kMaxLayerBytes / static_cast<std::uint64_t>(layer.heads)) {
    throw ParameterError(fmt::format(
        "{}: heads ({}) x {} bytes a head ({}, layerBudget {}) would be more than the {} bytes one layer may "
        "hold: lower heads or layerBudget",
        kTitle, layer.heads, per_head, info.name, layer.layer_budget, kMaxLayerBytes));
  }
  for (std::int64_t h = 1; h < layer.heads; ++h) heads_.push_back(info.make(given));

  // A policy whose own evict() caps what it holds below the budget
  // (PyramidKV's layer share) is capped as heads x the cap it would have with
  // the fair share, layer_budget / heads, as its own budget -- the same total
  // the layer holds with a fixed budget per head. The heads are built with
  // the larger head_budget (the most one head may hold), whose cap is larger.
  cap_total_ = kUncapped;
  if (rules_.budget_cap < std::numeric_limits<std::int64_t>::max()) {
    ParamMap fair = params;
    const std::int64_t share = layer.layer_budget / layer.heads;
    set_param(fair, "budget", share);
    std::int64_t cap = 0;
    try {
      cap = info.make(fair)->score_rules().budget_cap;
    } catch (const ParameterError& e) {
      throw ParameterError(fmt::format("{}: layerBudget ({}) / heads ({}) = {}, the fair share {}'s cap is taken at, "
                                       "is refused: {}",
                                       kTitle, layer.layer_budget, layer.heads, share, info.name, e.what()));
    }
    cap_total_ = cap > kMaxLayerBudget ? kUncapped : cap * layer.heads;
  }

  // Once every head has admitted its position the layer holds layer_budget +
  // heads; each head keeps max(floor, its protected positions).
  const std::int64_t keeps = std::max(floor_, rules_.protected_newest + rules_.protected_below);
  const std::int64_t target = std::min(layer.layer_budget, cap_total_);
  if (keeps * layer.heads > target) {
    throw ParameterError(fmt::format(
        "{}: layerBudget ({}) cannot be met: each of the {} heads keeps at least {} positions (headFloor {}; {} "
        "protects {} newest and {} first), {} in all, above the {} the layer may hold",
        kTitle, layer.layer_budget, layer.heads, keeps, floor_, info.name, rules_.protected_newest,
        rules_.protected_below, keeps * layer.heads, target));
  }

  capacity_ = static_cast<std::size_t>(head_budget_) + 1;
  const std::size_t n = heads_.size();
  positions_.resize(n * capacity_);
  scores_.resize(n * capacity_);
  entries_.resize(n * capacity_);
  quota_.resize(n);
  marked_.assign(n * capacity_, 0);
  victims_.resize(n * capacity_);
  victim_count_.assign(n, 0);
}

void LayerBudget::check_head(std::size_t head, const char* what) const {
  if (head >= heads_.size()) {
    throw ContractError(fmt::format("{}: {}: head {} is out of range (the layer has {} heads)", kTitle, what, head,
                                    heads_.size()));
  }
}

void LayerBudget::on_decode_step(std::size_t head, std::int64_t pos, Attention attn) {
  check_head(head, "on_decode_step");
  heads_[head]->on_decode_step(pos, attn);
}

void LayerBudget::on_step(std::size_t head, std::int64_t pos, const StepInputs& in) {
  check_head(head, "on_step");
  heads_[head]->on_step(pos, in);
}

void LayerBudget::on_origin(std::size_t head, const StepInputs& in) {
  check_head(head, "on_origin");
  heads_[head]->on_origin(in);
}

std::size_t LayerBudget::kept_count(std::size_t head) const {
  check_head(head, "kept_count");
  return heads_[head]->kept_count();
}

std::size_t LayerBudget::total_kept() const noexcept {
  std::size_t total = 0;
  for (const auto& h : heads_) total += h->kept_count();
  return total;
}

Policy& LayerBudget::head(std::size_t h) {
  check_head(h, "head");
  return *heads_[h];
}

std::span<const Position> LayerBudget::victims(std::size_t head) const {
  check_head(head, "victims");
  return {victims_.data() + head * capacity_, victim_count_[head]};
}

std::size_t LayerBudget::evict(std::int64_t layer_budget) {
  if (layer_budget < 0) {
    throw ContractError(fmt::format("{}: evict was asked for a budget of {}; it must be at least 0", kTitle, layer_budget));
  }
  std::fill(victim_count_.begin(), victim_count_.end(), 0);
  const std::size_t n = heads_.size();
  const auto target = static_cast<std::size_t>(std::min(layer_budget, cap_total_));
  const std::size_t total = total_kept();
  if (total <= target) return 0;
  const std::size_t needed = std::max(total - target, rules_.min_victims);

  // Every head's candidates, then the lowest (score, position, head) first,
  // each head giving up at most kept - floor.
  std::size_t count = 0;
  for (std::size_t h = 0; h < n; ++h) {
    Position* pos = positions_.data() + h * capacity_;
    double* score = scores_.data() + h * capacity_;
    const std::size_t kept = heads_[h]->scores({pos, capacity_}, {score, capacity_});
    const auto floor = static_cast<std::size_t>(floor_);
    quota_[h] = kept > floor ? kept - floor : 0;
    for (std::size_t i = 0; i < kept; ++i) {
      if (score[i] != kProtected) {
        entries_[count++] = Entry{score[i], pos[i], static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(i)};
      }
    }
  }
  std::sort(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(count),
            [](const Entry& a, const Entry& b) {
              if (a.score != b.score) return a.score < b.score;
              if (a.position != b.position) return a.position < b.position;
              return a.head < b.head;
            });
  std::size_t chosen = 0;
  for (std::size_t k = 0; k < count && chosen < needed; ++k) {
    const Entry& e = entries_[k];
    if (quota_[e.head] == 0) continue;
    --quota_[e.head];
    marked_[e.head * capacity_ + e.slot] = 1;
    ++chosen;
  }
  for (std::size_t h = 0; h < n; ++h) {
    const std::size_t kept = heads_[h]->kept_count();
    std::uint8_t* mark = marked_.data() + h * capacity_;
    Position* out = victims_.data() + h * capacity_;
    std::size_t c = 0;
    for (std::size_t i = 0; i < kept; ++i) {
      if (mark[i] != 0) {
        out[c++] = positions_[h * capacity_ + i];
        mark[i] = 0;
      }
    }
    victim_count_[h] = c;
    if (c > 0) heads_[h]->remove({out, c});
  }
  return chosen;
}

std::size_t LayerBudget::memory_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& h : heads_) bytes += h->memory_bytes();
  return bytes + positions_.size() * kBytesPerSlot;
}

}  // namespace kvevict
