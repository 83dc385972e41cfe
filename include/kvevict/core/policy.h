// The policy interface (spec/domain.md §1). A policy sees only the attention the
// newest token paid to the positions it still holds, and names positions to
// forget so that at most `budget` remain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kvevict {

// How a policy's per-position scores decide, for an evictor that chooses on
// its behalf (BlockEvictor, LayerBudget; docs/paged.md).
struct ScoreRules {
  // An eviction that is due removes at least this many positions
  // (Scissorhands' dropAmount; 1 for the others).
  std::size_t min_victims = 1;
  // evict(b) brings the kept set to min(b, budget_cap) (PyramidKV's share).
  std::int64_t budget_cap = std::numeric_limits<std::int64_t>::max();
  // Newest held positions the policy never evicts (its recent window; TOVA 1:
  // the unobserved newest) and positions below `protected_below` (sinks).
  // Only for checking at construction that a budget can be met.
  std::int64_t protected_newest = 0;
  std::int64_t protected_below = 0;
};

// Absolute token index (0, 1, 2, ...), never an offset into the kept set.
using Position = std::uint32_t;

// The weights the new token paid to the held positions, in ascending position
// order; or std::nullopt, "no information" -- never "all zeros". Used like a
// std::optional<std::span<const float>> (has_value, *, ->, value, == nullopt),
// but two words that travel in registers: an optional span is three, passed
// through memory, and building one just before a call stalls the store
// forwarding of the copy (about 8 ns a step, most of a recency policy's).
class Attention {
 public:
  constexpr Attention() noexcept = default;  // absent
  constexpr Attention(std::nullopt_t) noexcept {}
  constexpr Attention(std::span<const float> weights) noexcept : data_(weights.data()), size_(weights.size()) {}
  // Anything a span of const float is made from (a vector, an array, a span of float).
  template <class Range>
    requires(!std::is_same_v<std::remove_cvref_t<Range>, Attention> &&
             !std::is_same_v<std::remove_cvref_t<Range>, std::nullopt_t> &&
             !std::is_same_v<std::remove_cvref_t<Range>, std::span<const float>> &&
             std::is_constructible_v<std::span<const float>, Range &&>)
  constexpr Attention(Range&& weights) noexcept : Attention(std::span<const float>(std::forward<Range>(weights))) {}
  constexpr Attention(const std::optional<std::span<const float>>& weights) noexcept
      : Attention(weights ? Attention(*weights) : Attention()) {}

  constexpr bool has_value() const noexcept { return size_ != kAbsent; }
  constexpr explicit operator bool() const noexcept { return has_value(); }
  // The weights; only when present.
  constexpr std::span<const float> operator*() const noexcept { return {data_, size_}; }
  // attn->size(), attn->data(): a span held by value for the expression.
  struct Arrow {
    std::span<const float> weights;
    constexpr const std::span<const float>* operator->() const noexcept { return &weights; }
  };
  constexpr Arrow operator->() const noexcept { return {{data_, size_}}; }
  std::span<const float> value() const {
    if (!has_value()) throw std::bad_optional_access();
    return {data_, size_};
  }
  friend constexpr bool operator==(const Attention& a, std::nullopt_t) noexcept { return !a.has_value(); }

 private:
  static constexpr std::size_t kAbsent = std::numeric_limits<std::size_t>::max();
  const float* data_ = nullptr;
  std::size_t size_ = kAbsent;
};

// What a decode step can carry for one cache besides the weights (docs/signals.md).
// An engine with fused attention (FlashAttention, paged attention, SDPA) never
// writes the weights, but always has the new token's key, value and queries:
// a policy declares which of them it reads, and a step that lacks one is
// refused with an error naming the policy and the signal.
enum Signal : std::uint32_t {
  kSignalAttention = 1U,  // the softmax weights over the held positions
  kSignalKey = 2U,        // the admitted token's key as the cache stores it (after RoPE)
  kSignalValue = 4U,      // the admitted token's value
  kSignalQueries = 8U,    // the admitted token's queries before RoPE, every query head of the cache's group
};
using Signals = std::uint32_t;
inline constexpr Signals kEverySignal = kSignalAttention | kSignalKey | kSignalValue | kSignalQueries;

// "attention", "key", "value", "queries": the name of one kSignal* bit.
std::string_view signal_name(Signal signal) noexcept;
// "key, value": every bit of `signals`, in bit order ("none" when empty).
std::string signal_names(Signals signals);  // (src/core/signals.cpp)

// One step's signals. Spans are views valid for the call only; an empty span
// means "not given". `queries` is head-major: query head g of the group is
// queries[g * head_dim, (g + 1) * head_dim).
struct StepInputs {
  Attention attention{};
  std::span<const float> key{};
  std::span<const float> value{};
  std::span<const float> queries{};
};

class Policy {
 public:
  virtual ~Policy() = default;
  Policy() = default;
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  // Registry name, e.g. "scissorhands".
  virtual std::string_view name() const noexcept = 0;

  // One decode step: fold `attn` into the held positions, then admit `pos`.
  // Throws ContractError, before changing anything, when `pos` is not above
  // every held position or when holding it would exceed the capacity.
  virtual void on_decode_step(std::int64_t pos, Attention attn) = 0;

  // Drops positions so that at most `budget` remain (PyramidKV: its own share)
  // and returns them in ascending order. The span points into a buffer owned by
  // the policy and reused by the next call: copy it to keep it.
  virtual std::span<const Position> evict(std::int64_t budget) = 0;

  virtual std::size_t kept_count() const noexcept = 0;

  // ---- Steps with more than attention (docs/signals.md) ----
  // The signals on_step reads (kSignal* bits): the attention policies
  // kSignalAttention, the positional ones none, the key-aware ones their keys,
  // values or queries. The registry records the same (PolicyInfo::signals).
  virtual Signals signals() const noexcept { return kSignalAttention; }
  // One decode step with every signal the caller has: for an attention policy
  // exactly on_decode_step(pos, in.attention) (the other signals are not
  // read); a key-aware policy refuses, before changing anything, a step that
  // lacks a signal it reads, naming itself and the signal.
  virtual void on_step(std::int64_t pos, const StepInputs& in) { on_decode_step(pos, in.attention); }
  // Position 0 exists before the first step, so no step admits it: a
  // key-aware policy is given its key, value and queries here, at most once
  // and before step 1. Until then position 0 is unobserved and never evicted
  // (as TOVA's unobserved positions). Policies that read no keys ignore it.
  virtual void on_origin(const StepInputs& /*in*/) {}

  // Bytes of per-slot state (bytes per slot x capacity), allocated at
  // construction: the hot path never allocates. The victim buffer returned by
  // evict() is not counted, as in the spec's per-slot figures.
  virtual std::size_t memory_bytes() const noexcept = 0;

  // ---- Scores for an evictor that chooses for the policy (docs/paged.md) ----
  // None of these is on the decode path; a policy without them (a test double)
  // keeps the defaults, which refuse with a ContractError naming the policy.
  //
  // Writes each held position, ascending, and its eviction score into
  // positions[i] and scores[i] for i < kept_count() (both spans at least that
  // long) and returns kept_count(). The policy's own evict() is exactly: the
  // lowest score goes first, ties to the lower position, +infinity never
  // (a protected position). Computed on demand from the policy's state;
  // changes nothing a query or a later step can see.
  virtual std::size_t scores(std::span<Position> positions, std::span<double> scores);
  // Removes the given held positions (ascending, each held, none protected),
  // as if the policy's own evict() had chosen them. Refuses, before changing
  // anything, a position that is not held, out of order or protected (a sink).
  virtual void remove(std::span<const Position> victims);
  virtual ScoreRules score_rules() const;
};

}  // namespace kvevict
