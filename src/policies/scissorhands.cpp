#include "kvevict/policies/scissorhands.h"

#include "policies/common.h"
#include "policies/describe.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "Scissorhands";
}

Scissorhands::Scissorhands(const ScissorhandsParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  detail::check_recent_window(kTitle, params.recent_window, params.budget, "the votes");
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  positions_.resize(capacity_);
  votes_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  positions_[0] = 0;  // position 0 exists before the first decode step
  votes_[0] = 0;
  kept_ = 1;
}

void Scissorhands::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  detail::check_admission(kTitle, pos, newest, kept_ + 1, capacity_, params_.budget);
  detail::check_weights(kTitle, attn ? attn->data() : nullptr, detail::readable(attn, kept_));
  if (attn && !attn->empty()) {
    // Fair share over the full vector, as the model spread it; a weight equal
    // to its share earns nothing (strict comparison).
    const double share = 1.0 / static_cast<double>(attn->size());
    const std::size_t n = detail::readable(attn, kept_);
    const float* w = attn->data();
    for (std::size_t i = 0; i < n; ++i) {
      votes_[i] += static_cast<double>(w[i]) > share ? 1U : 0U;
    }
  }
  positions_[kept_] = static_cast<Position>(pos);
  votes_[kept_] = 0;
  ++kept_;
}

std::span<const Position> Scissorhands::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  if (kept_ <= b) return {};
  const std::size_t needed = kept_ - b;
  const std::size_t recent = std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  detail::mark_argmin_victims(votes_.data(), marked_.data(), kept_ - recent, needed);
  const std::size_t count = detail::compact(
      kept_, marked_.data(), positions_.data(), victims_.data(),
      [this](std::size_t to, std::size_t from) { votes_[to] = votes_[from]; });
  return {victims_.data(), count};
}

std::int64_t Scissorhands::votes_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  return slot == detail::kNoSlot ? -1 : std::int64_t{votes_[slot]};
}

namespace detail {
const PolicyInfo& scissorhands_info() {
  static const PolicyInfo info = describe<Scissorhands, ScissorhandsParams>(
      "scissorhands", kTitle,
      "Counts the steps each position beat its fair share 1/len(attn); the fewest votes goes.",
      {{"budget", &ScissorhandsParams::budget, "positions held after each eviction"},
       {"recentWindow", &ScissorhandsParams::recent_window,
        "newest held positions that are never evicted (< budget)"}},
      {query1<Scissorhands>("votesOf", [](const Scissorhands& p, std::int64_t pos) {
        return p.votes_of(pos);
      })});
  return info;
}
}  // namespace detail

}  // namespace kvevict
