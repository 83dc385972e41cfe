// Work spread over every core with OpenMP, for the model's runs (perplexity,
// tasks): internal to the library, OpenMP stays out of public headers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

#include "kvevict/eval/harness.h"

namespace kvevict::detail {

// Progress counted inside the work, not at its end: a decode loop counts its
// tokens as it steps them, from any thread, so the first report comes at once
// (start(): 0 of the total, after the request was checked) and the next within
// a fraction of a second, however long one window or stream is. Reports are
// made one at a time, at most every kInterval apart (and always at the total),
// so counting every token costs a clock read and a lock. A report that throws
// fails the work that counted it: parallel_jobs rethrows it after all stop.
class ProgressCounter {
 public:
  static constexpr std::chrono::milliseconds kInterval{200};

  // `progress` may be empty: then counting costs nothing. ProgressFn counts
  // in 32 bits: a larger total is reported in units of 2^shift.
  ProgressCounter(ProgressFn progress, std::uint64_t total) : progress_(std::move(progress)), total_(total) {
    while ((total_ >> shift_) > std::numeric_limits<std::uint32_t>::max()) ++shift_;
  }

  void start() {
    if (!progress_) return;
    const std::lock_guard lock(mutex_);
    last_ = std::chrono::steady_clock::now();
    report();
  }

  void add(std::uint64_t units) {
    if (!progress_) return;
    const std::lock_guard lock(mutex_);
    if (finished_) return;  // the total is reported once
    done_ = std::min(total_, done_ + units);
    finished_ = done_ == total_;
    const auto now = std::chrono::steady_clock::now();
    if (!finished_ && now - last_ < kInterval) return;
    last_ = now;
    report();
  }

  explicit operator bool() const { return static_cast<bool>(progress_); }

 private:
  void report() {
    progress_(static_cast<std::uint32_t>(done_ >> shift_), static_cast<std::uint32_t>(total_ >> shift_));
  }

  ProgressFn progress_;
  std::uint64_t total_ = 0;
  unsigned shift_ = 0;
  std::uint64_t done_ = 0;
  bool finished_ = false;
  std::chrono::steady_clock::time_point last_{};
  std::mutex mutex_;
};

// Runs `jobs` (index -> work) on every core, in any order, and rethrows the
// first failure -- the work's or the progress callback's -- after all have
// stopped. Progress is reported in completion order, one call at a time:
// in units of work out of `total`, job i finishing units(i) of them (runs
// stepped together finish a group's runs at once).
template <typename Job, typename Units>
void parallel_jobs(std::size_t jobs, const ProgressFn& progress, std::size_t total_units, Units units, Job job) {
  // Progress counts in 32 bits; callers bound their work far below this.
  if (jobs > std::numeric_limits<std::uint32_t>::max() || total_units > std::numeric_limits<std::uint32_t>::max()) {
    throw ContractError(fmt::format("{} jobs of {} units are more than progress can count (at most 2^32 - 1)", jobs,
                                    total_units));
  }
  std::exception_ptr failure;
  std::uint32_t done = 0;
  const auto total = static_cast<std::uint32_t>(total_units);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t i = 0; i < jobs; ++i) {
    bool skip = false;
#pragma omp critical(kvevict_model_jobs)
    skip = failure != nullptr;
    if (skip) continue;
    std::exception_ptr mine;
    try {
      job(i);
    } catch (...) {
      mine = std::current_exception();
    }
#pragma omp critical(kvevict_model_jobs)
    {
      if (mine && !failure) failure = mine;
      done += static_cast<std::uint32_t>(units(i));
      if (progress && !failure) {
        try {
          progress(done, total);
        } catch (...) {
          failure = std::current_exception();
        }
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// The same, each job one unit of work.
template <typename Job>
void parallel_jobs(std::size_t jobs, const ProgressFn& progress, Job job) {
  parallel_jobs(jobs, progress, jobs, [](std::size_t) { return std::size_t{1}; }, job);
}

}  // namespace kvevict::detail
