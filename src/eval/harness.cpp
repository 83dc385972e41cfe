#include "kvevict/eval/harness.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>

#include <fmt/format.h>
#include <omp.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

constexpr std::uint32_t kTopK = 32;
// Runs whose retained sums advance together (see run_many).
constexpr std::size_t kSumGroup = 8;

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
  // The k-th largest weight (duplicates counted): a min-heap of the k largest
  // so far, which most weights of a step pass without entering.
  scratch.assign(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(k));
  std::make_heap(scratch.begin(), scratch.end(), std::greater<>());
  for (std::size_t i = k; i < t; ++i) {
    if (w[i] > scratch.front()) {
      std::pop_heap(scratch.begin(), scratch.end(), std::greater<>());
      scratch.back() = w[i];
      std::push_heap(scratch.begin(), scratch.end(), std::greater<>());
    }
  }
  const float threshold = scratch.front();
  // One walk: the positions above the threshold (fewer than k) and the first
  // k ties at it, each ascending; then the ties that fit, merged in order.
  top.clear();
  std::uint32_t ties[kTopK];
  std::size_t tie_count = 0;
  for (std::size_t i = 0; i < t; ++i) {
    if (w[i] >= threshold) {
      if (w[i] > threshold) {
        top.push_back(static_cast<std::uint32_t>(i));
      } else if (tie_count < k) {
        ties[tie_count++] = static_cast<std::uint32_t>(i);
      }
    }
  }
  const std::size_t taken = std::min(tie_count, k - top.size());
  for (std::size_t j = 0; j < taken; ++j) {  // (at most k of each: no buffer, no allocation)
    top.insert(std::upper_bound(top.begin(), top.end(), ties[j]), ties[j]);
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
  // Close the gaps from the lowest victim on (the held set is ascending): one
  // victim is one erase, and the positions below the lowest never move.
  if (!victims.empty()) {
    const Position lowest = *std::min_element(victims.begin(), victims.end());
    const auto from = std::lower_bound(run.kept.begin(), run.kept.end(), lowest);
    if (victims.size() == 1) {
      run.kept.erase(from);
    } else {
      run.kept.erase(std::remove_if(from, run.kept.end(), [&](Position p) { return run.is_kept[p] == 0; }),
                     run.kept.end());
    }
  }
  if (std::ssize(run.kept) > run.budget) {
    throw ContractError(fmt::format(
        "{}: returned {} positions at step {}, leaving {} held against a budget of {}",
        run.policy->name(), victims.size(), step, run.kept.size(), run.budget));
  }
}

}  // namespace

namespace {

// Up to kChunkSteps rows of the trace and their top sets, made once and
// stepped through by every core's share of the runs (run_many's parallel path).
constexpr std::uint32_t kChunkSteps = 256;
struct Chunk {
  std::uint32_t first = 0;  // its first step
  std::uint32_t count = 0;
  std::vector<float> rows;
  std::vector<std::size_t> row_at = std::vector<std::size_t>(kChunkSteps + 1);
  std::vector<std::uint32_t> tops = std::vector<std::uint32_t>(kChunkSteps * kTopK);
  std::vector<std::uint32_t> top_count = std::vector<std::uint32_t>(kChunkSteps);
};

// A share's first error, at its step and run.
struct Failure {
  std::uint32_t step = 0;
  std::size_t run = 0;
  std::exception_ptr error;
};

// The error the serial loop would have thrown: the lowest step, then the lowest run.
const Failure* first_failure(const std::vector<Failure>& failures) {
  const Failure* worst = nullptr;
  for (const Failure& f : failures) {
    if (f.error && (worst == nullptr || f.step < worst->step || (f.step == worst->step && f.run < worst->run))) {
      worst = &f;
    }
  }
  return worst;
}

// The runs of run_many over one trace: each run's held set and totals, and
// the steps that drive them, serially or spread over the cores.
class ManyRuns {
 public:
  ManyRuns(std::span<const RunSlot> runs, Trace& trace, std::uint32_t steps, const ProgressFn& progress,
           const StepObserver& observe, StepSignals* signals)
      : trace_(trace), steps_(steps), length_(trace.length()), progress_(progress), observe_(observe),
        signals_(signals) {
    states_.reserve(runs.size());
    std::int64_t max_budget = 1;
    for (const RunSlot& slot : runs) max_budget = std::max(max_budget, slot.budget);
    for (const RunSlot& slot : runs) {
      if (slot.policy == nullptr) throw ContractError("harness: a run has no policy");
      if (slot.budget < 1) {
        throw ParameterError(fmt::format("{}: budget ({}) must be at least 1", slot.policy->name(), slot.budget));
      }
      RunState s{slot.policy, slot.budget, {}, {}, {}, {}, 0.0};
      const std::size_t most_held = std::min<std::size_t>(static_cast<std::size_t>(slot.budget), length_) + 1;
      s.kept.reserve(most_held);
      s.kept.push_back(0);
      s.is_kept.assign(length_, 0);
      s.is_kept[0] = 1;
      // Room for the longest run's held set: the retained sums run in groups,
      // each run's weights padded with zeros to its group's longest (below).
      s.attn.resize(std::min<std::size_t>(length_, static_cast<std::size_t>(max_budget)) + 1);
      s.totals.budget = slot.budget;
      states_.push_back(std::move(s));
    }
    retained_of_.resize(states_.size());
    scratch_.reserve(length_);
    top_.reserve(kTopK);
    all_runs_.resize(states_.size());
    for (std::size_t r = 0; r < all_runs_.size(); ++r) all_runs_[r] = r;
  }

  void run() {
    if (signals_ != nullptr) {
      const StepInputs origin = signals_->at(0);
      for (RunState& run : states_) run.policy->on_origin(origin);
    }
    trace_.rewind();
    // Several runs, nothing watching each step in order (an observer sees the
    // runs in order, step by step) and no signals read step by step: the runs
    // are spread over the cores.
    const bool parallel =
        states_.size() > 1 && !observe_ && signals_ == nullptr && omp_get_max_threads() > 1 && !omp_in_parallel();
    if (parallel) {
      run_parallel();
    } else {
      run_serial();
    }
  }

  const std::vector<RunState>& states() const noexcept { return states_; }

 private:
  // The held weights of the step `w` for up to kSumGroup runs (`members`),
  // then their retained masses: each a float64 sum in ascending order, but
  // the group's sums advance together (independent chains, so the adds do
  // not wait on each other; a run shorter than the group's longest adds
  // zeros, which change no sum).
  void gather_and_sum(std::span<const std::size_t> members, std::span<const float> w) {
    std::size_t longest = 0;
    for (const std::size_t r : members) {
      RunState& run = states_[r];
      const std::size_t held = run.kept.size();
      for (std::size_t i = 0; i < held; ++i) run.attn[i] = w[run.kept[i]];
      longest = std::max(longest, held);
    }
    for (const std::size_t r : members) {
      RunState& run = states_[r];
      std::fill(run.attn.begin() + static_cast<std::ptrdiff_t>(run.kept.size()),
                run.attn.begin() + static_cast<std::ptrdiff_t>(longest), 0.0F);
    }
    double sums[kSumGroup] = {};
    const float* rows[kSumGroup];
    for (std::size_t m = 0; m < kSumGroup; ++m) rows[m] = states_[members[std::min(m, members.size() - 1)]].attn.data();
    for (std::size_t i = 0; i < longest; ++i) {
      for (std::size_t m = 0; m < kSumGroup; ++m) sums[m] += static_cast<double>(rows[m][i]);
    }
    for (std::size_t m = 0; m < members.size(); ++m) retained_of_[members[m]] = sums[m];
  }

  // Every run of `runs_here`, in sum groups of kSumGroup.
  void gather_and_sum_all(std::span<const std::size_t> runs_here, std::span<const float> w) {
    for (std::size_t g = 0; g < runs_here.size(); g += kSumGroup) {
      gather_and_sum(runs_here.subspan(g, std::min(kSumGroup, runs_here.size() - g)), w);
    }
  }

  // One run's step: its policy sees the step, the harness applies its victims.
  void step_run(std::size_t r, std::uint32_t t, std::span<const float> w, std::span<const std::uint32_t> step_top,
                const StepInputs* inputs) {
    RunState& run = states_[r];
    const auto started = std::chrono::steady_clock::now();
    RunTotals& tot = run.totals;
    ++tot.steps;
    const std::size_t held = run.kept.size();
    const double retained = retained_of_[r];
    tot.total_retained_mass += retained;
    tot.total_heavy_possible += static_cast<std::int64_t>(step_top.size());
    for (const std::uint32_t p : step_top) tot.total_heavy_hits += run.is_kept[p];

    if (inputs != nullptr) {
      StepInputs mine = *inputs;
      mine.attention = std::span<const float>(run.attn.data(), held);
      run.policy->on_step(t, mine);
    } else {
      run.policy->on_decode_step(t, std::span<const float>(run.attn.data(), held));
    }
    run.kept.push_back(t);
    run.is_kept[t] = 1;
    std::span<const Position> victims;
    if (std::ssize(run.kept) > run.budget) {
      ++tot.eviction_calls;
      victims = run.policy->evict(run.budget);
      apply_victims(run, victims, t, length_);
    }
    run.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (observe_) {
      StepView view;
      view.run = r;
      view.step = t;
      view.weights = w;
      view.kept = run.kept;
      view.victims = victims;
      view.retained = retained;
      observe_(view);
    }
  }

  void run_serial() {
    for (std::uint32_t t = 1; t <= steps_; ++t) {
      const std::span<const float> w = trace_.next();
      top_set(w, scratch_, top_);
      StepInputs inputs;
      if (signals_ != nullptr) inputs = signals_->at(t);
      gather_and_sum_all(all_runs_, w);
      for (std::size_t r = 0; r < states_.size(); ++r) {
        step_run(r, t, w, top_, signals_ != nullptr ? &inputs : nullptr);
      }
      if (progress_) progress_(t, steps_);
    }
  }

  // The trace's next `kChunkSteps` rows from step t0 (scratch_ and top_ serve
  // the first core alone here: no serial loop runs).
  void make_chunk(Chunk& chunk, std::uint32_t t0) {
    chunk.first = t0;
    chunk.count = t0 > steps_ ? 0 : std::min(kChunkSteps, steps_ - t0 + 1);
    chunk.rows.clear();
    for (std::uint32_t k = 0; k < chunk.count; ++k) {
      const std::span<const float> w = trace_.next();
      chunk.row_at[k] = chunk.rows.size();
      chunk.rows.insert(chunk.rows.end(), w.begin(), w.end());
      top_set(w, scratch_, top_);
      std::copy(top_.begin(), top_.end(), chunk.tops.begin() + static_cast<std::ptrdiff_t>(k * kTopK));
      chunk.top_count[k] = static_cast<std::uint32_t>(top_.size());
    }
    chunk.row_at[chunk.count] = chunk.rows.size();
  }

  // One share of the runs through all of a chunk's steps, stopping at its first error.
  void step_share(const Chunk& chunk, const std::vector<std::size_t>& mine, Failure& failure) {
    for (std::uint32_t k = 0; k < chunk.count && !failure.error; ++k) {
      const std::uint32_t t = chunk.first + k;
      const std::span<const float> w(chunk.rows.data() + chunk.row_at[k], chunk.row_at[k + 1] - chunk.row_at[k]);
      const std::span<const std::uint32_t> step_top(chunk.tops.data() + k * kTopK, chunk.top_count[k]);
      gather_and_sum_all(mine, w);
      for (const std::size_t r : mine) {
        try {
          step_run(r, t, w, step_top, nullptr);
        } catch (...) {
          failure = {t, r, std::current_exception()};
          break;
        }
      }
    }
  }

  // Rebalance: each run's cost in the last chunk, largest first, each to the
  // least loaded share (the first core's share starts with the cost of
  // making the next chunk).
  void rebalance(std::vector<std::vector<std::size_t>>& shares, std::vector<double>& spent_before,
                 double making_seconds) const {
    std::vector<std::pair<double, std::size_t>> cost(states_.size());
    for (std::size_t r = 0; r < states_.size(); ++r) {
      cost[r] = {states_[r].seconds - spent_before[r], r};
      spent_before[r] = states_[r].seconds;
    }
    std::sort(cost.begin(), cost.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<double> load(shares.size(), 0.0);
    load[0] = making_seconds;
    for (auto& share : shares) share.clear();
    for (const auto& [seconds_here, r] : cost) {
      const std::size_t least = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      shares[least].push_back(r);
      load[least] += seconds_here;
    }
    for (auto& share : shares) std::sort(share.begin(), share.end());
  }

  // The trace is still made once: kChunkSteps rows (and their top sets) at a
  // time, and each core steps its share of the runs through all of a chunk's
  // steps -- one fork and join a chunk, not a step. Two chunk buffers: while
  // the cores step the runs through one chunk, the first core also makes the
  // next (the trace is read in order, by it alone). The first chunk deals
  // the runs out in turn; later ones by what each cost (rebalance).
  void run_parallel() {
    Chunk chunks[2];
    const auto cores = static_cast<std::size_t>(std::min<std::int64_t>(omp_get_max_threads(), std::ssize(states_)));
    std::vector<std::vector<std::size_t>> shares(cores);
    for (std::size_t r = 0; r < states_.size(); ++r) shares[r % cores].push_back(r);
    std::vector<double> spent_before(states_.size(), 0.0);
    double making_seconds = 0.0;
    // The error the serial loop would have thrown is rethrown; an error
    // making the next chunk is thrown after the chunk that was being stepped.
    std::vector<Failure> failures(cores);
    std::exception_ptr making_error;
    make_chunk(chunks[0], 1);
    for (std::size_t which = 0; chunks[which].count > 0; which ^= 1) {
      const Chunk& chunk = chunks[which];
      Chunk& next = chunks[which ^ 1];
#pragma omp parallel num_threads(static_cast<int>(cores))
      {
        const auto c = static_cast<std::size_t>(omp_get_thread_num());
        if (c == 0) {
          const auto started = std::chrono::steady_clock::now();
          try {
            make_chunk(next, chunk.first + chunk.count);
          } catch (...) {
            making_error = std::current_exception();
            next.count = 0;
          }
          making_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        }
        // (Each thread takes the shares c, c + threads, ...: fewer threads
        // than asked for still step every run.)
        for (std::size_t share = c; share < cores; share += static_cast<std::size_t>(omp_get_num_threads())) {
          step_share(chunk, shares[share], failures[share]);
        }
      }
      if (const Failure* worst = first_failure(failures)) std::rethrow_exception(worst->error);
      if (making_error) std::rethrow_exception(making_error);
      if (progress_) {
        for (std::uint32_t k = 0; k < chunk.count; ++k) progress_(chunk.first + k, steps_);
      }
      rebalance(shares, spent_before, making_seconds);
    }
  }

  Trace& trace_;
  std::uint32_t steps_;
  std::uint32_t length_;
  const ProgressFn& progress_;
  const StepObserver& observe_;
  StepSignals* signals_;
  std::vector<RunState> states_;
  std::vector<double> retained_of_;
  std::vector<float> scratch_;
  std::vector<std::uint32_t> top_;
  std::vector<std::size_t> all_runs_;
};

}  // namespace

std::vector<RunTotals> run_many(std::span<const RunSlot> runs, Trace& trace,
                                std::optional<std::int64_t> max_steps, const ProgressFn& progress,
                                std::vector<double>* seconds, const StepObserver& observe,
                                StepSignals* signals) {
  const std::uint32_t steps = max_steps ? checked_steps(trace, *max_steps) : trace.steps();
  ManyRuns many(runs, trace, steps, progress, observe, signals);
  many.run();
  std::vector<RunTotals> out;
  out.reserve(many.states().size());
  for (const RunState& s : many.states()) out.push_back(s.totals);
  if (seconds != nullptr) {
    seconds->clear();
    for (const RunState& s : many.states()) seconds->push_back(s.seconds);
  }
  return out;
}

RunTotals run(Policy& policy, Trace& trace, std::int64_t budget, std::optional<std::int64_t> max_steps) {
  const RunSlot slot{&policy, budget};
  return run_many(std::span<const RunSlot>(&slot, 1), trace, max_steps).front();
}

}  // namespace kvevict
