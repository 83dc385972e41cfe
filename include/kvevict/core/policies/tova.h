// TOVA (Oren et al., EMNLP 2024, arXiv:2401.06104): evict the position with the
// lowest weight on the latest step that observed it; no recent window -- a
// position is immune only until attention has covered it.
// See docs/policies/tova.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/core/policies/victim_hint.h"
#include "kvevict/core/policy.h"

namespace kvevict {

struct TOVAParams {
  std::int64_t budget = 512;
};

class TOVA final : public Policy {
 public:
  // position 4 + last weight 4 in each of two buffers + scratch 1 (the spec's
  // 13: a float64 record holds a float32 weight exactly, so float32 suffices)
  static constexpr std::size_t kBytesPerSlot = 13;

  explicit TOVA(const TOVAParams& params = {});

  std::string_view name() const noexcept override { return "tova"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }
  std::size_t memory_bytes() const noexcept override { return capacity_ * kBytesPerSlot; }

  // Last observed weight, -1 when not held or never observed.
  double last_attention_of(std::int64_t pos) const noexcept;
  const TOVAParams& params() const noexcept { return params_; }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  TOVAParams params_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  // The slot of held position i in the record buffer (past the hole).
  std::size_t storage(std::size_t slot) const noexcept;
  // Shifts the current records over the hole an eviction left.
  void close_hole() noexcept;

  std::vector<Position> positions_;
  // The last weight of each held position (NaN: never observed), in two
  // buffers: a step writes the spare one and switches only if its row is
  // valid (tova.cpp says why).
  std::vector<float> last_[2];
  std::size_t current_ = 0;
  std::size_t hole_ = static_cast<std::size_t>(-1);  // record slot an eviction left behind; -1: none
  std::vector<std::uint8_t> marked_;
  std::vector<Position> victims_;
  detail::VictimHint<double> hint_;  // what the last step's pass learned about the next victim
};

}  // namespace kvevict
