#include "kvevict/eval/threads.h"

#include <sched.h>

#include <algorithm>

#include <omp.h>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

int machine_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1, omp_get_num_procs());
}

int use_threads(int requested, std::string* note) {
  if (requested < 0) throw ParameterError(fmt::format("threads: {} is not a count (0: every core)", requested));
  const int cores = machine_cores();
  // 0 leaves OpenMP's default as it is (OMP_NUM_THREADS where set).
  if (requested == 0) return std::max(1, omp_get_max_threads());
  int threads = requested;
  if (threads > cores) {
    if (note != nullptr) {
      *note = fmt::format("{} threads asked for, {} cores here: running on {}", requested, cores, cores);
    }
    threads = cores;
  }
  omp_set_num_threads(threads);
  return threads;
}

}  // namespace kvevict
