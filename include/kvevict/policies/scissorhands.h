// Scissorhands (Liu et al., NeurIPS 2023, arXiv:2305.17118): a position earns a
// vote on each step its attention beats its fair share 1/len(attn); outside the
// recent window, the fewest votes goes. See docs/policies/scissorhands.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/policy.h"

namespace kvevict {

struct ScissorhandsParams {
  std::int64_t budget = 512;
  std::int64_t recent_window = 32;  // newest held positions never evicted; < budget
};

class Scissorhands final : public Policy {
 public:
  static constexpr std::size_t kBytesPerSlot = 9;  // position 4 + votes 4 + scratch 1

  explicit Scissorhands(const ScissorhandsParams& params = {});

  std::string_view name() const noexcept override { return "scissorhands"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }
  std::size_t memory_bytes() const noexcept override { return capacity_ * kBytesPerSlot; }

  // Votes of a held position, -1 when it is not held.
  std::int64_t votes_of(std::int64_t pos) const noexcept;
  const ScissorhandsParams& params() const noexcept { return params_; }

 private:
  ScissorhandsParams params_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  std::vector<Position> positions_;
  std::vector<std::uint32_t> votes_;
  std::vector<std::uint8_t> marked_;
  std::vector<Position> victims_;
};

}  // namespace kvevict
