// A bank of N independent policy instances -- one per layer x KV head x
// sequence -- stepped together. The layout is the one a paged KV cache needs:
// structure of arrays, attention arriving in *cache-slot* order (row k holds
// instance k's weights over its slots 0 ... capacity-1, with a row stride),
// and eviction freeing a slot that the next token's key and value reuse.
// Instances are spread across cores with OpenMP.
//
// Decisions are exactly those of N separate instances of the policy fed the
// same weights in ascending position order (tests/bank_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

// How the query heads sharing one KV head (grouped-query attention) are
// folded into the one weight per slot the policy sees.
enum class Aggregation { kSum, kMean, kMax };

struct BankParams {
  // "scissorhands", "h2o", "tova", "sliding-window" or "streaming-llm".
  // SnapKV and PyramidKV have none: their pooling reads the scores of
  // neighbouring positions, an order a slot-addressed bank does not keep.
  std::string policy = "scissorhands";
  std::int64_t instances = 1;
  std::int64_t budget = 512;
  std::int64_t recent_window = 32;
  std::int64_t group_size = 1;  // query heads per instance (rows of attention per instance)
  Aggregation aggregation = Aggregation::kSum;
  int threads = 0;  // 0: OpenMP's default
  // streaming-llm's attention sinks: positions below this are never evicted
  // (must be 0 for the other policies, which the bank runs without sinks).
  std::int64_t sinks = 0;
  // h2o and scissorhands: 1 ranks by the score or votes divided by the steps
  // that scored the position (every held slot is scored every step here, so
  // the steps since its admission), as the policies' normalize=1 does.
  std::int64_t normalize = 0;
};

class PolicyBank {
 public:
  static constexpr std::uint32_t kFree = 0xFFFFFFFFU;  // a slot holding no position

  explicit PolicyBank(const BankParams& params);

  // One decode step for every instance. `attn` has instances * group_size
  // rows of `stride` floats (stride >= capacity()); row k*group_size + g is
  // query head g of instance k, indexed by slot. Weights in free slots are
  // ignored. Folds the weights into the held slots, admits `pos` into each
  // instance's free slot, and evicts where an instance holds more than the
  // budget. victim_positions[k] / victim_slots[k] receive the evicted
  // position and its slot, or kFree when instance k evicted nothing.
  void step(std::int64_t pos, const float* attn, std::size_t stride, Position* victim_positions,
            std::uint32_t* victim_slots);

  std::size_t instances() const noexcept { return instances_; }
  std::size_t capacity() const noexcept { return capacity_; }  // slots per instance, budget + 1
  std::size_t kept_count(std::size_t instance) const noexcept { return kept_[instance]; }
  // The slot the next token of `instance` will occupy.
  std::uint32_t free_slot(std::size_t instance) const noexcept { return free_slot_[instance]; }
  // Position held in a slot, kFree when the slot is free.
  std::uint32_t slot_position(std::size_t instance, std::size_t slot) const noexcept {
    return positions_[instance * capacity_ + slot];
  }
  // Votes (Scissorhands), cumulative score (H2O) -- with normalize=1 either
  // divided by the steps that scored it -- or last weight (TOVA) of a held
  // position; -1 if not held, not yet observed (TOVA) or the policy keeps no
  // score (the recency policies).
  double score_of(std::size_t instance, Position pos) const noexcept;
  std::size_t memory_bytes() const noexcept;

 private:
  template <class Score>
  void step_instance(std::size_t k, std::uint32_t pos, std::uint32_t protect_from, const float* rows,
                     std::size_t stride, Score* scores, Position& victim_pos, std::uint32_t& victim_slot);

  // Admits `pos` and evicts the victim found by the update pass (`best` is
  // Scissorhands' key; `victim` the slot, capacity() when none). S points at
  // this instance's scores.
  template <class Score>
  void finish_instance(std::size_t k, std::uint32_t pos, std::uint32_t protect_from, std::uint64_t best,
                       std::size_t victim, Score* S, Position& victim_pos, std::uint32_t& victim_slot);

  // Admits `pos` and evicts the oldest position that is not a sink, for the
  // policies that never read attention.
  // normalize=1: the evictable held slot (position below protect_from) with
  // the lowest rate, ties to the lower position; capacity() when none. Runs
  // after the step's scores are in S and admitted_ counts this step.
  template <class Score>
  std::size_t lowest_rate(std::size_t k, const Score* S, std::uint32_t protect_from) const noexcept;
  // The victim key Scissorhands' finish_instance compares the new token with.
  std::uint64_t vote_key(std::size_t k, std::size_t slot) const noexcept;

  void step_recency(std::size_t k, std::uint32_t pos, Position& victim_pos, std::uint32_t& victim_slot);
  // step()'s three attention paths, after its checks: Scissorhands and H2O
  // without aggregation (one pass an instance), and grouped queries.
  void step_votes(std::int64_t pos, const float* attn, std::size_t stride, int threads, std::uint32_t protect_from,
                  Position* victim_positions, std::uint32_t* victim_slots);
  void step_scores(std::int64_t pos, const float* attn, std::size_t stride, int threads, std::uint32_t protect_from,
                   Position* victim_positions, std::uint32_t* victim_slots);
  void step_grouped(std::int64_t pos, const float* attn, std::size_t stride, int threads, std::uint32_t protect_from,
                    Position* victim_positions, std::uint32_t* victim_slots);
  // Admits `pos` once the step's weights are accepted: the recent window and the newest position.
  void commit(std::int64_t pos) noexcept;
  void step_tova(std::int64_t pos, const float* attn, std::size_t stride, int threads, Position* victim_positions,
                 std::uint32_t* victim_slots);

  enum class Mode { kVotes, kScores, kLastWeight, kRecency };
  BankParams params_;
  Mode mode_;
  bool votes_mode_;
  std::size_t instances_;
  std::size_t capacity_;
  std::vector<std::uint32_t> positions_;  // [instances][capacity]
  std::vector<std::uint32_t> votes_;      // Scissorhands
  static constexpr std::size_t kScoreGap = 64;  // doubles between the two score buffers
  std::vector<double> scores_;            // H2O: two buffers (bank.cpp says why)
  double* score_buffer_[2] = {};          // in scores_
  int current_scores_ = 0;
  std::vector<float> records_;            // TOVA: two buffers of float32 last weights (NaN: unobserved)
  float* record_buffer_[2] = {};          // in records_; current_scores_ says which is current
  std::vector<std::uint32_t> kept_;
  std::vector<std::uint32_t> free_slot_;
  std::vector<float> scratch_;            // per-thread aggregated rows
  int scratch_threads_ = 1;               // rows in scratch_: the most threads a step may use
  std::vector<std::uint32_t> recent_;     // ring of the last recent_window admitted positions
  std::vector<std::uint32_t> window_;     // recency policies: per instance, a ring of its window's slots, oldest first
  std::vector<std::uint32_t> window_head_;
  std::vector<std::uint32_t> window_size_;
  std::vector<std::uint64_t> pending_best_;  // Scissorhands, one pass: each instance's best key
  std::vector<std::uint32_t> pending_slot_;  // ... and its slot
  std::vector<std::uint8_t> pending_bad_;    // ... and whether its weights were refused
  std::vector<std::uint32_t> born_;       // normalize=1: admitted_ when each slot's position was admitted
  std::size_t admitted_ = 0;
  std::int64_t newest_ = 0;
};

}  // namespace kvevict
