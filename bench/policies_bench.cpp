// Decode-step cost of every policy, the library's against the oracle's (the
// plain spec implementation in tests/oracle/), at budgets 512 and 4096, plus
// the bank and a memory-read baseline. Attention comes from a 64 MiB pool so
// each step reads it from memory, as a real decode step would.
//
//   build/bench/kvevict_bench                      all
//   build/bench/kvevict_bench --benchmark_filter=Scissorhands
//   KVEVICT_SIMD=avx2 build/bench/kvevict_bench    the kernels at a lower target
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "kvevict/core/bank.h"
#include "kvevict/eval/bench.h"
#include "kvevict/core/registry.h"
#include "kvevict/core/simd.h"
#include "oracle/oracle.h"

namespace {

using namespace kvevict;

struct Pool {
  std::vector<float> data;
  std::size_t vectors;
  std::size_t len;
};

const Pool& pool_for(std::int64_t budget) {
  static std::vector<std::unique_ptr<Pool>> pools;
  for (const auto& p : pools) {
    if (p->len == static_cast<std::size_t>(budget)) return *p;
  }
  auto p = std::make_unique<Pool>();
  p->len = static_cast<std::size_t>(budget);
  p->vectors = std::max<std::size_t>(16, (std::size_t{64} << 20) / (p->len * sizeof(float)));
  p->data.resize(p->vectors * p->len);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> dist(0.0F, 2.0F / static_cast<float>(budget));
  for (float& x : p->data) x = dist(rng);
  pools.push_back(std::move(p));
  return *pools.back();
}

void run_steps(benchmark::State& state, Policy& policy, std::int64_t budget) {
  const Pool& pool = pool_for(budget);
  std::int64_t pos = 0;
  while (static_cast<std::int64_t>(policy.kept_count()) < budget) {
    policy.on_decode_step(++pos, std::span<const float>(pool.data.data(), policy.kept_count()));
  }
  std::size_t k = 0;
  for (auto _ : state) {
    const float* attn = pool.data.data() + (k++ % pool.vectors) * pool.len;
    policy.on_decode_step(++pos, std::span<const float>(attn, policy.kept_count()));
    if (static_cast<std::int64_t>(policy.kept_count()) > budget) {
      benchmark::DoNotOptimize(policy.evict(budget).data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * budget * 4);
}

void BM_Library(benchmark::State& state, const char* name) {
  const std::int64_t budget = state.range(0);
  auto policy = make_policy(name, {{"budget", budget}});
  run_steps(state, *policy, budget);
}

void BM_Oracle(benchmark::State& state, const char* name) {
  const std::int64_t budget = state.range(0);
  oracle::Oracle policy(name, {{"budget", budget}});
  run_steps(state, policy, budget);
}

void BM_ReadBandwidth(benchmark::State& state) {
  std::vector<float> buffer((std::size_t{256} << 20) / sizeof(float), 1.0F);
  for (auto _ : state) benchmark::DoNotOptimize(sum_floats(buffer.data(), buffer.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * buffer.size() * sizeof(float)));
}

// The floor a policy step is measured against: a plain sum over each row of
// the same pool, in the same order -- reading the step's attention from memory.
void BM_RowFloor(benchmark::State& state) {
  const std::int64_t budget = state.range(0);
  const Pool& pool = pool_for(budget);
  std::size_t k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(sum_floats(pool.data.data() + (k++ % pool.vectors) * pool.len, pool.len));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * budget * 4);
}

void BM_Bank(benchmark::State& state, const char* name) {
  const std::int64_t instances = state.range(0);
  const std::int64_t budget = state.range(1);
  PolicyBank bank({name, instances, budget, 32, 1, Aggregation::kSum, 0});
  std::vector<float> attn(static_cast<std::size_t>(instances) * bank.capacity());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(0.0F, 2.0F / static_cast<float>(budget));
  for (float& x : attn) x = dist(rng);
  std::vector<Position> victims(static_cast<std::size_t>(instances));
  std::vector<std::uint32_t> slots(victims.size());
  std::int64_t pos = 0;
  for (std::int64_t i = 0; i < budget + 2; ++i) bank.step(++pos, attn.data(), bank.capacity(), victims.data(), slots.data());
  for (auto _ : state) bank.step(++pos, attn.data(), bank.capacity(), victims.data(), slots.data());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * attn.size() * sizeof(float)));
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RowFloor)->Arg(512)->Arg(4096)->Unit(benchmark::kNanosecond);
#define KVEVICT_POLICY_BENCH(label, name)                                                    \
  BENCHMARK_CAPTURE(BM_Library, label, name)->Arg(512)->Arg(4096)->Unit(benchmark::kNanosecond); \
  BENCHMARK_CAPTURE(BM_Oracle, label, name)->Arg(512)->Arg(4096)->Unit(benchmark::kNanosecond);
KVEVICT_POLICY_BENCH(Scissorhands, "scissorhands")
KVEVICT_POLICY_BENCH(H2O, "h2o")
KVEVICT_POLICY_BENCH(StreamingLLM, "streaming-llm")
KVEVICT_POLICY_BENCH(SlidingWindow, "sliding-window")
KVEVICT_POLICY_BENCH(TOVA, "tova")
KVEVICT_POLICY_BENCH(SnapKV, "snapkv")
KVEVICT_POLICY_BENCH(PyramidKV, "pyramidkv")
BENCHMARK_CAPTURE(BM_Bank, Scissorhands, "scissorhands")->Args({16384, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Bank, H2O, "h2o")->Args({16384, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();

// BENCHMARK_MAIN, plus the SIMD target: KVEVICT_SIMD's, refused with one line
// when the CPU lacks it, and named in the benchmark's context block.
int main(int argc, char** argv) {
  try {
    kvevict::simd::select_from_environment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvevict_bench: error: %s\n", e.what());
    return 1;
  }
  benchmark::AddCustomContext("simd_target", kvevict::simd::active_target());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
