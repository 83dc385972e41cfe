#include "kvevict/core/policies/scissorhands.h"

#include <algorithm>

#include <fmt/format.h>

#include "policies/common.h"
#include "policies/removal.h"
#include "policies/describe.h"
#include "policies/kernels.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "Scissorhands";
// The vote bits are allocated up front, 8 * ceil(historyWindow / 64) bytes a
// slot; capped as SnapKV's rings are. (budget 2^24 with historyWindow 4096
// asked for 8.6 GB, and the tool printed std::bad_alloc.)
constexpr std::int64_t kMaxHistoryBytes = std::int64_t{1} << 28;
}

Scissorhands::Scissorhands(const ScissorhandsParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  detail::check_recent_window(kTitle, params.recent_window, params.budget, "the votes");
  detail::check_at_least(kTitle, "sinks", params.sinks, 0);
  detail::check_sinks_and_recent(kTitle, params.sinks, params.recent_window, params.budget, "the votes");
  detail::check_at_least(kTitle, "historyWindow", params.history_window, 0);
  detail::check_at_most(kTitle, "historyWindow", params.history_window, kMaxHistoryWindow);
  // Whole 64-bit words a slot that fit in the cap, as steps.
  const std::int64_t max_history = 64 * (kMaxHistoryBytes / (8 * (params.budget + 1)));
  detail::check_at_most(kTitle, "historyWindow", params.history_window, max_history,
                        fmt::format("at budget {} (the vote history would need more than 256 MiB)",
                                    params.budget));
  detail::check_at_least(kTitle, "dropAmount", params.drop_amount, 1);
  detail::check_at_most(kTitle, "dropAmount", params.drop_amount, params.budget);
  detail::check_flag(kTitle, "normalize", params.normalize);
  if (params.normalize != 0 && params.history_window > 0) {
    detail::fail_param(kTitle, "historyWindow", params.history_window,
                       "must be 0 with normalize=1: a history window already counts every old position's votes "
                       "over the same number of steps");
  }
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  positions_.resize(capacity_);
  votes_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  history_words_ = static_cast<std::size_t>((params.history_window + 63) / 64);
  history_.assign(capacity_ * history_words_, 0);
  if (params.normalize != 0) {
    steps_.assign(capacity_, 0);
    ranks_.assign(capacity_, 0.0);
  }
  positions_[0] = 0;  // position 0 exists before the first decode step
  votes_[0] = 0;
  kept_ = 1;
}

void Scissorhands::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  detail::check_admission(kTitle, pos, newest, kept_ + 1, capacity_, params_.budget);
  const std::size_t n = detail::readable(attn, kept_);
  hint_.valid = false;
  if (attn && !attn->empty()) {
    // Fair share over the full vector, as the model spread it; a weight equal
    // to its share earns nothing (strict comparison).
    const double share = 1.0 / static_cast<double>(attn->size());
    // w >= threshold exactly when (double)w > share: the test runs on floats.
    const float threshold = detail::vote_threshold(share);
    const float* w = attn->data();
    if (history_words_ == 0) {
      // One pass: votes, the weights' validity, and the fewest votes over the
      // range the next eviction will search (after this token is admitted).
      const std::size_t after = kept_ + 1;
      const std::size_t end = after - std::min(static_cast<std::size_t>(params_.recent_window), after);
      const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), end);
      const detail::VotePass pass = detail::count_votes_checked(votes_.data(), w, n, threshold, first, end);
      if (!pass.valid) {
        detail::uncount_votes(votes_.data(), w, n, threshold);  // exact: votes are integers
        detail::check_weights(kTitle, w, n);                     // throws, naming the weight
      }
      if (params_.normalize != 0) {
        for (std::size_t i = 0; i < n; ++i) ++steps_[i];
      } else if (first < end && end <= n) {
        hint_.set(pass.min_votes, pass.min_block, first, end);
      }
    } else {
      detail::check_weights(kTitle, w, n);
      // The vote cast history_window observed steps ago leaves the window
      // (for every held slot, covered or not); this step's vote takes its bit.
      const auto column = observed_steps_ % static_cast<std::uint64_t>(params_.history_window);
      const std::size_t word = static_cast<std::size_t>(column / 64);
      const std::uint64_t bit = std::uint64_t{1} << (column % 64);
      for (std::size_t i = 0; i < kept_; ++i) {
        std::uint64_t& cell = history_[i * history_words_ + word];
        const bool voted = i < n && w[i] >= threshold;
        votes_[i] = votes_[i] - ((cell & bit) != 0 ? 1U : 0U) + (voted ? 1U : 0U);
        cell = voted ? (cell | bit) : (cell & ~bit);
      }
    }
    ++observed_steps_;
  }
  positions_[kept_] = static_cast<Position>(pos);
  votes_[kept_] = 0;
  if (params_.normalize != 0) steps_[kept_] = 0;
  std::fill_n(history_.begin() + static_cast<std::ptrdiff_t>(kept_ * history_words_), history_words_, 0);
  ++kept_;
}

std::span<const Position> Scissorhands::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  if (kept_ <= b) return {};
  // The amortised schedule: once an eviction is due, drop a batch.
  const std::size_t needed = std::max(kept_ - b, static_cast<std::size_t>(params_.drop_amount));
  const std::size_t recent = std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), kept_ - recent);
  const std::size_t end = kept_ - recent;
  if (needed == 1) {
    // The steady state: one victim, found by a vectorised first-minimum, and
    // removed by sliding the tail down once.
    const std::size_t j = params_.normalize != 0 ? detail::first_min(rates(first, end), first, end)
                                                 : detail::single_victim(votes_.data(), first, end, hint_);
    if (j == end) return {};
    victims_[0] = positions_[j];
    detail::erase_slot(positions_, j, kept_);
    move_slots(j, j + 1, kept_ - j - 1);
    --kept_;
    return {victims_.data(), 1};
  }
  hint_.valid = false;
  if (params_.normalize != 0) {
    detail::mark_argmin_victims(rates(first, end), marked_.data(), first, end, needed);
  } else {
    detail::mark_argmin_victims(votes_.data(), marked_.data(), first, end, needed);
  }
  const std::size_t count = detail::compact(kept_, marked_.data(), positions_.data(), victims_.data(),
                                            [this](std::size_t to, std::size_t from, std::size_t n) {
                                              move_slots(to, from, n);
                                            });
  return {victims_.data(), count};
}

const double* Scissorhands::rates(std::size_t first, std::size_t end) {
  for (std::size_t i = first; i < end; ++i) ranks_[i] = detail::rate(votes_[i], steps_[i]);
  return ranks_.data();
}

// Moves every per-slot record but the position (slots [from, from + n) to
// [to, to + n), to <= from).
void Scissorhands::move_slots(std::size_t to, std::size_t from, std::size_t n) noexcept {
  std::copy_n(votes_.data() + from, n, votes_.data() + to);
  std::copy_n(history_.data() + from * history_words_, n * history_words_, history_.data() + to * history_words_);
  if (params_.normalize != 0) std::copy_n(steps_.data() + from, n, steps_.data() + to);
}

std::int64_t Scissorhands::votes_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  return slot == detail::kNoSlot ? -1 : std::int64_t{votes_[slot]};
}

double Scissorhands::rank_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot) return -1.0;
  return params_.normalize != 0 ? detail::rate(votes_[slot], steps_[slot]) : static_cast<double>(votes_[slot]);
}

namespace detail {
const PolicyInfo& scissorhands_info() {
  static const PolicyInfo info = describe<Scissorhands, ScissorhandsParams>(
      "scissorhands", kTitle,
      "Counts the steps each position beat its fair share 1/len(attn); the fewest votes goes.",
      {{"budget", &ScissorhandsParams::budget, "positions held after each eviction"},
       {"recentWindow", &ScissorhandsParams::recent_window,
        "newest held positions that are never evicted (< budget)"},
       {"historyWindow", &ScissorhandsParams::history_window,
        "votes count over the last w observed steps (0 = all; at most 4096, and its "
        "8*ceil(w/64) bytes a slot at most 256 MiB)"},
       {"dropAmount", &ScissorhandsParams::drop_amount,
        "an eviction drops max(needed, dropAmount) positions"},
       {"sinks", &ScissorhandsParams::sinks, "first positions that are never evicted"},
       {"normalize", &ScissorhandsParams::normalize,
        "1: rank by the vote rate, votes / the steps that scored the position (needs historyWindow 0); 0: the "
        "votes"}},
      {query1<Scissorhands>("votesOf", [](const Scissorhands& p, std::int64_t pos) { return p.votes_of(pos); }),
       query1<Scissorhands>("rankOf", [](const Scissorhands& p, std::int64_t pos) { return p.rank_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict

namespace kvevict {

// The score interface: the votes (within the history window); the sinks and
// the recent window are protected, exactly the range evict() searches.
std::size_t Scissorhands::scores(std::span<Position> positions, std::span<double> scores) {
  detail::check_score_spans(kTitle, positions.size(), scores.size(), kept_);
  const std::size_t end = kept_ - std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), end);
  for (std::size_t i = 0; i < kept_; ++i) {
    positions[i] = positions_[i];
    const double score = params_.normalize != 0 ? detail::rate(votes_[i], steps_[i]) : static_cast<double>(votes_[i]);
    scores[i] = i >= first && i < end ? score : detail::kProtectedScore;
  }
  return kept_;
}

void Scissorhands::remove(std::span<const Position> victims) {
  const std::size_t end = kept_ - std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), end);
  detail::mark_removal(kTitle, {positions_.data(), kept_}, victims, marked_.data(),
                       [&](std::size_t slot) { return slot >= first && slot < end; });
  hint_.valid = false;
  detail::compact(kept_, marked_.data(), positions_.data(), victims_.data(),
                  [this](std::size_t to, std::size_t from, std::size_t n) { move_slots(to, from, n); });
}

ScoreRules Scissorhands::score_rules() const {
  ScoreRules rules;
  rules.min_victims = static_cast<std::size_t>(params_.drop_amount);
  rules.protected_newest = params_.recent_window;
  rules.protected_below = params_.sinks;
  return rules;
}

}  // namespace kvevict
