// SIMD dispatch: target selection and its errors, and every Highway kernel
// against the plain loop it replaces, on every target this CPU runs, at the
// sizes where the vector paths and the 64-slot block search run (0..300
// slots, every begin/end split) with tie-heavy values.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "bank_kernels.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/simd.h"
#include "policies/kernels.h"

namespace kvevict {
namespace {

// Restores the CPU and the target the test began with (KVEVICT_SIMD's, when
// the whole program runs at a forced target), whatever the test selected.
class SimdTarget : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = simd::active_target(); }
  void TearDown() override {
    hwy::SetSupportedTargetsForTest(0);
    simd::select_target(saved_);
  }

 private:
  std::string saved_;
};

TEST_F(SimdTarget, TheBaselineIsCompiledAndRunsEverywhere) {
  const auto compiled = simd::compiled_targets();
  const auto supported = simd::supported_targets();
  ASSERT_FALSE(compiled.empty());
  EXPECT_EQ(compiled.front(), "baseline");
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), "baseline");
  for (const auto& s : supported) EXPECT_NE(std::find(compiled.begin(), compiled.end(), s), compiled.end()) << s;
  simd::select_target("best");
  EXPECT_EQ(simd::active_target(), supported.back());
}

TEST_F(SimdTarget, EverySupportedTargetCanBeSelectedAndIsWhatRuns) {
  for (const auto& name : simd::supported_targets()) {
    simd::select_target(name);
    EXPECT_EQ(simd::active_target(), name);
  }
  simd::select_target("best");
  EXPECT_EQ(simd::active_target(), simd::supported_targets().back());
}

TEST_F(SimdTarget, AnUnknownTargetIsRefusedByName) {
  try {
    simd::select_target("avx1024");
    FAIL() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_NE(std::string(e.what()).find("'avx1024' is not one this build has (known: baseline"), std::string::npos)
        << e.what();
  }
}

#if HWY_ARCH_X86
TEST_F(SimdTarget, ATargetTheCpuLacksIsRefusedAndTheSelectionStands) {
  // Pretend to be an AVX2 machine without AVX-512 (Highway's CPU mock).
  hwy::SetSupportedTargetsForTest(HWY_EMU128 | HWY_SCALAR | HWY_SSE4 | HWY_AVX2);
  simd::select_target("sse4");
  const auto supported = simd::supported_targets();
  EXPECT_EQ(std::find(supported.begin(), supported.end(), "avx512"), supported.end());
  try {
    simd::select_target("avx512");
    FAIL() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_NE(std::string(e.what()).find("'avx512' cannot run on this CPU (it supports: baseline, sse4, avx2)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(simd::active_target(), "sse4");  // a refused request changes nothing
  try {
    simd::select_target("avx512-vnni");
    FAIL() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_NE(std::string(e.what()).find("'avx512-vnni' cannot run on this CPU (it supports: baseline, sse4, avx2)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(simd::vnni_active());
  simd::select_target("best");
  EXPECT_EQ(simd::active_target(), "avx2");
  EXPECT_FALSE(simd::vnni_active());
}

// "avx512-vnni" is AVX-512 with the 8-bit products on VNNI: selecting it
// turns them on, any other target off, and the best target is it where the
// CPU has it. (The products themselves are checked at both, tests/
// matmul_int8_test.cpp, by the default run and ctest's simd_avx512.)
TEST_F(SimdTarget, Avx512VnniIsAvx512WithTheEightBitProducts) {
  const auto supported = simd::supported_targets();
  if (std::find(supported.begin(), supported.end(), "avx512-vnni") == supported.end()) {
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  }
  EXPECT_EQ(supported.back(), "avx512-vnni");
  simd::select_target("avx512-vnni");
  EXPECT_TRUE(simd::vnni_active());
  EXPECT_EQ(simd::active_target(), "avx512-vnni");
  simd::select_target("avx512");
  EXPECT_FALSE(simd::vnni_active());
  EXPECT_EQ(simd::active_target(), "avx512");
  simd::select_target("avx2");
  EXPECT_FALSE(simd::vnni_active());
  simd::select_target("best");
  EXPECT_TRUE(simd::vnni_active());
  EXPECT_EQ(simd::active_target(), "avx512-vnni");
}

TEST_F(SimdTarget, TheEnvironmentVariableIsNamedInItsError) {
  hwy::SetSupportedTargetsForTest(HWY_EMU128 | HWY_SCALAR | HWY_SSE4 | HWY_AVX2);
  const char* before = std::getenv("KVEVICT_SIMD");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("KVEVICT_SIMD", "avx512", 1);
  std::string message;
  try {
    simd::select_from_environment();
  } catch (const ParameterError& e) {
    message = e.what();
  }
  if (before != nullptr) {
    ::setenv("KVEVICT_SIMD", saved.c_str(), 1);
  } else {
    ::unsetenv("KVEVICT_SIMD");
  }
  EXPECT_NE(message.find("KVEVICT_SIMD=avx512: SIMD target 'avx512' cannot run on this CPU"), std::string::npos)
      << message;
}
#endif

// ---- the kernels against their plain loops ---------------------------------

// Bit-for-bit equality (memcmp would be handed a null pointer for n = 0).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool valid_weight(float x) { return x >= 0.0F && x <= std::numeric_limits<float>::max(); }

// Tie-heavy weights: sixteenths around the fair share, exact zeros and the
// threshold's neighbours, and (when `bad`) the occasional NaN, infinity or
// negative weight.
float draw_weight(std::mt19937& rng, float threshold, bool bad) {
  switch (rng() % 8) {
    case 0: return 0.0F;
    case 1: return threshold;
    case 2: return std::nextafter(threshold, 0.0F);
    case 3:
      if (bad) {
        const float odd[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1.0F,
                             -0.0F};
        return odd[rng() % 4];
      }
      return 1.0F;
    default: return static_cast<float>(rng() % 4) / 16.0F;
  }
}

struct Case {
  std::size_t n, begin, end;
};

// Sizes around the vector widths and the 64-slot blocks, and splits of the
// searched range that start and end inside, on and past block edges.
std::vector<Case> cases(std::mt19937& rng) {
  std::vector<Case> out;
  for (std::size_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 200, 300}) {
    out.push_back({n, 0, n});
    for (int k = 0; k < 6; ++k) {
      const std::size_t b = n == 0 ? 0 : rng() % (n + 1);
      const std::size_t e = b + (n - b == 0 ? 0 : rng() % (n - b + 1));
      out.push_back({n, b, e});
    }
  }
  return out;
}

// The first block (64 slots, counted from begin) holding the first minimum.
template <class T>
std::size_t block_of_first_min(const std::vector<T>& v, std::size_t begin, std::size_t end) {
  std::size_t j = begin;
  for (std::size_t i = begin; i < end; ++i) j = v[i] < v[j] ? i : j;
  return begin + (j - begin) / 64 * 64;
}

void check_policy_kernels(const std::string& target) {
  std::mt19937 rng(20261201);
  for (int round = 0; round < 150; ++round) {
    for (const Case& c : cases(rng)) {
      SCOPED_TRACE(::testing::Message() << target << " n=" << c.n << " [" << c.begin << ", " << c.end << ")");
      const float threshold = detail::vote_threshold(1.0 / static_cast<double>(1 + rng() % 8));
      const bool bad = rng() % 4 == 0;
      std::vector<float> w(c.n);
      for (float& x : w) x = draw_weight(rng, threshold, bad);

      // Scissorhands' vote pass.
      std::vector<std::uint32_t> votes(c.n);
      for (auto& v : votes) v = rng() % 3;
      const auto before = votes;
      std::vector<std::uint32_t> want = votes;
      bool want_valid = true;
      for (std::size_t i = 0; i < c.n; ++i) {
        want[i] += w[i] >= threshold ? 1U : 0U;
        want_valid = want_valid && valid_weight(w[i]);
      }
      const detail::VotePass pass = detail::count_votes_checked(votes.data(), w.data(), c.n, threshold, c.begin, c.end);
      ASSERT_EQ(votes, want);
      ASSERT_EQ(pass.valid, want_valid);
      if (c.begin < c.end) {
        ASSERT_EQ(pass.min_votes, *std::min_element(want.begin() + c.begin, want.begin() + c.end));
        ASSERT_EQ(pass.min_block, block_of_first_min(want, c.begin, c.end));
      } else {
        ASSERT_EQ(pass.min_votes, std::numeric_limits<std::uint32_t>::max());
      }
      detail::uncount_votes(votes.data(), w.data(), c.n, threshold);
      ASSERT_EQ(votes, before);
      ASSERT_EQ(detail::weights_valid(w.data(), c.n), want_valid);

      // First minimum and first occurrence, on the tie-heavy votes.
      std::size_t first = c.end;
      for (std::size_t i = c.begin; i < c.end; ++i) first = first == c.end || want[i] < want[first] ? i : first;
      ASSERT_EQ(detail::first_min(want.data(), c.begin, c.end), first);
      const std::uint32_t probe = c.n == 0 ? 0 : want[rng() % c.n];
      const auto at = std::find(want.begin() + c.begin, want.begin() + c.end, probe) - want.begin();
      ASSERT_EQ(detail::find_first(want.data(), c.begin, c.end, probe), static_cast<std::size_t>(at));

      // H2O's score pass (valid weights only, as its contract says).
      if (!want_valid) continue;
      std::vector<double> scores(c.n);
      for (auto& s : scores) s = static_cast<double>(rng() % 3) / 8.0;
      std::vector<double> sums = scores;
      for (std::size_t i = 0; i < c.n; ++i) sums[i] += static_cast<double>(w[i]);
      const detail::ScorePass sp = detail::add_weights_min(scores.data(), w.data(), c.n, c.begin, c.end);
      ASSERT_TRUE(same_bits(scores, sums));
      if (c.begin < c.end) {
        ASSERT_EQ(sp.min_score, *std::min_element(sums.begin() + c.begin, sums.begin() + c.end));
        ASSERT_EQ(sp.min_block, block_of_first_min(sums, c.begin, c.end));
      } else {
        ASSERT_EQ(sp.min_score, std::numeric_limits<double>::infinity());
      }
      std::size_t first_score = c.end;
      for (std::size_t i = c.begin; i < c.end; ++i) {
        first_score = first_score == c.end || sums[i] < sums[first_score] ? i : first_score;
      }
      ASSERT_EQ(detail::first_min(sums.data(), c.begin, c.end), first_score);
      const double sprobe = c.n == 0 ? 0.0 : sums[rng() % c.n];
      const auto sat = std::find(sums.begin() + c.begin, sums.begin() + c.end, sprobe) - sums.begin();
      ASSERT_EQ(detail::find_first(sums.data(), c.begin, c.end, sprobe), static_cast<std::size_t>(sat));
    }
  }
}

// TOVA's one-pass step, SnapKV's ring sums and pooling, and the float search.
void check_newer_policy_kernels(const std::string& target) {
  std::mt19937 rng(99);
  for (int round = 0; round < 60; ++round) {
    for (std::size_t kept : {0, 1, 5, 8, 17, 63, 64, 65, 130, 300}) {
      SCOPED_TRACE(::testing::Message() << target << " kept=" << kept << " round " << round);
      const bool bad = rng() % 4 == 0;
      const std::size_t n = kept == 0 ? 0 : 1 + rng() % kept;
      const std::size_t hole = rng() % 2 == 0 ? kept : rng() % (kept + 1);
      std::vector<float> w(n);
      for (float& x : w) x = draw_weight(rng, 0.25F, bad);
      std::vector<float> src(kept + 1);
      for (float& x : src) x = draw_weight(rng, 0.25F, false);
      std::vector<float> dst(kept + 1, -7.0F);
      const detail::ObserveResult got = detail::tova_observe(dst.data(), src.data(), w.data(), n, kept, hole);
      bool want_valid = true;
      for (const float x : w) want_valid = want_valid && valid_weight(x);
      ASSERT_EQ(got.valid, want_valid);
      if (want_valid) {
        std::vector<float> want(kept + 1, -7.0F);
        for (std::size_t i = 0; i < n; ++i) want[i] = w[i];
        for (std::size_t i = n; i < kept; ++i) want[i] = src[i < hole ? i : i + 1];
        ASSERT_TRUE(same_bits(dst, want));
        if (n > 0) {
          ASSERT_EQ(got.min_weight, *std::min_element(w.begin(), w.end()));
          ASSERT_EQ(got.min_block, block_of_first_min(w, 0, n));
          const float probe = w[rng() % n];
          const auto at = std::find(w.begin(), w.end(), probe) - w.begin();
          ASSERT_EQ(detail::find_first(w.data(), 0, n, probe), static_cast<std::size_t>(at));
        }
      }

      // Ring sums: cell by cell in ring order, from 0.0, in float64.
      const std::size_t rows = 1 + rng() % 17;
      const std::size_t stride = kept + rng() % 5;
      std::vector<float> ring(rows * stride);
      for (float& x : ring) x = draw_weight(rng, 0.25F, false) * (rng() % 3 == 0 ? 1e-7F : 1.0F);
      std::vector<double> sums(kept, -1.0);
      std::vector<double> want_sums(kept);
      for (std::size_t i = 0; i < kept; ++i) {
        double sum = 0.0;
        for (std::size_t c = 0; c < rows; ++c) sum += static_cast<double>(ring[c * stride + i]);
        want_sums[i] = sum;
      }
      (void)detail::ring_sums_max(ring.data(), rows, stride, kept, sums.data());
      ASSERT_TRUE(same_bits(sums, want_sums));

      // Max-pooling over neighbours, clipped at both ends.
      const std::size_t radius = rng() % 4 == 0 ? rng() % 40 : rng() % 5;
      std::vector<double> pooled(kept, -1.0);
      std::vector<double> want_pooled(kept);
      for (std::size_t i = 0; i < kept; ++i) {
        const std::size_t lo = i >= radius ? i - radius : 0;
        const std::size_t hi = std::min(kept - 1, i + radius);
        double best = want_sums[lo];
        for (std::size_t j = lo + 1; j <= hi; ++j) best = std::max(best, want_sums[j]);
        want_pooled[i] = best;
      }
      detail::pool_max(want_sums.data(), kept, radius, pooled.data());
      ASSERT_TRUE(same_bits(pooled, want_pooled));

      // The fast path's kernels: pooling with the minimum of [0, end), the
      // screen (every window whose pooled score is <= a limit, in order),
      // the count of scores <= a limit with the first, the ring sums with
      // their largest cell, and the running-sum update across holes.
      const std::size_t end = rng() % (kept + 1);
      std::vector<double> pooled_again(kept, -1.0);
      const double low = detail::pool_max_min(want_sums.data(), kept, radius, pooled_again.data(), end);
      ASSERT_TRUE(same_bits(pooled_again, want_pooled));
      const double want_low = end == 0 ? std::numeric_limits<double>::infinity()
                                       : *std::min_element(want_pooled.begin(), want_pooled.begin() + static_cast<std::ptrdiff_t>(end));
      ASSERT_EQ(low, want_low);
      if (radius <= detail::kMaxScreenRadius) {
        // Limits at, between and beside the pooled scores (ties included).
        const double limit = rng() % 3 == 0 || end == 0 ? static_cast<double>(rng() % 4) * 0.125
                                                        : want_pooled[rng() % end] + (rng() % 2 == 0 ? 0.0 : 1e-300);
        const std::size_t room = 1 + rng() % 40;
        std::vector<std::uint32_t> index(room);
        std::vector<double> score(room);
        std::vector<std::uint64_t> bits(kept / 64 + 2);
        std::vector<std::pair<std::uint32_t, double>> want_windows;
        for (std::size_t i = 0; i < end; ++i) {
          if (want_pooled[i] <= limit) want_windows.emplace_back(static_cast<std::uint32_t>(i), want_pooled[i]);
        }
        const std::size_t found = detail::screen_pool(want_sums.data(), kept, radius, end, limit, index.data(),
                                                      score.data(), room, bits.data());
        ASSERT_EQ(found, std::min(want_windows.size(), room + 1)) << "radius " << radius << " end " << end;
        for (std::size_t k = 0; k < std::min(found, room); ++k) {
          ASSERT_EQ(index[k], want_windows[k].first);
          ASSERT_EQ(score[k], want_windows[k].second);
        }
        const detail::AtMost near = detail::count_at_most(want_pooled.data(), 0, end, limit);
        ASSERT_EQ(near.count, want_windows.size());
        ASSERT_EQ(near.first, want_windows.empty() ? end : std::size_t{want_windows[0].first});
      }
      std::vector<double> sums_again(kept, -1.0);
      const float top = detail::ring_sums_max(ring.data(), rows, stride, kept, sums_again.data());
      ASSERT_TRUE(same_bits(sums_again, want_sums));
      float want_top = 0.0F;
      for (std::size_t c = 0; c < rows; ++c) {
        for (std::size_t i = 0; i < kept; ++i) want_top = std::max(want_top, ring[c * stride + i]);
      }
      ASSERT_EQ(top, want_top);
      // Holes: ascending rings skipped by the held slots.
      std::vector<std::uint32_t> holes;
      for (std::uint32_t r = 0; r < stride && holes.size() + kept < stride; ++r) {
        if (rng() % 3 == 0) holes.push_back(r);
      }
      std::vector<float> row(stride);
      for (float& x : row) x = draw_weight(rng, 0.25F, false);
      std::vector<double> running(kept);
      for (double& x : running) x = static_cast<double>(draw_weight(rng, 0.25F, false)) * 3.0;
      std::vector<float> fresh(kept);
      for (float& x : fresh) x = draw_weight(rng, 0.25F, false) * (rng() % 3 == 0 ? 1e-7F : 1.0F);
      const std::size_t covered = rng() % (kept + 1);
      std::vector<float> want_row = row;
      std::vector<double> want_running = running;
      float want_high = 0.0F;
      float want_least = std::numeric_limits<float>::infinity();
      for (std::size_t i = 0, ring_at = 0; i < covered; ++i, ++ring_at) {
        while (std::find(holes.begin(), holes.end(), ring_at) != holes.end()) ++ring_at;
        want_running[i] = (want_running[i] + static_cast<double>(fresh[i])) - static_cast<double>(want_row[ring_at]);
        want_row[ring_at] = fresh[i];
        want_high = std::max(want_high, fresh[i]);
        if (fresh[i] > 0.0F) want_least = std::min(want_least, fresh[i]);
      }
      const detail::SnapExtremes seen =
          detail::snap_observe(row.data(), running.data(), fresh.data(), covered, holes.data(), holes.size());
      ASSERT_TRUE(same_bits(row, want_row));
      ASSERT_TRUE(same_bits(running, want_running));
      ASSERT_EQ(seen.top, want_high);
      ASSERT_EQ(seen.least_nonzero, want_least);
    }
  }
}

void check_bank_kernels(const std::string& target) {
  constexpr std::uint32_t kFree = PolicyBank::kFree;
  std::mt19937 rng(7);
  for (int round = 0; round < 40; ++round) {
    for (std::size_t n : {1, 5, 8, 9, 16, 33, 64, 65, 130, 257}) {
      SCOPED_TRACE(::testing::Message() << target << " n=" << n << " round " << round);
      const float threshold = detail::vote_threshold(1.0 / static_cast<double>(1 + rng() % 8));
      const bool bad = rng() % 4 == 0;
      std::vector<std::uint32_t> pos(n);
      std::vector<std::uint32_t> order(n);
      for (std::size_t s = 0; s < n; ++s) order[s] = static_cast<std::uint32_t>(s) * 3 + 1;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<float> w(n);
      for (std::size_t s = 0; s < n; ++s) {
        const bool held = rng() % 5 != 0;
        pos[s] = held ? order[s] : kFree;
        // Free slots hold garbage, NaN included: it must never matter.
        w[s] = held ? draw_weight(rng, threshold, bad) : std::numeric_limits<float>::quiet_NaN();
      }
      const std::uint32_t protect = rng() % 3 == 0 ? kFree : static_cast<std::uint32_t>(rng() % (3 * n + 2));

      // Votes and the (votes, position) minimum over evictable slots.
      std::vector<std::uint32_t> votes(n);
      for (auto& v : votes) v = rng() % 3;
      const auto before = votes;
      std::vector<std::uint32_t> want = votes;
      bool want_valid = true;
      std::uint64_t want_best = std::numeric_limits<std::uint64_t>::max();
      std::size_t want_slot = n;
      for (std::size_t s = 0; s < n; ++s) {
        const bool held = pos[s] != kFree;
        if (held && !valid_weight(w[s])) want_valid = false;
        if (held && w[s] >= threshold) ++want[s];
        const std::uint64_t key = (std::uint64_t{want[s]} << 32) | pos[s];
        if (held && pos[s] < protect && key < want_best) {
          want_best = key;
          want_slot = s;
        }
      }
      std::size_t slot = 0;
      bool valid = false;
      const std::uint64_t best =
          detail::bank_vote_and_find(votes.data(), pos.data(), w.data(), n, threshold, protect, slot, valid);
      ASSERT_EQ(votes, want);
      ASSERT_EQ(valid, want_valid);
      ASSERT_EQ(best, want_best);
      ASSERT_EQ(slot, want_slot);
      ASSERT_EQ(detail::bank_held_weights_valid(pos.data(), w.data(), n), want_valid);
      detail::bank_unvote(votes.data(), pos.data(), w.data(), n, threshold);
      ASSERT_EQ(votes, before);

      // The checked H2O pass into a second buffer: src never changes, dst is
      // src plus the held weights, and a bad held weight is reported.
      {
        std::vector<double> src(n);
        for (auto& x : src) x = static_cast<double>(rng() % 3) / 4.0;
        const auto src_before = src;
        std::vector<double> dst(n, -1.0);
        bool checked_valid = false;
        const std::size_t got_slot =
            detail::bank_add_and_find_checked(dst.data(), src.data(), pos.data(), w.data(), n, protect, checked_valid);
        ASSERT_TRUE(same_bits(src, src_before));
        ASSERT_EQ(checked_valid, want_valid);
        if (want_valid) {
          std::vector<double> sums = src;
          std::size_t low = n;
          for (std::size_t s = 0; s < n; ++s) {
            if (pos[s] == kFree) continue;
            sums[s] += static_cast<double>(w[s]);
            if (pos[s] < protect &&
                (low == n || sums[s] < sums[low] || (sums[s] == sums[low] && pos[s] < pos[low]))) {
              low = s;
            }
          }
          ASSERT_TRUE(same_bits(dst, sums));
          ASSERT_EQ(got_slot, low);
        }
      }
      if (!want_valid) continue;

      // TOVA's store pass: the row itself becomes the float32 records of the
      // held slots (0 for free ones, -0.0 kept as +0.0: the search compares
      // bits), and the victim is the lowest (ties: the lower position).
      {
        std::vector<float> records(n, -1.0F);
        bool store_valid = false;
        const std::size_t got = detail::bank_store_and_find_checked(records.data(), pos.data(), w.data(), n,
                                                                    store_valid);
        std::vector<float> want_records(n, 0.0F);
        std::size_t lowest = n;
        for (std::size_t s = 0; s < n; ++s) {
          if (pos[s] == kFree) continue;
          want_records[s] = w[s] + 0.0F;
          if (lowest == n || want_records[s] < want_records[lowest] ||
              (want_records[s] == want_records[lowest] && pos[s] < pos[lowest])) {
            lowest = s;
          }
        }
        ASSERT_TRUE(store_valid);
        ASSERT_TRUE(same_bits(records, want_records));
        ASSERT_EQ(got, lowest);
      }

      // Grouped-query aggregation, row by row in group order.
      const std::size_t group = 1 + rng() % 4;
      const std::size_t stride = n + rng() % 3;
      std::vector<float> rows(group * stride);
      for (float& x : rows) x = draw_weight(rng, threshold, false);
      for (const Aggregation how : {Aggregation::kSum, Aggregation::kMean, Aggregation::kMax}) {
        std::vector<float> expect(n);
        for (std::size_t s = 0; s < n; ++s) {
          float acc = rows[s];
          for (std::size_t g = 1; g < group; ++g) {
            const float r = rows[g * stride + s];
            acc = how == Aggregation::kMax ? (r > acc ? r : acc) : acc + r;
          }
          expect[s] = how == Aggregation::kMean ? acc / static_cast<float>(group) : acc;
        }
        std::vector<float> got(n, -1.0F);
        detail::bank_aggregate(rows.data(), stride, group, n, how, got.data());
        ASSERT_TRUE(same_bits(got, expect));
      }
    }
  }
}

TEST_F(SimdTarget, PolicyKernelsMatchThePlainLoopsOnEverySupportedTarget) {
  for (const auto& target : simd::supported_targets()) {
    simd::select_target(target);
    ASSERT_EQ(simd::active_target(), target);
    check_policy_kernels(target);
  }
}

TEST_F(SimdTarget, TovaAndSnapKVKernelsMatchThePlainLoopsOnEverySupportedTarget) {
  for (const auto& target : simd::supported_targets()) {
    simd::select_target(target);
    ASSERT_EQ(simd::active_target(), target);
    check_newer_policy_kernels(target);
  }
}

// KNorm's first maximum and KeyDiff's anchor against their plain loops:
// tie-heavy values (halves and quarters, zeros, repeats), every begin/end
// split around the vector widths, and channel counts on both sides of the
// anchor's four-vector block (4 x 8 doubles on AVX-512).
void check_key_kernels(const std::string& target) {
  std::mt19937 rng(11);
  for (const Case& c : cases(rng)) {
    std::vector<double> v(c.n);
    for (double& x : v) x = static_cast<double>(rng() % 5) * 0.25;
    std::size_t want = c.end;
    for (std::size_t i = c.begin; i < c.end; ++i) want = want == c.end || v[i] > v[want] ? i : want;
    ASSERT_EQ(detail::first_max(v.data(), c.begin, c.end), want) << target << " n=" << c.n << " [" << c.begin << ", " << c.end << ")";
  }
  for (std::size_t dim : {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128}) {
    for (std::size_t rows : {0, 1, 5, 40}) {
      std::vector<float> keys(rows * dim);
      for (float& k : keys) k = static_cast<float>(static_cast<int>(rng() % 7) - 3) * 0.5F;
      std::vector<double> divisors(rows);
      for (double& d : divisors) d = rng() % 4 == 0 ? 0.0 : std::sqrt(static_cast<double>(rng() % 50 + 1));
      // The plain loop: each channel's sum of k / ||k|| in row order.
      std::vector<double> want(dim);
      for (std::size_t k = 0; k < dim; ++k) want[k] = static_cast<double>(k) / 3.0;
      for (std::size_t r = 0; r < rows; ++r) {
        if (divisors[r] == 0.0) continue;
        for (std::size_t k = 0; k < dim; ++k) want[k] += static_cast<double>(keys[r * dim + k]) / divisors[r];
      }
      // The kernel, from the quotients divided beforehand (as KeyDiff stores them).
      std::vector<double> quotients(rows * dim);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t k = 0; k < dim; ++k) {
          quotients[r * dim + k] = divisors[r] == 0.0 ? 0.0 : static_cast<double>(keys[r * dim + k]) / divisors[r];
        }
      }
      std::vector<double> from_quotients(dim);
      for (std::size_t k = 0; k < dim; ++k) from_quotients[k] = static_cast<double>(k) / 3.0;
      detail::add_rows(quotients.data(), rows, dim, divisors.data(), from_quotients.data());
      ASSERT_TRUE(same_bits(from_quotients, want)) << target << " add_rows dim=" << dim << " rows=" << rows;
    }
  }
}

TEST_F(SimdTarget, KeyPolicyKernelsMatchThePlainLoopsOnEverySupportedTarget) {
  for (const auto& target : simd::supported_targets()) {
    simd::select_target(target);
    ASSERT_EQ(simd::active_target(), target);
    check_key_kernels(target);
  }
}

TEST_F(SimdTarget, BankKernelsMatchThePlainLoopsOnEverySupportedTarget) {
  for (const auto& target : simd::supported_targets()) {
    simd::select_target(target);
    ASSERT_EQ(simd::active_target(), target);
    check_bank_kernels(target);
  }
}

}  // namespace
}  // namespace kvevict
