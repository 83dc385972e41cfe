// Work spread over every core with OpenMP, for the model's runs (perplexity,
// tasks): internal to the library, OpenMP stays out of public headers.
#pragma once

#include <cstdint>
#include <exception>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

#include "kvevict/eval/harness.h"

namespace kvevict::detail {

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
