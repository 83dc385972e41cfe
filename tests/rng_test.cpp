#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/eval/rng.h"

namespace kvevict {
namespace {

TEST(Rng, Seed7MatchesTheSpecCheckValues) {
  Rng rng(7);
  for (const std::uint32_t expected : {210494603U, 711084892U, 3993689120U, 4089369890U, 1706118055U}) {
    EXPECT_EQ(rng.next_u32(), expected);
  }
}

TEST(Rng, Seed1MatchesTheSpecCheckValues) {
  Rng rng(1);
  for (const std::uint32_t expected : {393288148U, 2174103013U, 3814759091U}) {
    EXPECT_EQ(rng.next_u32(), expected);
  }
}

TEST(Rng, NextIntStaysBelowItsBoundAndRefusesZero) {
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.next_int(7), 7U);
  EXPECT_EQ(rng.next_int(1), 0U);
  EXPECT_THROW(rng.next_int(0), ParameterError);
}

TEST(Rng, NextIntRejectsTheBiasedLowValues) {
  // bound 3: threshold = (2^32 - 3) mod 3 = 1, so a draw of 0 is rejected.
  // With seed 7 the first draw is 210494603 (>= 1), giving 210494603 mod 3.
  Rng rng(7);
  EXPECT_EQ(rng.next_int(3), 210494603U % 3U);
  // A bound of 2^32 - 1 has threshold 1: every first draw here passes.
  Rng again(7);
  EXPECT_EQ(again.next_int(4294967295U), 210494603U);
}

TEST(Rng, NextFloatIsTheDrawOverTwoToThe32) {
  Rng rng(7);
  EXPECT_DOUBLE_EQ(rng.next_float(), 210494603.0 / 4294967296.0);
}

}  // namespace
}  // namespace kvevict
