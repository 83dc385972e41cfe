#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/sliding_window.h"

namespace kvevict {
namespace {

std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }

TEST(SlidingWindow, EvictsOldestFirstAndIgnoresAttention) {
  SlidingWindow p({.budget = 2});
  p.on_decode_step(1, std::vector<float>{1.0F});
  p.on_decode_step(2, std::nullopt);
  EXPECT_EQ(victims(p.evict(2)), (std::vector<Position>{0}));
  p.on_decode_step(3, std::vector<float>{0.0F, 1.0F});
  EXPECT_EQ(victims(p.evict(1)), (std::vector<Position>{1, 2}));
  EXPECT_EQ(p.kept_count(), 1U);
}

TEST(SlidingWindow, BudgetOneKeepsTheNewest) {
  SlidingWindow p({.budget = 1});
  for (std::int64_t t = 1; t <= 5; ++t) {
    p.on_decode_step(t, std::nullopt);
    EXPECT_EQ(victims(p.evict(1)), (std::vector<Position>{static_cast<Position>(t - 1)}));
  }
  EXPECT_THROW(SlidingWindow({.budget = 0}), ParameterError);
  EXPECT_EQ(SlidingWindow({.budget = 512}).memory_bytes(), 4U * 513U);
}

TEST(SlidingWindow, CapacityIsBudgetPlusOne) {
  SlidingWindow p({.budget = 2});
  p.on_decode_step(1, std::nullopt);
  p.on_decode_step(2, std::nullopt);
  EXPECT_THROW(p.on_decode_step(3, std::nullopt), ContractError);
  EXPECT_EQ(p.kept_count(), 3U);
}

}  // namespace
}  // namespace kvevict
