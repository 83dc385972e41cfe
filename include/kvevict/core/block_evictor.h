// Block (page) eviction over any scoring policy (docs/paged.md).
//
// Inference engines store the KV cache in fixed-size blocks of `block_size`
// tokens and give memory back a whole block at a time. A BlockEvictor owns one
// policy instance -- one per (layer, KV head) or per layer, as the engine's
// block table is -- feeds it the decode steps, and at eviction time reads the
// policy's per-position scores (Policy::scores), reduces each full block's
// scores to one, and removes the lowest-scoring blocks outside the start and
// recent areas, ties to the lower block index.
//
// Logical blocks index the held positions in ascending order: block j holds
// the j-th run of `block_size` held positions; the last block may be partial.
// Evicting whole blocks keeps every block but the last full, as a block table
// does. Only full blocks are candidates; the start area (the first
// start_blocks blocks) and the recent area (the last recent_blocks full
// blocks, and the partial block) are never touched, nor is any block holding
// a position the policy itself protects (its recent window, its sinks, TOVA's
// unobserved positions).
//
// With block_size 1, empty start and recent areas and the sum reduction, the
// victims are exactly those of the policy's own evict() (tests/block_test.cpp).
//
// Storage is sized at construction; no call allocates after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"

namespace kvevict {

// How a block's score is made from its positions' scores.
enum class BlockScore {
  kSum,      // the sum
  kMean,     // the sum over block_size
  kMax,      // the largest
  kNormSum,  // each score over the decode steps its position has been held (at least 1), summed
};

// "sum", "mean", "max", "normsum"; throws ParameterError naming the choices.
BlockScore parse_block_score(std::string_view text);
std::string_view block_score_name(BlockScore score) noexcept;

struct BlockParams {
  std::int64_t block_size = 16;    // tokens per block, >= 1
  std::int64_t start_blocks = 0;   // the first blocks, never evicted
  std::int64_t recent_blocks = 0;  // the last full blocks, never evicted (the partial block never is)
  std::int64_t block_budget = 32;  // blocks held after each eviction; the policy's budget is block_budget * block_size
  BlockScore score = BlockScore::kSum;
};

class BlockEvictor {
 public:
  // Builds `policy` (a registry name) from `params` with budget block_budget *
  // block_size (a `budget` in `params` must equal it). Throws ParameterError,
  // naming the parameter, for a block size below 1, areas below 0, a budget
  // that does not leave one evictable full block once the cache holds
  // block_budget + 1 blocks (start area, recent area and the policy's own
  // protected positions counted), or a policy parameter that breaks a rule.
  BlockEvictor(std::string_view policy, const ParamMap& params, const BlockParams& block);

  // One decode step, as Policy::on_decode_step. Throws ContractError, before
  // anything changes, when the cache would hold more than block_budget *
  // block_size + 1 positions -- its budget's blocks full and one position in
  // the next; the step that would admit a second is refused (call
  // evict_blocks after every step).
  void on_decode_step(std::int64_t pos, Attention attn);
  // The same step with every signal the caller has (Policy::on_step), and
  // position 0's signals before the first step (Policy::on_origin).
  void on_step(std::int64_t pos, const StepInputs& in);
  void on_origin(const StepInputs& in);

  // Evicts whole blocks so that at most min(block_budget, the policy's cap /
  // block_size) blocks remain (PyramidKV caps at its share), at least
  // ceil(min_victims / block_size) when an eviction is due (Scissorhands'
  // dropAmount). Returns the evicted logical block indices (numbered before
  // this call) in ascending order; empty when nothing is due. Returns fewer
  // when too few candidates remain (e.g. TOVA after absent steps). The span
  // points into a buffer reused by the next call.
  std::span<const std::uint32_t> evict_blocks(std::int64_t block_budget);

  // Of the last evict_blocks call: the evicted positions, ascending, and for
  // each surviving block (numbered after the call, the partial one included)
  // how many positions were removed before it -- the distance its keys moved
  // back, for engines that re-rotate keys (RoPE). Empty before any call.
  std::span<const Position> evicted_positions() const noexcept { return {victims_.data(), victim_count_}; }
  std::span<const std::uint32_t> removed_before() const noexcept { return {removed_before_.data(), survivors_}; }

  std::size_t kept_count() const noexcept { return kept_; }
  std::size_t block_count() const noexcept { return (kept_ + block_size_ - 1) / block_size_; }
  std::size_t full_blocks() const noexcept { return kept_ / block_size_; }
  std::size_t block_size() const noexcept { return block_size_; }
  // Held positions, ascending: block j is [j * block_size, (j + 1) * block_size).
  std::span<const Position> positions() const noexcept { return {positions_.data(), kept_}; }
  // The reduced score of a full block as the next evict_blocks would see it
  // (+infinity for a block that is not a candidate); -1 for no such full block.
  double block_score_of(std::int64_t block);

  Policy& policy() noexcept { return *policy_; }
  const Policy& policy() const noexcept { return *policy_; }
  const BlockParams& params() const noexcept { return block_; }
  // The policy's per-slot state plus ours (positions, admission steps,
  // scores, block keys), all sized at construction.
  std::size_t memory_bytes() const noexcept;

 private:
  // Fills keys_[0, full_blocks) with the reduced scores, +infinity for non-candidates.
  void score_blocks();

  std::unique_ptr<Policy> policy_;
  BlockParams block_;
  std::size_t block_size_;
  std::size_t capacity_;  // tokens: block_budget * block_size + 1
  std::size_t kept_ = 0;
  std::uint64_t steps_ = 0;  // decode steps seen
  ScoreRules rules_;
  std::vector<Position> positions_;      // held, ascending (ours, checked against the policy's)
  std::vector<std::uint64_t> admitted_;  // decode step at which each held position was admitted
  std::vector<Position> scratch_positions_;
  std::vector<double> scores_;
  std::vector<double> keys_;             // per full block
  std::vector<std::uint32_t> order_;     // candidate blocks, for the selection
  std::vector<std::uint8_t> chosen_;     // per block
  std::vector<std::uint32_t> blocks_;    // the last call's evicted blocks
  std::size_t block_victims_ = 0;
  std::vector<Position> victims_;
  std::size_t victim_count_ = 0;
  std::vector<std::uint32_t> removed_before_;
  std::size_t survivors_ = 0;
};

}  // namespace kvevict
