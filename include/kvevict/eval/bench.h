// Speed measurements the tool (`kvevict bench`) and the benchmark suite share.
// Everything is reported as ratios measured in one run -- against a memory-read
// bandwidth baseline measured alongside -- never as absolute promises.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvevict {

struct BenchOptions {
  std::vector<std::int64_t> budgets{512, 4096};
  // Empty: every registered policy. An item may set parameters,
  // "name:key=value[:key=value...]" (its rows are named by the item). Also
  // narrows the bank benchmark to the
  // bank's policies among these (scissorhands, h2o, tova, sliding-window,
  // streaming-llm); none of them: no bank rows.
  std::vector<std::string> policies;
  double seconds_per_case = 0.25;     // timed time per (policy, budget)
  bool include_compare = true;        // time the canonical compare too
  std::int64_t bank_instances = 16384;  // 0 skips the bank
  std::int64_t bank_budget = 1024;
  std::function<void(const std::string&)> progress;  // called before each case
};

// Minimum, median and maximum over a case's rounds.
struct Spread {
  double min = 0.0;
  double median = 0.0;
  double max = 0.0;
};

// Per-policy rows are thread CPU time, in rounds that alternate the policy's
// steps with its floor: each round's ratio is its steps over its own floor,
// so a neighbour's load hits both sides of a ratio alike.
struct BenchRow {
  std::string policy;
  std::int64_t budget = 0;
  double ns_per_step = 0.0;      // on_decode_step + evict, attention given (median round)
  double attention_bytes = 0.0;  // bytes the policy must read per step: its attention row, or (key-aware)
                                 // the step's key and its whole held state
  double gb_per_s = 0.0;         // attention_bytes / ns_per_step
  double floor_ns = 0.0;         // a plain sum over one row from the same pool (reading it from memory; median round)
  double ratio_to_floor = 0.0;   // the median round's ns_per_step / floor_ns (1 = memory speed)
  Spread step_ns;                // over the rounds
  Spread ratio;                  // each round's steps over its own floor
};

struct BankBenchRow {
  std::string policy;
  std::int64_t instances = 0;
  std::int64_t budget = 0;
  int threads = 0;
  double ms_per_step = 0.0;
  double attention_bytes = 0.0;  // per step, all instances
  double touched_bytes = 0.0;    // attention + state read and written per step
  double attention_gb_s = 0.0;
  double touched_gb_s = 0.0;
  double same_size_bandwidth_gb_s = 0.0;  // parallel read of a buffer as large as the bank (median round)
  double share_of_bandwidth = 0.0;  // the bytes a step must read (attention, slot positions, state) per
                                    // second of step, over same_size_bandwidth_gb_s; the median round's
  Spread share;                     // each round's, against the read timed right after it
  double separate_ms_per_step = 0.0;  // the same instances as separate policy objects, on every core
};

struct BenchReport {
  std::string simd_target;  // the SIMD target the kernels ran (include/kvevict/core/simd.h)
  double read_bandwidth_gb_s = 0.0;  // one thread, streaming sum of 256 MiB
  double parallel_bandwidth_gb_s = 0.0;  // every OpenMP thread, 1 GiB
  std::vector<BankBenchRow> bank;
  std::vector<BenchRow> rows;
  double compare_shared_seconds = 0.0;      // canonical compare, one pass over the trace (wall)
  double compare_shared_cpu_seconds = 0.0;  // the same, CPU time of every thread
  int compare_threads = 1;                  // threads the compare's runs were spread over
  double compare_separate_seconds = 0.0;    // the same 21 runs one by one (one thread, wall)
};

// Streaming read bandwidth of one thread over `bytes` (best of `repeats`).
double measure_read_bandwidth(std::size_t bytes = std::size_t{256} << 20, int repeats = 3);
// The same with `threads` OpenMP threads (0: every one) reading a share each.
double measure_parallel_read_bandwidth(std::size_t bytes = std::size_t{1} << 30, int repeats = 3, int threads = 0);

// This thread's CPU time in seconds: a step timed in it is not charged for
// the time another process held the core.
double thread_cpu_seconds() noexcept;

// Sums a buffer as fast as the machine reads it (the bandwidth kernel).
float sum_floats(const float* data, std::size_t n) noexcept;

BenchReport run_bench(const BenchOptions& options);

}  // namespace kvevict
