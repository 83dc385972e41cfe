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
// stopped. Progress is reported in completion order, one call at a time.
template <typename Job>
void parallel_jobs(std::size_t jobs, const ProgressFn& progress, Job job) {
  // Progress counts in 32 bits; callers bound their work far below this.
  if (jobs > std::numeric_limits<std::uint32_t>::max()) {
    throw ContractError(fmt::format("{} jobs are more than progress can count (at most 2^32 - 1)", jobs));
  }
  std::exception_ptr failure;
  std::uint32_t done = 0;
  const auto total = static_cast<std::uint32_t>(jobs);
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
      ++done;
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

}  // namespace kvevict::detail
