// TOVA (Oren et al., EMNLP 2024, arXiv:2401.06104): evict the position with the
// lowest weight on the latest step that observed it; no recent window -- a
// position is immune only until attention has covered it.
// See docs/policies/tova.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/detail/victim_hint.h"
#include "kvevict/policy.h"

namespace kvevict {

struct TOVAParams {
  std::int64_t budget = 512;
};

class TOVA final : public Policy {
 public:
  static constexpr std::size_t kBytesPerSlot = 13;  // position 4 + last weight 8 + flags 1

  explicit TOVA(const TOVAParams& params = {});

  std::string_view name() const noexcept override { return "tova"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }
  std::size_t memory_bytes() const noexcept override { return capacity_ * kBytesPerSlot; }

  // Last observed weight, -1 when not held or never observed.
  double last_attention_of(std::int64_t pos) const noexcept;
  const TOVAParams& params() const noexcept { return params_; }

 private:
  TOVAParams params_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  std::vector<Position> positions_;
  std::vector<double> last_;
  std::vector<std::uint8_t> flags_;  // kObserved | kMarked
  std::vector<Position> victims_;
  detail::VictimHint<double> hint_;  // what the last step's pass learned about the next victim
};

}  // namespace kvevict
