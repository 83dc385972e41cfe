// KeyDiff (Park, Jones, Morse, Goel, Lee, Lott, "KeyDiff: Key Similarity-Based
// KV Cache Eviction for Long-Context LLM Inference in Resource-Constrained
// Environments", 2025, arXiv:2504.15364): the key most like the held keys'
// mean direction goes first, keeping the distinctive ones. Reads only the
// keys. See docs/policies/keydiff.md.
#pragma once

#include <vector>

#include "kvevict/core/policies/key_scored.h"

namespace kvevict {

class KeyDiff final : public KeyScoredPolicy {
 public:
  explicit KeyDiff(const KeyScoredParams& params = {});
  std::string_view name() const noexcept override { return "keydiff"; }
  // Per slot: position 4 + key 4 x headDim + the key over its norm 8 x
  // headDim + squared norm 8 + observed 1 + scratch 1 + score 8; plus the
  // anchor (8 x headDim).
  std::size_t memory_bytes() const noexcept override {
    return capacity_ * (22 + 12 * dim_) + 8 * dim_;
  }
  // cos(k_pos, a) with the anchor of the keys held now; -2 when pos is not
  // held or unobserved (-1 is a cosine).
  double cosine_of(std::int64_t pos) const noexcept;

 private:
  // a = sum over the held observed keys of k / ||k||; score = -cos(k, a).
  // Computed exactly as the plain loops would (the same float64 operations
  // in the same order per channel and per slot), the anchor with SIMD lanes
  // across channels, the dot products eight slots at a time.
  void fill_scores() const noexcept override;
  // fill_scores(), then each victim the first minimum over the evictable
  // range (SIMD): the reference's slots.
  void mark_victims(std::size_t needed) noexcept override;
  mutable std::vector<double> anchor_;  // scratch
};

}  // namespace kvevict
