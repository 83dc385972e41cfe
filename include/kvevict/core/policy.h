// The policy interface (spec/domain.md §1). A policy sees only the attention the
// newest token paid to the positions it still holds, and names positions to
// forget so that at most `budget` remain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvevict {

// Absolute token index (0, 1, 2, ...), never an offset into the kept set.
using Position = std::uint32_t;

// The weights the new token paid to the held positions, in ascending position
// order. std::nullopt means "no information" -- never "all zeros".
using Attention = std::optional<std::span<const float>>;

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

  // Bytes of per-slot state (bytes per slot x capacity), allocated at
  // construction: the hot path never allocates. The victim buffer returned by
  // evict() is not counted, as in the spec's per-slot figures.
  virtual std::size_t memory_bytes() const noexcept = 0;
};

}  // namespace kvevict
