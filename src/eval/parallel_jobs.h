// Work spread over every core with OpenMP, for the model's runs (perplexity,
// tasks): internal to the library, OpenMP stays out of public headers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
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

  // The work is over short of the total (a deadline ended it): what was
  // done is the total now, reported once, so that a progress line closes
  // with the work's real count and rate.
  void finish() {
    if (!progress_) return;
    const std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    total_ = done_;
    while (shift_ > 0 && (total_ >> (shift_ - 1)) <= std::numeric_limits<std::uint32_t>::max()) --shift_;
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

// Runs jobs 0, 1, ... in that order on every core until `deadline`: job i
// is started when i < `always`, or when it would end by the deadline were it
// as long as the longest job so far; once one is not started, none after it
// is. So the jobs run are the first n, returned, however the cores took
// them. The first failure is rethrown after all have stopped.
template <typename Job>
std::size_t paced_jobs(std::size_t jobs, std::optional<std::chrono::steady_clock::time_point> deadline,
                       std::size_t always, Job job) {
  using Clock = std::chrono::steady_clock;
  std::mutex mutex;
  std::size_t next = 0;
  bool stopped = false;
  Clock::duration longest{0};
  std::exception_ptr failure;
#pragma omp parallel
  {
    for (;;) {
      std::size_t i = 0;
      {
        const std::lock_guard lock(mutex);
        if (stopped || failure || next >= jobs) break;
        if (next >= always && deadline && Clock::now() + longest > *deadline) {
          stopped = true;
          break;
        }
        i = next++;
      }
      const auto started = Clock::now();
      std::exception_ptr mine;
      try {
        job(i);
      } catch (...) {
        mine = std::current_exception();
      }
      const std::lock_guard lock(mutex);
      longest = std::max(longest, Clock::now() - started);
      if (mine && !failure) failure = mine;
    }
  }
  if (failure) std::rethrow_exception(failure);
  return next;
}

// The same, each job one unit of work.
template <typename Job>
void parallel_jobs(std::size_t jobs, const ProgressFn& progress, Job job) {
  parallel_jobs(jobs, progress, jobs, [](std::size_t) { return std::size_t{1}; }, job);
}

}  // namespace kvevict::detail
