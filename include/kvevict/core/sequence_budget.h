// One budget for every cache of a sequence, over any scoring policy: the
// granularity an engine's KV cells impose. llama.cpp's cache drops a cell --
// one position for every layer and every KV head at once -- and vLLM's block
// tables are shared by all layers and heads the same way; a per-head victim
// is not something they can carry out.
//
// A SequenceBudget owns one policy instance per cache (each built with the
// sequence's budget as its own), and every cache holds the same positions:
// each is stepped with its own attention (or keys), and every removal goes
// through Policy::remove, so their held sets never part. At eviction one
// victim set is chosen from all the caches' scores (Policy::scores):
//
//   * each cache's finite scores are scaled to [0, 1] by their own minimum
//     and maximum (all equal: 0) -- the caches' scales differ (attention mass,
//     votes, a key's norm), and no cache may outvote the others by its scale;
//   * a position's score is the mean of its caches' scaled scores: the whole
//     sequence's view, every cache counted once;
//   * a position any cache protects (+infinity: a sink, a recent window) is
//     protected: it is one cell, and a cache that needs it must keep it (and
//     the newest, with keep_newest);
//   * the lowest scores go first, ties to the lower position, until the
//     sequence holds min(budget, the policy's cap) -- at least min_victims
//     when an eviction is due (Scissorhands' dropAmount).
//
// With one cache the raw scores are compared, so it decides exactly as the
// policy's own evict() does (without keep_newest). Storage is sized at construction; no call
// allocates after it.
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

struct SequenceBudgetParams {
  std::int64_t caches = 1;    // caches of the sequence (layers x KV heads), >= 1
  std::int64_t budget = 4096;  // positions the sequence holds after each eviction, in every cache
  // The newest position held is never a victim: llama.cpp requires each
  // decode's position to follow the last one its cache stores for the
  // sequence, so a removed newest position refuses the next token. kvevict's
  // decoder, its replays and the llama.cpp adapter set it at sequence
  // granularity, so that both engines can carry out the same decisions.
  bool keep_newest = false;
};

class SequenceBudget {
 public:
  // Builds `caches` instances of `policy` from `params`, each with the
  // sequence's budget (a `budget` in `params` must equal it or be left out).
  // Throws ParameterError naming the parameter for caches below 1 or above
  // 65,536, a budget below 1 or above kMaxLayerBudget, a budget the policy's
  // protected positions cannot fit in, or storage above 1 GiB.
  SequenceBudget(std::string_view policy, const ParamMap& params, const SequenceBudgetParams& sequence);

  // One decode step of one cache (step every cache once per decode step).
  void on_decode_step(std::size_t cache, std::int64_t pos, Attention attn);
  // The same with every signal the caller has, and position 0's signals
  // before the first step (Policy::on_step, Policy::on_origin).
  void on_step(std::size_t cache, std::int64_t pos, const StepInputs& in);
  void on_origin(std::size_t cache, const StepInputs& in);

  // Evicts so that the sequence holds at most min(budget, the policy's cap)
  // positions, the same in every cache, and returns the victims, ascending
  // (valid until the next call). Empty when nothing is due, and fewer when
  // every remaining position is protected. Throws ContractError when the
  // caches do not hold the same positions (a cache not stepped).
  std::span<const Position> evict(std::int64_t budget);

  std::size_t caches() const noexcept { return caches_.size(); }
  std::size_t kept_count() const noexcept { return caches_.front()->kept_count(); }
  std::int64_t budget() const noexcept { return sequence_.budget; }
  Policy& cache(std::size_t c);
  std::size_t memory_bytes() const noexcept;

 private:
  void check_cache(std::size_t cache, const char* what) const;
  void add_scaled_scores(std::size_t c, std::size_t kept);
  // positions 4 x 2 + scores 8 x 2 + order 4 + victim 4 for each slot.
  static constexpr std::uint64_t kBytesPerSlot = 4 * 2 + 8 * 2 + 4 + 4;

  std::vector<std::unique_ptr<Policy>> caches_;
  SequenceBudgetParams sequence_;
  ScoreRules rules_;
  std::int64_t cap_;
  std::size_t capacity_;  // budget + 1
  std::vector<Position> positions_;  // cache 0's held positions
  std::vector<Position> others_;     // another cache's, to compare
  std::vector<double> scores_;       // one cache's scores
  std::vector<double> combined_;     // the sequence's
  std::vector<std::uint32_t> order_;
  std::vector<Position> victims_;
  std::size_t victim_count_ = 0;
};

}  // namespace kvevict
