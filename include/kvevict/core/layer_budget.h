// One budget per layer shared by its KV heads (AdaKV-style; docs/paged.md),
// over any scoring policy.
//
// A LayerBudget owns one policy instance per head. Each head is stepped with
// its own attention; at eviction the lowest-scoring positions across all the
// layer's heads go (Policy::scores; ties to the lower position, then the lower
// head) until the layer holds at most `layer_budget`, each head keeping at
// least `head_floor` positions. With a fixed total, a head whose attention is
// concentrated on a few positions leaves low scores elsewhere and gives room
// to a head that spreads its attention.
//
// With one head it decides exactly as the policy's own evict() does.
// Storage is sized at construction; no call allocates after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"

namespace kvevict {

// The largest layer budget (positions a layer's heads hold together).
inline constexpr std::int64_t kMaxLayerBudget = std::int64_t{1} << 26;

struct LayerBudgetParams {
  std::int64_t heads = 8;           // KV heads in the layer, >= 1
  std::int64_t layer_budget = 4096;  // positions the heads hold together after each eviction
  // The fewest positions one head keeps; -1: AdaKV's safeguard, a fifth of
  // the fair share, floor(layer_budget / (5 * heads)).
  std::int64_t head_floor = -1;
};

// The default floor: floor(layer_budget / (5 * heads)).
std::int64_t default_head_floor(std::int64_t layer_budget, std::int64_t heads) noexcept;

class LayerBudget {
 public:
  // Builds `heads` instances of `policy` from `params`, each with budget
  // layer_budget - (heads - 1) * head_floor (the most one head can hold; a
  // `budget` in `params` must equal it or be left out). Throws ParameterError
  // naming the parameter for heads < 1, a floor below 0 or above the fair
  // share, or a layer budget that cannot be met once every head has admitted
  // a position (each head keeps max(floor, the policy's protected positions)),
  // and for storage above 1 GiB (heads x each head's policy and slots).
  LayerBudget(std::string_view policy, const ParamMap& params, const LayerBudgetParams& layer);

  // One decode step of one head (step every head once per decode step).
  void on_decode_step(std::size_t head, std::int64_t pos, Attention attn);
  // The same with every signal the caller has, and position 0's signals
  // before the first step (Policy::on_step, Policy::on_origin).
  void on_step(std::size_t head, std::int64_t pos, const StepInputs& in);
  void on_origin(std::size_t head, const StepInputs& in);

  // Evicts so that the heads hold at most min(layer_budget, heads x the
  // policy's cap at the fair share layer_budget / heads -- PyramidKV's layer
  // share, so a layer holds what it would with a fixed budget per head)
  // positions together -- at least min_victims when an
  // eviction is due -- and returns how many went; victims(h) names head h's,
  // ascending. Fewer when every remaining position is protected or at a floor.
  std::size_t evict(std::int64_t layer_budget);
  std::span<const Position> victims(std::size_t head) const;

  std::size_t heads() const noexcept { return heads_.size(); }
  std::size_t kept_count(std::size_t head) const;
  std::size_t total_kept() const noexcept;
  std::int64_t head_floor() const noexcept { return floor_; }
  std::int64_t head_budget() const noexcept { return head_budget_; }
  std::int64_t layer_budget() const noexcept { return layer_.layer_budget; }
  Policy& head(std::size_t h);
  std::size_t memory_bytes() const noexcept;

 private:
  struct Entry {
    double score;
    Position position;
    std::uint32_t head;
    std::uint32_t slot;
  };
  void check_head(std::size_t head, const char* what) const;
  // position 4 + score 8 + entry + mark 1 + victim 4 for each slot of each head.
  static constexpr std::uint64_t kBytesPerSlot = 4 + 8 + sizeof(Entry) + 1 + 4;

  std::vector<std::unique_ptr<Policy>> heads_;
  LayerBudgetParams layer_;
  std::int64_t floor_;
  std::int64_t head_budget_;
  ScoreRules rules_;
  std::int64_t cap_total_;  // the most the layer holds whatever its budget: heads x the fair share's cap
  std::size_t capacity_;  // per head: head_budget + 1
  std::vector<Position> positions_;  // [head][capacity]
  std::vector<double> scores_;       // [head][capacity]
  std::vector<Entry> entries_;
  std::vector<std::size_t> quota_;
  std::vector<std::uint8_t> marked_;  // [head][capacity]
  std::vector<Position> victims_;     // [head][capacity]
  std::vector<std::size_t> victim_count_;
};

}  // namespace kvevict
