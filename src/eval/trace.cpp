#include "kvevict/eval/trace.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {
// Component masses and shapes of spec/trace.md §2.2, as decimal literals.
constexpr double kSinkMass = 0.15;
constexpr double kLocalMass = 0.55;
constexpr double kHeavyMass = 0.25;
constexpr double kNoiseMass = 0.05;
constexpr double kSinkSplit[] = {0.06, 0.045, 0.03, 0.015};
constexpr std::uint32_t kSinks = 4;
constexpr std::uint32_t kLocalSpan = 64;
constexpr std::uint32_t kHeavyCount = 32;
constexpr std::uint32_t kHeavyStart = 128;
constexpr std::uint32_t kHeavyEpoch = 512;
}  // namespace

DecodeTrace::DecodeTrace(std::string id, Shape shape)
    : id_(std::move(id)), shape_(shape), rng_(shape.seed) {
  if (shape_.length < 2) {
    throw InputError(fmt::format("trace {}: length ({}) must be at least 2", id_, shape_.length));
  }
  heavy_.reserve(kHeavyCount);
  accum_.resize(shape_.length);
  weights_.resize(shape_.length);
}

void DecodeTrace::rewind() {
  rng_ = Rng(shape_.seed);
  step_ = 0;
  heavy_.clear();
}

void DecodeTrace::draw_heavy_set(std::uint32_t t) {
  // The number and order of generator calls are part of the trace.
  heavy_.clear();
  const std::uint32_t span = t - 68;
  while (heavy_.size() < kHeavyCount) {
    const std::uint32_t p = rng_.next_int(span) + 4;  // 4 <= p <= t - 65
    // Spike tokens are never heavy hitters: their importance is one-off.
    if (is_spike_token(p)) continue;
    if (std::find(heavy_.begin(), heavy_.end(), p) == heavy_.end()) heavy_.push_back(p);
  }
}

bool DecodeTrace::is_spike_token(std::uint32_t q) const noexcept {
  return shape_.spike_every > 0 && q >= shape_.spike_start &&
         (q - shape_.spike_start) % shape_.spike_every == 0;
}

std::span<const float> DecodeTrace::next() {
  if (step_ >= steps()) {
    throw InputError(fmt::format("trace {}: no step after {} (it has {} steps)", id_, step_, steps()));
  }
  const std::uint32_t t = ++step_;
  if (t == kHeavyStart || (t > kHeavyStart && t % kHeavyEpoch == 0)) draw_heavy_set(t);

  double* out = accum_.data();
  std::fill_n(out, t, 0.0);

  const std::uint32_t n_sinks = std::min(kSinks, t);
  double sink_total = 0.0;
  for (std::uint32_t i = 0; i < n_sinks; ++i) sink_total += kSinkSplit[i];
  for (std::uint32_t i = 0; i < n_sinks; ++i) out[i] += (kSinkSplit[i] * kSinkMass) / sink_total;

  const std::uint32_t span = std::min(kLocalSpan, t);
  double local_weight = 0.0;
  for (std::uint32_t d = 1; d <= span; ++d) local_weight += static_cast<double>(65 - d);
  // Before the first heavy draw the heavy mass is folded into the local band.
  const double local_mass = t < kHeavyStart ? kLocalMass + kHeavyMass : kLocalMass;
  for (std::uint32_t d = 1; d <= span; ++d) {
    if (is_spike_token(t - d)) continue;  // spike tokens get no local weight
    out[t - d] += (static_cast<double>(65 - d) * local_mass) / local_weight;
  }

  if (t >= kHeavyStart && !heavy_.empty()) {
    double heavy_weight = 0.0;
    for (std::uint32_t r = 0; r < kHeavyCount; ++r) heavy_weight += 1.0 / static_cast<double>(r + 1);
    for (std::size_t r = 0; r < heavy_.size(); ++r) {
      out[heavy_[r]] += (kHeavyMass / static_cast<double>(r + 1)) / heavy_weight;
    }
  }

  // Spikes, then recalls: spike_mass on each spike token in its window.
  if (shape_.spike_every > 0) {
    for (std::uint32_t k = 1; k <= shape_.spike_steps && k <= t; ++k) {
      if (is_spike_token(t - k)) out[t - k] += shape_.spike_mass;
    }
    if (shape_.recall_after > 0) {
      const std::uint32_t recall_steps = shape_.recall_steps > 0 ? shape_.recall_steps : shape_.spike_steps;
      for (std::uint32_t k = 1; k <= recall_steps; ++k) {
        const std::uint32_t back = shape_.recall_after + k;
        if (back <= t && is_spike_token(t - back)) out[t - back] += shape_.spike_mass;
      }
    }
  }

  const double noise = kNoiseMass / static_cast<double>(t);
  for (std::uint32_t i = 0; i < t; ++i) out[i] += noise;

  double total = 0.0;
  for (std::uint32_t i = 0; i < t; ++i) total += out[i];
  for (std::uint32_t i = 0; i < t; ++i) weights_[i] = static_cast<float>(out[i] / total);
  return {weights_.data(), t};
}

namespace {
struct NamedShape {
  const char* id;
  DecodeShape shape;
};
// The generated traces. decode-4096 is the canonical one (spec/trace.md);
// the others add one-off spikes, with or without a later recall
// (docs/traces.md).
const NamedShape kGenerated[] = {
    {"decode-4096", DecodeShape{}},
    {"stale-spike-4096", DecodeShape{4096, 7, 4, 128, 2.0, 2, 0}},
    {"recalled-fact-4096", DecodeShape{4096, 7, 32, 128, 2.0, 2, 512, 6}},
};
}  // namespace

std::vector<std::string> trace_ids() {
  std::vector<std::string> ids;
  for (const auto& g : kGenerated) ids.emplace_back(g.id);
  return ids;
}

std::unique_ptr<Trace> open_trace(std::string_view id) {
  for (const auto& g : kGenerated) {
    if (id == g.id) return std::make_unique<DecodeTrace>(g.id, g.shape);
  }
  std::string known;
  for (const auto& k : trace_ids()) known += (known.empty() ? "" : ", ") + k;
  throw InputError(fmt::format("unknown trace '{}' (known: {})", id, known));
}

std::uint32_t trace_hash(Trace& trace, std::uint32_t steps) {
  trace.rewind();
  std::uint32_t h = 0x811C9DC5U;
  for (std::uint32_t s = 0; s < steps; ++s) {
    for (const float w : trace.next()) {
      const auto bits = std::bit_cast<std::uint32_t>(w);
      for (int byte = 0; byte < 4; ++byte) {
        h ^= (bits >> (8 * byte)) & 0xFFU;
        h *= 0x01000193U;
      }
    }
  }
  return h;
}

std::uint32_t checked_steps(const Trace& trace, std::int64_t steps) {
  if (steps < 1 || steps > std::int64_t{trace.steps()}) {
    throw InputError(fmt::format("steps ({}) must be in 1 ... {} for trace {}", steps,
                                 trace.steps(), trace.id()));
  }
  return static_cast<std::uint32_t>(steps);
}

MatrixTrace::MatrixTrace(std::string id, std::uint32_t length)
    : id_(std::move(id)), length_(length) {
  if (length < 2) throw ContractError(fmt::format("{}: a trace needs at least 2 positions", id_));
  data_.assign(std::size_t{length} * (length - 1) / 2, 0.0F);
}

std::span<float> MatrixTrace::row(std::uint32_t t) {
  if (t < 1 || t >= length_) {
    throw ContractError(fmt::format("{}: row {} is out of range 1 ... {}", id_, t, length_ - 1));
  }
  return {data_.data() + std::size_t{t} * (t - 1) / 2, t};
}

std::span<const float> MatrixTrace::next() {
  if (step_ + 1 >= length_) throw InputError(fmt::format("{}: read past the last step", id_));
  ++step_;
  return row(step_);
}

}  // namespace kvevict
