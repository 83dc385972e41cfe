#include "kvevict/eval/bench.h"

#include <omp.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <memory>
#include <random>

#include <time.h>

#include "kvevict/core/bank.h"
#include "kvevict/core/params.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/harness.h"
#include "kvevict/core/registry.h"
#include "kvevict/core/simd.h"
#include "kvevict/eval/trace.h"
#include "floor.h"

namespace kvevict {

namespace {
using Clock = std::chrono::steady_clock;

// "a:b:c" -> {a, b, c} (a policy item's name and its assignments).
std::vector<std::string> split_list_by(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (std::size_t next; (next = text.find(separator, at)) != std::string::npos; at = next + 1) {
    parts.push_back(text.substr(at, next - at));
  }
  parts.push_back(text.substr(at));
  return parts;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

Spread spread_of(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {*std::min_element(v.begin(), v.end()), median(v), *std::max_element(v.begin(), v.end())};
}

// The index of the median element (the rounds are odd in number).
std::size_t median_index(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  return order.empty() ? 0 : order[order.size() / 2];
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The process's CPU time in seconds (every thread's).
double process_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}


// Attention vectors for the timed steps: enough distinct ones (64 MiB) that
// each step reads its attention from memory, as a decode step would, rather
// than from a cache the previous step warmed.
std::vector<float> attention_pool(std::int64_t budget, std::size_t& vectors) {
  const std::size_t len = static_cast<std::size_t>(budget);
  vectors = std::max<std::size_t>(16, (std::size_t{64} << 20) / (len * sizeof(float)));
  std::vector<float> pool(vectors * len);
  std::mt19937 rng(12345);
  // Weights around the fair share, so votes and scores keep changing.
  std::uniform_real_distribution<float> dist(0.0F, 2.0F / static_cast<float>(budget));
  for (float& x : pool) x = dist(rng);
  return pool;
}
// Keys for the key-aware policies' timed steps, 64 MiB of them as for the
// attention: components drawn from a normal distribution, so norms and
// directions differ from key to key.
std::vector<float> key_pool(std::size_t head_dim, std::size_t& vectors) {
  vectors = std::max<std::size_t>(16, (std::size_t{64} << 20) / (head_dim * sizeof(float)));
  std::vector<float> pool(vectors * head_dim);
  std::mt19937 rng(54321);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  for (float& x : pool) x = dist(rng);
  return pool;
}
}  // namespace

float sum_floats(const float* data, std::size_t n) noexcept { return simd::sum_floats(data, n); }

double thread_cpu_seconds() noexcept {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double measure_read_bandwidth(std::size_t bytes, int repeats) {
  std::vector<float> buffer(bytes / sizeof(float), 1.0F);
  double best = 0.0;
  volatile float sink = 0.0F;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    sink = sink + sum_floats(buffer.data(), buffer.size());
    const double s = seconds_since(start);
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

namespace {
// A buffer of ones, each thread touching its own share first (so its pages
// sit near the thread that reads them).
std::vector<float> touched_buffer(std::size_t floats) {
  std::vector<float> buffer(floats);
  const auto n = static_cast<std::int64_t>(buffer.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) buffer[static_cast<std::size_t>(i)] = 1.0F;
  return buffer;
}

// Seconds for `team` OpenMP threads to sum a share of `buffer` each.
double parallel_sum_seconds(const std::vector<float>& buffer, int team) {
  float total = 0.0F;
  const auto start = Clock::now();
#pragma omp parallel num_threads(team) reduction(+ : total)
  {
    const auto threads = static_cast<std::size_t>(omp_get_num_threads());
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    const std::size_t chunk = buffer.size() / threads;
    total += sum_floats(buffer.data() + t * chunk, t + 1 == threads ? buffer.size() - t * chunk : chunk);
  }
  const double s = seconds_since(start);
  volatile float sink = total;
  (void)sink;
  return s;
}
}  // namespace

double measure_parallel_read_bandwidth(std::size_t bytes, int repeats, int threads) {
  const std::vector<float> buffer = touched_buffer(bytes / sizeof(float));
  const int team = threads > 0 ? threads : omp_get_max_threads();
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    best = std::max(best, static_cast<double>(bytes) / parallel_sum_seconds(buffer, team) / 1e9);
  }
  return best;
}

BankBenchRow bench_bank(const std::string& policy, std::int64_t instances, std::int64_t budget, double seconds) {
  const bool windowed = policy == "scissorhands" || policy == "h2o";
  const std::int64_t recent = windowed ? 32 : 0;
  PolicyBank bank({policy, instances, budget, recent, 1, Aggregation::kSum, 0, policy == "streaming-llm" ? 4 : 0});
  const std::size_t cap = bank.capacity();
  const auto n = static_cast<std::size_t>(instances);
  std::vector<float> attn(n * cap);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(0.0F, 2.0F / static_cast<float>(budget));
  for (float& x : attn) x = dist(rng);
  std::vector<Position> victims(n);
  std::vector<std::uint32_t> slots(n);
  std::int64_t pos = 0;
  for (std::int64_t i = 0; i < budget + 2; ++i) bank.step(++pos, attn.data(), cap, victims.data(), slots.data());

  // The same instances as separate policy objects, one per instance, stepped
  // on every core, each given its row as it is (timing only).
  std::vector<std::unique_ptr<Policy>> separate(n);
  ParamMap params{{"budget", budget}};
  if (windowed) params.emplace_back("recentWindow", recent);
  if (policy == "streaming-llm") params.emplace_back("sinks", 4);
  for (auto& one : separate) one = make_policy(policy, params);
  const auto count = static_cast<std::int64_t>(n);
  std::int64_t separate_pos = 0;
  auto step_separate = [&] {
    const std::int64_t p = ++separate_pos;
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < count; ++k) {
      Policy& one = *separate[static_cast<std::size_t>(k)];
      const float* row_k = attn.data() + static_cast<std::size_t>(k) * cap;
      one.on_decode_step(p, std::span<const float>(row_k, one.kept_count()));
      if (static_cast<std::int64_t>(one.kept_count()) > budget) one.evict(budget);
    }
  };
  for (std::int64_t i = 0; i < budget + 2; ++i) step_separate();

  // Bytes a step must move per slot: the attention read, the slot positions
  // read, and the state -- read and written (Scissorhands' votes, H2O's
  // scores), or only written (TOVA's records). The recency policies read no
  // attention and touch O(1) bytes per instance.
  const bool reads = policy != "sliding-window" && policy != "streaming-llm";
  const double state_read = policy == "h2o" ? 8.0 : policy == "scissorhands" ? 4.0 : 0.0;
  const double state_written = policy == "h2o" ? 8.0 : policy == "scissorhands" || policy == "tova" ? 4.0 : 0.0;
  const double slots_total = static_cast<double>(n * cap);
  const double touched = reads ? slots_total * (4.0 + 4.0 + state_read + state_written) : 0.0;
  // The same-size read: a working set this large may sit partly in a large
  // last-level cache, so the bank is compared with reading as many bytes --
  // timed in each round right after the bank's steps, so a share above 100 %
  // cannot come from a baseline measured at a quieter moment.
  const auto read_floats = static_cast<std::size_t>(slots_total * (4.0 + 4.0 + state_read) / 4.0);
  const std::vector<float> read_buffer = touched_buffer(reads ? read_floats : 0);

  // Rounds alternating between the bank, the same-size read and the separate
  // instances, each the median round: a neighbour's load hits all alike.
  constexpr int kRounds = 5;
  std::vector<double> bank_ms;
  std::vector<double> separate_ms;
  std::vector<double> read_gb_s;
  std::vector<double> shares;
  for (int round = 0; round < kRounds; ++round) {
    int round_steps = 0;
    auto start = Clock::now();
    double spent = 0.0;
    do {
      bank.step(++pos, attn.data(), cap, victims.data(), slots.data());
      ++round_steps;
      spent = seconds_since(start);
    } while (spent < seconds / kRounds || round_steps < 2);
    bank_ms.push_back(spent * 1e3 / round_steps);
    if (reads) {
      // The best of three reads (the first may still be warming the cache the
      // bank just used), right after the round.
      double best = 0.0;
      const double read_bytes = static_cast<double>(read_buffer.size()) * 4.0;
      for (int r = 0; r < 3; ++r) {
        best = std::max(best, read_bytes / parallel_sum_seconds(read_buffer, omp_get_max_threads()) / 1e9);
      }
      read_gb_s.push_back(best);
      // The bytes the step must read, at the rate its step reads them, over
      // the rate a plain read of as many bytes reaches: 100 % is a step that
      // costs no more than reading its inputs (its writes are on top).
      shares.push_back(read_bytes / (bank_ms.back() * 1e6) / best);
    }
    round_steps = 0;
    start = Clock::now();
    do {
      step_separate();
      ++round_steps;
      spent = seconds_since(start);
    } while (spent < seconds / kRounds || round_steps < 2);
    separate_ms.push_back(spent * 1e3 / round_steps);
  }
  BankBenchRow row;
  row.policy = policy;
  row.instances = instances;
  row.budget = budget;
  row.threads = omp_get_max_threads();
  row.ms_per_step = median(bank_ms);
  row.separate_ms_per_step = median(separate_ms);
  row.attention_bytes = reads ? slots_total * 4.0 : 0.0;
  row.touched_bytes = touched;
  row.attention_gb_s = row.attention_bytes / (row.ms_per_step * 1e6);
  row.touched_gb_s = row.touched_bytes / (row.ms_per_step * 1e6);
  if (reads) {
    const std::size_t mid = median_index(shares);
    row.same_size_bandwidth_gb_s = read_gb_s[mid];
    row.share_of_bandwidth = shares[mid];
    row.share = spread_of(shares);
  }
  return row;
}

namespace {

// "name" or "name:key=value[:key=value...]": the policy and its parameters
// under the budget.
std::pair<std::string, ParamMap> bench_item(const std::string& item) {
  const std::vector<std::string> parts = split_list_by(item, ':');
  ParamMap params;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const auto [key, value] = parse_assignment(parts[i]);
    set_param(params, key, value);
  }
  return {parts.front(), params};
}

// The rounds of one case: policy steps and floor rows timed alternately.
struct Rounds {
  std::vector<double> step_ns, floor_ns, ratios;
};

// Policy and floor are timed in alternating rounds of equal length, in this
// thread's CPU time; each round's ratio is its steps over its own floor.
// Steps (and floor rows) go `batch` between reads of the clock: a thread CPU
// clock read is a system call (about a microsecond on a virtual machine).
// (Templates, not std::function: an indirect call a step would be timed too.)
template <class Step, class FloorRow>
Rounds alternate_rounds(Step&& step, FloorRow&& floor_row, double round_s, int batch) {
  Rounds r;
  volatile float sink = 0.0F;
  constexpr int kRounds = 7;
  constexpr int kFloorRows = 512;
  for (int round = 0; round < kRounds; ++round) {
    std::size_t count = 0;
    double start = thread_cpu_seconds();
    double elapsed = 0.0;
    do {
      for (int k = 0; k < batch; ++k) step();
      count += static_cast<std::size_t>(batch);
      elapsed = thread_cpu_seconds() - start;
    } while (elapsed < round_s);
    r.step_ns.push_back(elapsed * 1e9 / static_cast<double>(count));
    count = 0;
    start = thread_cpu_seconds();
    do {
      float total = 0.0F;
      for (int k = 0; k < kFloorRows; ++k) total += floor_row();
      sink = sink + total;
      count += kFloorRows;
      elapsed = thread_cpu_seconds() - start;
    } while (elapsed < round_s);
    r.floor_ns.push_back(elapsed * 1e9 / static_cast<double>(count));
    r.ratios.push_back(r.step_ns.back() / r.floor_ns.back());
  }
  return r;
}

// One policy at one budget: its step in the steady state (budget held before
// each step) beside the floor of reading what the step reads.
BenchRow bench_policy(const std::string& item, std::int64_t budget, const BenchOptions& options) {
  const auto [name, item_params] = bench_item(item);
  ParamMap params = item_params;
  set_param(params, "budget", budget);
  auto policy = make_policy(name, params);
  // A key-aware policy is given a key per step (its default headDim), and
  // its floor reads that key and the policy's whole held state once: what
  // its step and eviction must at least touch. The others read a row of
  // attention, and their floor is that row.
  const bool keyed = (find_policy(name).signals & kSignalKey) != 0;
  std::size_t head_dim = 0;
  std::size_t groups = 1;
  for (const auto& [key, value] : find_policy(name).effective(item_params)) {
    if (keyed && key == "headDim") head_dim = static_cast<std::size_t>(value);
    if (keyed && key == "groups") groups = static_cast<std::size_t>(value);
  }
  // Expected Attention also reads the value (headDim floats) and the
  // queries (groups x headDim): the same pool's rows serve as both (the
  // key's row as the value, it and the rows after it as the queries).
  const Signals reads = policy->signals();
  std::size_t vectors = 0;
  const std::vector<float> pool = keyed ? key_pool(head_dim, vectors) : attention_pool(budget, vectors);
  const std::size_t row_floats = keyed ? head_dim : static_cast<std::size_t>(budget);
  // The floor's read per step, row by row from the pool, plus (keyed) a
  // buffer as large as the held state.
  const std::vector<float> state(keyed ? policy->memory_bytes() / sizeof(float) : 0, 1.0F);
  const std::size_t len = row_floats;
  // The inputs of a keyed step from the pool row `row` (the queries' rows
  // wrap to the pool's start rather than run past its end).
  auto keyed_inputs = [&](std::size_t row) {
    const float* at = pool.data() + row * head_dim;
    const float* queries = row + groups <= vectors ? at : pool.data();
    StepInputs in{.attention = std::nullopt, .key = {at, head_dim}};
    if ((reads & kSignalValue) != 0) in.value = {at, head_dim};
    if ((reads & kSignalQueries) != 0) in.queries = {queries, groups * head_dim};
    return in;
  };
  std::int64_t pos = 0;
  if (keyed) policy->on_origin(keyed_inputs(0));
  // Fill to the steady state: budget held before each step.
  while (static_cast<std::int64_t>(policy->kept_count()) < budget) {
    if (keyed) {
      policy->on_step(++pos, keyed_inputs(1));
    } else {
      policy->on_decode_step(++pos, std::span<const float>(pool.data(), policy->kept_count()));
    }
  }
  // The next row of the pool, wrapping with a compare: a division per
  // step would cost as much as the cheapest policies' whole step.
  std::size_t next_row = 0;
  auto step = [&](std::size_t /*k*/) {
    const std::size_t this_row = next_row;
    const float* row = pool.data() + this_row * len;
    next_row = next_row + 1 == vectors ? 0 : next_row + 1;
    if (keyed) {
      policy->on_step(++pos, keyed_inputs(this_row));
    } else {
      policy->on_decode_step(++pos, std::span<const float>(row, policy->kept_count()));
    }
    if (static_cast<std::int64_t>(policy->kept_count()) > budget) policy->evict(budget);
  };
  // Warm-up: up to 2000 steps, but no longer than one case's timing (an
  // Expected Attention step at budget 4096 takes tens of ms).
  const std::size_t warm_steps = std::min<std::size_t>(vectors, 2000);
  std::size_t warmed = 0;
  const auto warm_start = Clock::now();
  do {
    step(warmed++);
  } while (warmed < warm_steps && (warmed < 2 || seconds_since(warm_start) < options.seconds_per_case));
  const double warm_step_s = seconds_since(warm_start) / static_cast<double>(warmed);
  // The floor: one plain sum over each row, from the same pool in the same
  // order -- what reading the step's attention from memory costs, row
  // start-up included. The row reports the median round with the spread of
  // all of them. Slow steps go fewer to a clock read, so that a round stays
  // near its share of the case's time (one step at least).
  std::size_t read = 0;
  const auto floor_row = [&]() {
    float total = sum_floats(pool.data() + read * len, len);
    if (keyed) total += sum_floats(state.data(), state.size());
    read = read + 1 == vectors ? 0 : read + 1;
    return total;
  };
  std::size_t done = 0;
  const double round_s = options.seconds_per_case / 7;
  const int batch = static_cast<int>(std::clamp(round_s / 8 / std::max(warm_step_s, 1e-12), 1.0, 8192.0));
  const Rounds r = alternate_rounds([&]() { step(done++); }, floor_row, round_s, batch);
  const std::size_t mid = median_index(r.ratios);
  BenchRow row;
  row.policy = item;
  row.budget = budget;
  row.ns_per_step = r.step_ns[mid];
  row.attention_bytes = static_cast<double>((len + state.size()) * sizeof(float));
  row.gb_per_s = row.attention_bytes / row.ns_per_step;
  row.floor_ns = r.floor_ns[mid];
  row.ratio_to_floor = r.ratios[mid];
  row.step_ns = spread_of(r.step_ns);
  row.ratio = spread_of(r.ratios);
  return row;
}

// The canonical compare in one pass beside run by run.
void bench_compare(BenchReport& report, const BenchOptions& options) {
  if (options.progress) options.progress("canonical compare, one pass");
  auto start = Clock::now();
  const double cpu_start = process_seconds();
  (void)compare(CompareRequest{}, EvaluateOptions{});
  report.compare_shared_seconds = seconds_since(start);
  report.compare_shared_cpu_seconds = process_seconds() - cpu_start;
  report.compare_threads = omp_get_max_threads();
  if (options.progress) options.progress("canonical compare, run by run");
  start = Clock::now();
  for (const PolicyInfo* info : policies()) {
    if ((info->signals & ~kSignalAttention) != 0) continue;  // the canonical compare's policies
    for (const std::int64_t b : kCanonicalBudgets) {
      auto policy = info->make({{"budget", b}});
      DecodeTrace trace;
      (void)run(*policy, trace, b);
    }
  }
  report.compare_separate_seconds = seconds_since(start);
}

}  // namespace

BenchReport run_bench(const BenchOptions& options) {
  std::vector<std::string> names = options.policies;
  if (names.empty()) names = policy_names(kSignalAttention);
  // Every item is built at every budget before any timing, so a bad one fails first.
  for (const std::string& item : names) {
    const auto [name, params] = bench_item(item);
    for (const std::int64_t budget : options.budgets) {
      ParamMap with_budget = params;
      set_param(with_budget, "budget", budget);
      (void)make_policy(name, with_budget);
    }
  }
  BenchReport report;
  report.simd_target = simd::active_target();
  if (options.progress) options.progress("read bandwidth");
  report.read_bandwidth_gb_s = measure_read_bandwidth();
  for (const std::string& item : names) {
    for (const std::int64_t budget : options.budgets) {
      if (options.progress) options.progress(item + " @ " + std::to_string(budget));
      report.rows.push_back(bench_policy(item, budget, options));
    }
  }

  // The banks of the policies asked for (each takes seconds): of the five a
  // bank runs, those in `names`, in the bank's order.
  std::vector<std::string> banks;
  for (const char* policy : {"scissorhands", "h2o", "tova", "sliding-window", "streaming-llm"}) {
    if (std::find(names.begin(), names.end(), policy) != names.end()) banks.emplace_back(policy);
  }
  if (options.bank_instances > 0 && !banks.empty()) {
    if (options.progress) options.progress("parallel read bandwidth");
    report.parallel_bandwidth_gb_s = measure_parallel_read_bandwidth();
    for (const std::string& policy : banks) {
      if (options.progress) options.progress("bank of " + policy);
      report.bank.push_back(bench_bank(policy, options.bank_instances, options.bank_budget,
                                       std::max(1.0, 4 * options.seconds_per_case)));
    }
  }
  if (options.include_compare) bench_compare(report, options);
  return report;
}

}  // namespace kvevict
