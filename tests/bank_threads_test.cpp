// The bank's per-thread scratch rows (grouped-query aggregation) are sized at
// construction; OpenMP's thread count can rise afterwards (omp_set_num_threads,
// or torch.set_num_threads in the same Python process). A step must then use
// no more threads than it has rows for -- before the fix it indexed rows past
// the buffer (AddressSanitizer: heap-buffer-overflow WRITE in the aggregation).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kvevict/core/bank.h"
#include "kvevict/core/registry.h"

namespace kvevict {
namespace {

// Restores OpenMP's thread count however the test ends.
struct ThreadCount {
  int saved = omp_get_max_threads();
  ~ThreadCount() { omp_set_num_threads(saved); }
};

TEST(BankThreads, MoreOpenMPThreadsAfterConstructionStayInsideTheScratchRows) {
  ThreadCount restore;
  for (const char* policy : {"scissorhands", "h2o"}) {
    SCOPED_TRACE(policy);
    constexpr std::int64_t kInstances = 8;
    constexpr std::int64_t kBudget = 70;  // past one 64-slot block
    constexpr std::size_t kGroup = 2;
    omp_set_num_threads(1);
    PolicyBank bank({policy, kInstances, kBudget, 4, static_cast<std::int64_t>(kGroup), Aggregation::kMean, 0});
    omp_set_num_threads(4);  // raised after construction
    std::vector<std::unique_ptr<Policy>> separate;
    for (std::int64_t k = 0; k < kInstances; ++k) {
      separate.push_back(make_policy(policy, {{"budget", kBudget}, {"recentWindow", 4}}));
    }
    const std::size_t cap = bank.capacity();
    std::vector<float> attn(kInstances * kGroup * cap);
    std::vector<Position> victims(kInstances);
    std::vector<std::uint32_t> slots(kInstances);
    for (std::int64_t t = 1; t <= 200; ++t) {
      // Query row g of instance k gives slot s a weight that depends on the
      // position held there, so the bank and the instances see the same step.
      for (std::int64_t k = 0; k < kInstances; ++k) {
        std::vector<float> ascending;
        std::vector<std::pair<Position, std::size_t>> held;
        for (std::size_t s = 0; s < cap; ++s) {
          const std::uint32_t p = bank.slot_position(static_cast<std::size_t>(k), s);
          if (p != PolicyBank::kFree) held.emplace_back(p, s);
        }
        std::sort(held.begin(), held.end());
        for (const auto& [p, s] : held) {
          float mean = 0.0F;
          for (std::size_t g = 0; g < kGroup; ++g) {
            const float x = static_cast<float>((p * 7 + g * 3 + static_cast<std::size_t>(k)) % 5) / 8.0F;
            attn[(static_cast<std::size_t>(k) * kGroup + g) * cap + s] = x;
            mean += x;
          }
          ascending.push_back(mean / static_cast<float>(kGroup));
        }
        separate[static_cast<std::size_t>(k)]->on_decode_step(t, std::span<const float>(ascending));
      }
      bank.step(t, attn.data(), cap, victims.data(), slots.data());
      for (std::int64_t k = 0; k < kInstances; ++k) {
        Policy& one = *separate[static_cast<std::size_t>(k)];
        Position want = PolicyBank::kFree;
        if (static_cast<std::int64_t>(one.kept_count()) > kBudget) {
          const auto v = one.evict(kBudget);
          ASSERT_EQ(v.size(), 1U);
          want = v.front();
        }
        ASSERT_EQ(victims[static_cast<std::size_t>(k)], want) << "instance " << k << " step " << t;
      }
    }
  }
}

}  // namespace
}  // namespace kvevict
