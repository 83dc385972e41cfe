#include "kvevict/eval/harness.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

constexpr std::uint32_t kTopK = 32;

// Per-run harness state: the held set as the harness sees it.
struct RunState {
  Policy* policy;
  std::int64_t budget;
  std::vector<Position> kept;     // ascending
  std::vector<std::uint8_t> is_kept;
  std::vector<float> attn;
  RunTotals totals;
  double seconds = 0.0;
};

// The step's top-k set (spec/domain.md §2 step 5): the k largest weights, ties
// at the threshold going to the lower positions.
void top_set(std::span<const float> w, std::vector<float>& scratch,
             std::vector<std::uint32_t>& top) {
  const std::size_t t = w.size();
  const std::size_t k = std::min<std::size_t>(kTopK, t);
  scratch.assign(w.begin(), w.end());
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(k - 1),
                   scratch.end(), std::greater<>());
  const float threshold = scratch[k - 1];
  std::size_t above = 0;
  for (const float x : w) above += x > threshold ? 1 : 0;
  std::size_t tie_slots = k - above;
  top.clear();
  for (std::size_t i = 0; i < t; ++i) {
    if (w[i] > threshold) {
      top.push_back(static_cast<std::uint32_t>(i));
    } else if (w[i] == threshold && tie_slots > 0) {
      --tie_slots;
      top.push_back(static_cast<std::uint32_t>(i));
    }
  }
}

void apply_victims(RunState& run, std::span<const Position> victims, std::uint32_t step,
                   std::uint32_t length) {
  for (const Position v : victims) {
    if (v >= length) {
      throw ContractError(fmt::format("{}: victim {} at step {} is outside the sequence (0 ... {})",
                                      run.policy->name(), v, step, length - 1));
    }
    if (run.is_kept[v] == 0) {
      throw ContractError(fmt::format("{}: victim {} at step {} is not held", run.policy->name(),
                                      v, step));
    }
    run.is_kept[v] = 0;  // so a duplicate fails on its second occurrence
  }
  run.totals.evicted += static_cast<std::int64_t>(victims.size());
  std::erase_if(run.kept, [&](Position p) { return run.is_kept[p] == 0; });
  if (std::ssize(run.kept) > run.budget) {
    throw ContractError(fmt::format(
        "{}: returned {} positions at step {}, leaving {} held against a budget of {}",
        run.policy->name(), victims.size(), step, run.kept.size(), run.budget));
  }
}

}  // namespace

std::vector<RunTotals> run_many(std::span<const RunSlot> runs, Trace& trace,
                                std::optional<std::int64_t> max_steps, const ProgressFn& progress,
                                std::vector<double>* seconds, const StepObserver& observe,
                                StepSignals* signals) {
  const std::uint32_t steps = max_steps ? checked_steps(trace, *max_steps) : trace.steps();
  const std::uint32_t length = trace.length();
  std::vector<RunState> states;
  states.reserve(runs.size());
  for (const RunSlot& slot : runs) {
    if (slot.policy == nullptr) throw ContractError("harness: a run has no policy");
    if (slot.budget < 1) {
      throw ParameterError(fmt::format("{}: budget ({}) must be at least 1", slot.policy->name(),
                                       slot.budget));
    }
    RunState s{slot.policy, slot.budget, {}, {}, {}, {}, 0.0};
    const std::size_t most_held =
        std::min<std::size_t>(static_cast<std::size_t>(slot.budget), length) + 1;
    s.kept.reserve(most_held);
    s.kept.push_back(0);
    s.is_kept.assign(length, 0);
    s.is_kept[0] = 1;
    s.attn.resize(most_held);
    s.totals.budget = slot.budget;
    states.push_back(std::move(s));
  }

  if (signals != nullptr) {
    const StepInputs origin = signals->at(0);
    for (RunState& run : states) run.policy->on_origin(origin);
  }
  trace.rewind();
  std::vector<float> scratch;
  std::vector<std::uint32_t> top;
  scratch.reserve(length);
  top.reserve(kTopK);
  for (std::uint32_t t = 1; t <= steps; ++t) {
    const std::span<const float> w = trace.next();
    top_set(w, scratch, top);
    StepInputs inputs;
    if (signals != nullptr) inputs = signals->at(t);
    for (std::size_t r = 0; r < states.size(); ++r) {
      RunState& run = states[r];
      const auto started = std::chrono::steady_clock::now();
      RunTotals& tot = run.totals;
      ++tot.steps;
      const std::size_t held = run.kept.size();
      double retained = 0.0;  // float64, ascending order
      for (std::size_t i = 0; i < held; ++i) {
        run.attn[i] = w[run.kept[i]];
        retained += static_cast<double>(run.attn[i]);
      }
      tot.total_retained_mass += retained;
      tot.total_heavy_possible += static_cast<std::int64_t>(top.size());
      for (const std::uint32_t p : top) tot.total_heavy_hits += run.is_kept[p];

      if (signals != nullptr) {
        inputs.attention = std::span<const float>(run.attn.data(), held);
        run.policy->on_step(t, inputs);
      } else {
        run.policy->on_decode_step(t, std::span<const float>(run.attn.data(), held));
      }
      run.kept.push_back(t);
      run.is_kept[t] = 1;
      std::span<const Position> victims;
      if (std::ssize(run.kept) > run.budget) {
        ++tot.eviction_calls;
        victims = run.policy->evict(run.budget);
        apply_victims(run, victims, t, length);
      }
      run.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      if (observe) {
        StepView view;
        view.run = r;
        view.step = t;
        view.weights = w;
        view.kept = run.kept;
        view.victims = victims;
        view.retained = retained;
        observe(view);
      }
    }
    if (progress) progress(t, steps);
  }

  std::vector<RunTotals> out;
  out.reserve(states.size());
  for (const RunState& s : states) out.push_back(s.totals);
  if (seconds != nullptr) {
    seconds->clear();
    for (const RunState& s : states) seconds->push_back(s.seconds);
  }
  return out;
}

RunTotals run(Policy& policy, Trace& trace, std::int64_t budget, std::optional<std::int64_t> max_steps) {
  const RunSlot slot{&policy, budget};
  return run_many(std::span<const RunSlot>(&slot, 1), trace, max_steps).front();
}

}  // namespace kvevict
