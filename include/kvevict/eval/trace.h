// Attention traces: a sequence of decode steps, step t giving t float32 weights
// over positions 0 ... t-1. Traces are streamed step by step -- never the whole
// trace in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/eval/rng.h"

namespace kvevict {

class Trace {
 public:
  virtual ~Trace() = default;
  Trace() = default;
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  virtual const std::string& id() const noexcept = 0;
  // Number of positions; the trace has length() - 1 decode steps.
  virtual std::uint32_t length() const noexcept = 0;
  std::uint32_t steps() const noexcept { return length() - 1; }
  // Back to before step 1.
  virtual void rewind() = 0;
  // Index of the step the last next() produced (0 before the first).
  virtual std::uint32_t step() const noexcept = 0;
  // Produces the next step t and returns its t weights. The span stays valid
  // until the following call. Throws InputError past the last step.
  virtual std::span<const float> next() = 0;
};

// The canonical generated trace (spec/trace.md §2): sinks, a recency band,
// heavy hitters redrawn every 512 steps, and uniform noise.
struct DecodeShape {
  std::uint32_t length = 4096;
  std::uint32_t seed = 7;
  // One-off spikes (spike_every 0 = none, the canonical trace). From position
  // spike_start on, every spike_every-th position is a *spike token*: it gets
  // no local-band weight at any step, and on the spike_steps steps right after
  // it is generated it receives spike_mass (before normalisation).
  std::uint32_t spike_every = 0;
  std::uint32_t spike_start = 128;
  double spike_mass = 0.0;
  std::uint32_t spike_steps = 2;
  // Recall (0 = none): recall_after steps after its spike, every spike token
  // receives spike_mass again for recall_steps steps -- a fact that matters later.
  std::uint32_t recall_after = 0;
  std::uint32_t recall_steps = 0;  // 0 = spike_steps
};

class DecodeTrace final : public Trace {
 public:
  using Shape = DecodeShape;
  explicit DecodeTrace(std::string id = "decode-4096", Shape shape = {});

  const std::string& id() const noexcept override { return id_; }
  std::uint32_t length() const noexcept override { return shape_.length; }
  void rewind() override;
  std::uint32_t step() const noexcept override { return step_; }
  std::span<const float> next() override;

  // Heavy-hitter positions in rank order (empty before step 128).
  std::span<const std::uint32_t> heavy_set() const noexcept { return heavy_; }

 private:
  void draw_heavy_set(std::uint32_t t);
  bool is_spike_token(std::uint32_t q) const noexcept;

  std::string id_;
  Shape shape_;
  Rng rng_;
  std::uint32_t step_ = 0;
  std::vector<std::uint32_t> heavy_;
  std::vector<double> accum_;
  std::vector<float> weights_;
};

// A trace held in memory (a model's recorded attention, say): row t, for
// t = 1 ... length-1, holds t weights. Rows start at zero and are written
// through row(); next() replays them in order.
class MatrixTrace final : public Trace {
 public:
  MatrixTrace(std::string id, std::uint32_t length);
  const std::string& id() const noexcept override { return id_; }
  std::uint32_t length() const noexcept override { return length_; }
  void rewind() override { step_ = 0; }
  std::uint32_t step() const noexcept override { return step_; }
  std::span<const float> next() override;
  // Row t (1 ... length-1), writable; throws ContractError out of range.
  std::span<float> row(std::uint32_t t);

 private:
  std::string id_;
  std::uint32_t length_;
  std::uint32_t step_ = 0;
  std::vector<float> data_;  // row t starts at t * (t - 1) / 2
};

// Known generated trace ids ("decode-4096").
std::vector<std::string> trace_ids();

// Opens a trace by id; throws InputError listing the known ids.
std::unique_ptr<Trace> open_trace(std::string_view id);

// FNV-1a 32 over the float32 bit patterns (little-endian) of the first `steps`
// steps, from a rewound trace (spec/trace.md §3).
std::uint32_t trace_hash(Trace& trace, std::uint32_t steps);

// Checks that `steps` is within 1 ... trace.steps(); throws InputError naming
// the trace otherwise.
std::uint32_t checked_steps(const Trace& trace, std::int64_t steps);

}  // namespace kvevict
