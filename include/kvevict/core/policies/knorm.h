// KNorm (Devoto, Zhao, Scardapane, Minervini, "A Simple and Effective L2
// Norm-Based Strategy for KV Cache Compression", EMNLP 2024,
// arXiv:2406.11430): keys with a low L2 norm draw attention, so the held key
// with the largest norm goes first. Reads only the key as the cache stores it
// -- no attention weights -- so an engine with fused attention can run it.
// See docs/policies/knorm.md.
#pragma once

#include "kvevict/core/policies/key_scored.h"

namespace kvevict {

class KNorm final : public KeyScoredPolicy {
 public:
  // position 4 + squared norm 8 + observed 1 + scratch 1 + score 8
  static constexpr std::size_t kBytesPerSlot = 22;

  explicit KNorm(const KeyScoredParams& params = {});
  std::string_view name() const noexcept override { return "knorm"; }
  std::size_t memory_bytes() const noexcept override { return capacity_ * kBytesPerSlot; }

 private:
  // score = -||k||^2: the same order as kvpress's -||k||, without a square
  // root that could round two different norms to one.
  void fill_scores() const noexcept override;
  // The fast path: the score is fixed at admission, so each victim is the
  // first maximum of the squared norms over the evictable range (SIMD), the
  // same slot the reference's strict argmin of -||k||^2 picks.
  void mark_victims(std::size_t needed) noexcept override;
};

}  // namespace kvevict
