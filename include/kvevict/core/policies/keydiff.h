// KeyDiff (Park, Jones, Morse, Goel, Lee, Lott, "KeyDiff: Key Similarity-Based
// KV Cache Eviction for Long-Context LLM Inference in Resource-Constrained
// Environments", 2025, arXiv:2504.15364): the key most like the held keys'
// mean direction goes first, keeping the distinctive ones. Reads only the
// keys. See docs/policies/keydiff.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/core/policies/key_scored.h"

namespace kvevict {

class KeyDiff final : public KeyScoredPolicy {
 public:
  explicit KeyDiff(const KeyScoredParams& params = {});
  std::string_view name() const noexcept override { return "keydiff"; }
  // Per slot: position 4 + squared norm 8 + observed 1 + scratch 1 + score
  // 8 + its row 4 + a free row 4; per row (the slots rounded up to 16): key
  // 4 x headDim + the key over its norm 8 x headDim + position 4 + dot
  // product 8; plus the anchor (8 x headDim).
  std::size_t memory_bytes() const noexcept override {
    return capacity_ * 30 + rows_ * (12 * dim_ + 12) + 8 * dim_;
  }
  void on_step(std::int64_t pos, const StepInputs& in) override;
  void on_origin(const StepInputs& in) override;
  std::span<const Position> evict(std::int64_t budget) override;
  void remove(std::span<const Position> victims) override;
  // cos(k_pos, a) with the anchor of the keys held now; -2 when pos is not
  // held or unobserved (-1 is a cosine).
  double cosine_of(std::int64_t pos) const noexcept;

 private:
  // a = sum over the held observed keys of k / ||k||; score = -cos(k, a).
  // Computed exactly as the plain loops would (the same float64 operations
  // in the same order per channel and per slot), the anchor with SIMD lanes
  // across channels, the dot products with lanes across keys.
  void fill_scores() const noexcept override;
  // fill_scores(), then each victim the first minimum over the evictable
  // range (SIMD): the reference's slots.
  void mark_victims(std::size_t needed) noexcept override;
  // Stores the newest slot's key in a free row.
  void store_newest(std::span<const float> key) noexcept;
  // After the base class compacted its slots: each held slot's row again,
  // the rows of the positions gone freed.
  void sync_rows() noexcept;

  mutable std::vector<double> anchor_;  // scratch
  // A slot's key lives in a row that never moves while it is held (an
  // eviction moves no key): keys_t_ holds the keys transposed in tiles of 16
  // rows (detail::tiled_dots), units_r_ the keys over their norms row by row.
  std::size_t rows_ = 0;
  std::vector<float> keys_t_;
  std::vector<double> units_r_;
  std::vector<std::uint32_t> row_of_;   // per slot
  std::vector<Position> row_pos_;       // per row: the position it holds
  std::vector<std::uint32_t> free_;     // free rows, a stack
  std::size_t free_count_ = 0;
  std::size_t slots_ = 1;               // slots row_of_ describes
  mutable std::vector<double> dots_;    // per row: the key's dot product with the anchor
};

}  // namespace kvevict
