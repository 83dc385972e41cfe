// The defaults of the score interface (include/kvevict/core/policy.h): a policy
// that does not expose per-position scores refuses, naming itself.
#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/policy.h"
#include "policies/removal.h"

namespace kvevict {

namespace {
[[noreturn]] void no_scores(const Policy& p) {
  throw ContractError(fmt::format("{}: exposes no per-position scores, so no block or layer evictor can choose for it",
                                  p.name()));
}
}  // namespace

std::size_t Policy::scores(std::span<Position> /*positions*/, std::span<double> /*scores*/) { no_scores(*this); }
void Policy::remove(std::span<const Position> /*victims*/) { no_scores(*this); }
ScoreRules Policy::score_rules() const { no_scores(*this); }

namespace detail {
void fail_removal(std::string_view title, Position victim, std::string_view why) {
  throw ContractError(fmt::format("{}: cannot remove position {}: it {}", title, victim, why));
}
void fail_score_spans(std::string_view title, std::size_t positions, std::size_t scores, std::size_t kept) {
  throw ContractError(fmt::format("{}: scores() was given room for {} positions and {} scores; {} are held", title,
                                  positions, scores, kept));
}
}  // namespace detail

}  // namespace kvevict
