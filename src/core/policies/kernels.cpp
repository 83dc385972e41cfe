// The hot loops of the attention-reading policies, written once with Google
// Highway and compiled for every x86-64 target (baseline, SSE4, AVX2,
// AVX-512); the CPU's best target is chosen at run time (see
// include/kvevict/core/simd.h). Each kernel computes exactly what the plain loop
// of the spec does -- element-wise adds and compares, and minima, which do
// not depend on the order lanes are combined in -- so every target chooses
// the same victims; the differential tests check that on every target the
// CPU supports.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "policies/kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "policies/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace kvevict::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::size_t kBlock = 64;
constexpr std::size_t kPrefetchAhead = 512;  // floats (2 KiB, 32 cache lines) ahead of the pass
constexpr float kMaxWeight = std::numeric_limits<float>::max();

// A decode step's row comes from memory and is too short for the hardware
// prefetcher to ramp up: the passes that read it first ask for the 64
// weights kPrefetchAhead past the ones at `at` (one cache line per 16).
// The first kPrefetchAhead weights, asked for before a pass starts.
HWY_INLINE void PrefetchStart(const float* w, std::size_t n) {
  const std::size_t stop = std::min(kPrefetchAhead, n);
  for (std::size_t at = 0; at < stop; at += 16) hwy::Prefetch(w + at);
}

HWY_INLINE void PrefetchAhead(const float* w, std::size_t at, std::size_t n) {
  const std::size_t stop = std::min(at + kPrefetchAhead + kBlock, n);
  for (std::size_t ahead = at + kPrefetchAhead; ahead < stop; ahead += 16) hwy::Prefetch(w + ahead);
}

// A weight is valid when it is >= 0 and <= FLT_MAX: false for NaN and both
// infinities.
HWY_INLINE bool ScalarValid(float x) { return x >= 0.0F && x <= kMaxWeight; }

// votes[i] += w[i] >= threshold over [from, to), folding validity into `ok`
// and, when `low` is given, the minimum of the updated votes into it.
template <class DF, class MF, class VU>
HWY_INLINE void VoteRange(DF df, std::uint32_t* HWY_RESTRICT votes, const float* HWY_RESTRICT w, std::size_t from,
                          std::size_t to, std::size_t row_end, float threshold, MF& ok, bool& scalar_ok, VU* low) {
  const hn::RebindToUnsigned<DF> du;
  const std::size_t N = hn::Lanes(df);
  const auto t = hn::Set(df, threshold);
  const auto zero = hn::Zero(df);
  const auto top = hn::Set(df, kMaxWeight);
  std::size_t i = from;
  for (; i + N <= to; i += N) {
    if (i % kBlock == 0) PrefetchAhead(w, i, row_end);
    const auto x = hn::LoadU(df, w + i);
    ok = hn::And(ok, hn::And(x >= zero, x <= top));
    // A true lane is all ones, i.e. -1: subtracting it adds the vote.
    const auto v = hn::Sub(hn::LoadU(du, votes + i), hn::VecFromMask(du, hn::RebindMask(du, x >= t)));
    hn::StoreU(v, du, votes + i);
    if (low != nullptr) *low = hn::Min(*low, v);
  }
  for (; i < to; ++i) {
    scalar_ok = scalar_ok && ScalarValid(w[i]);
    votes[i] += w[i] >= threshold ? 1U : 0U;
    if (low != nullptr) *low = hn::Min(*low, hn::Set(du, votes[i]));
  }
}

VotePass CountVotesChecked(std::uint32_t* HWY_RESTRICT votes, const float* HWY_RESTRICT w, std::size_t n,
                           float threshold, std::size_t begin, std::size_t end) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  end = std::min(end, n);
  begin = std::min(begin, end);
  PrefetchStart(w, n);
  auto ok = hn::FirstN(df, hn::Lanes(df));
  bool scalar_ok = true;
  std::uint32_t low = std::numeric_limits<std::uint32_t>::max();
  std::size_t low_block = 0;
  using VU = hn::Vec<decltype(du)>;
  VoteRange<decltype(df), decltype(ok), VU>(df, votes, w, 0, begin, n, threshold, ok, scalar_ok, nullptr);
  // The searched range goes in blocks of 64, remembering the first block that
  // lowered the minimum: the eviction then scans from there.
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t stop = std::min(b + kBlock, end);
    auto block_low = hn::Set(du, std::numeric_limits<std::uint32_t>::max());
    VoteRange(df, votes, w, b, stop, n, threshold, ok, scalar_ok, &block_low);
    const std::uint32_t m = hn::GetLane(hn::MinOfLanes(du, block_low));
    if (m < low) {
      low = m;
      low_block = b;
    }
  }
  VoteRange<decltype(df), decltype(ok), VU>(df, votes, w, end, n, n, threshold, ok, scalar_ok, nullptr);
  return {scalar_ok && hn::AllTrue(df, ok), low, low_block};
}

void UncountVotes(std::uint32_t* HWY_RESTRICT votes, const float* HWY_RESTRICT w, std::size_t n, float threshold) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto t = hn::Set(df, threshold);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(df, w + i);
    hn::StoreU(hn::Add(hn::LoadU(du, votes + i), hn::VecFromMask(du, hn::RebindMask(du, x >= t))), du, votes + i);
  }
  for (; i < n; ++i) votes[i] -= w[i] >= threshold ? 1U : 0U;
}

// scores[i] += (double)w[i] over [from, to) (each sum exact in its order: one
// add per element), folding the minimum of the updated scores into `low`.
template <class DD, class VD>
HWY_INLINE void AddRange(DD dd, double* HWY_RESTRICT scores, const float* HWY_RESTRICT w, std::size_t from,
                         std::size_t to, VD* low) {
  const hn::Rebind<float, DD> df;  // as many floats as doubles
  const std::size_t N = hn::Lanes(dd);
  std::size_t i = from;
  for (; i + N <= to; i += N) {
    const auto sc = hn::Add(hn::LoadU(dd, scores + i), hn::PromoteTo(dd, hn::LoadU(df, w + i)));
    hn::StoreU(sc, dd, scores + i);
    if (low != nullptr) *low = hn::Min(*low, sc);
  }
  for (; i < to; ++i) {
    scores[i] += static_cast<double>(w[i]);
    if (low != nullptr) *low = hn::Min(*low, hn::Set(dd, scores[i]));
  }
}

ScorePass AddWeightsMin(double* HWY_RESTRICT scores, const float* HWY_RESTRICT w, std::size_t n, std::size_t begin,
                        std::size_t end) {
  const hn::ScalableTag<double> dd;
  using VD = hn::Vec<decltype(dd)>;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  end = std::min(end, n);
  begin = std::min(begin, end);
  double low = kInf;
  std::size_t low_block = 0;
  AddRange<decltype(dd), VD>(dd, scores, w, 0, begin, nullptr);
  // Scores are sums of valid weights: never NaN, so the vector minimum is
  // exactly the scalar one whatever order the lanes combine in.
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t stop = std::min(b + kBlock, end);
    auto block_low = hn::Set(dd, kInf);
    AddRange(dd, scores, w, b, stop, &block_low);
    const double m = hn::GetLane(hn::MinOfLanes(dd, block_low));
    if (m < low) {
      low = m;
      low_block = b;
    }
  }
  AddRange<decltype(dd), VD>(dd, scores, w, end, n, nullptr);
  return {low, low_block};
}

// TOVA's step in one pass over the row: dst[i] = w[i] for i < n, checking
// every weight and finding their minimum (first 64-slot block holding it),
// then dst[i] = src[i + (i >= hole)] for i in [n, kept): the records the row
// does not cover, read past the slot the last eviction left (hole >= kept:
// none). On an invalid weight dst is garbage and the caller keeps src.
ObserveResult TovaObserve(float* HWY_RESTRICT dst, const float* HWY_RESTRICT src, const float* HWY_RESTRICT w,
                        std::size_t n, std::size_t kept, std::size_t hole) {
  const hn::ScalableTag<float> df;
  const std::size_t N = hn::Lanes(df);
  const auto zero = hn::Zero(df);
  const auto top = hn::Set(df, kMaxWeight);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  PrefetchStart(w, n);
  auto ok = hn::FirstN(df, N);
  bool scalar_ok = true;
  float low = kInf;
  std::size_t low_block = 0;
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t stop = std::min(b + kBlock, n);
    PrefetchAhead(w, b, n);
    auto block_low = hn::Set(df, kInf);
    std::size_t i = b;
    for (; i + N <= stop; i += N) {
      const auto x = hn::LoadU(df, w + i);
      ok = hn::And(ok, hn::And(x >= zero, x <= top));
      hn::StoreU(x, df, dst + i);
      block_low = hn::Min(block_low, x);
    }
    for (; i < stop; ++i) {
      scalar_ok = scalar_ok && ScalarValid(w[i]);
      dst[i] = w[i];
      block_low = hn::Min(block_low, hn::Set(df, w[i]));
    }
    const float m = hn::GetLane(hn::MinOfLanes(df, block_low));
    if (m < low) {
      low = m;
      low_block = b;
    }
  }
  const bool valid = scalar_ok && hn::AllTrue(df, ok);
  if (valid) {
    for (std::size_t i = n; i < kept; ++i) dst[i] = src[i < hole ? i : i + 1];
  }
  return {valid, low, low_block};
}

// The smallest lane, read lane by lane: MinOfLanes on some targets folds
// from the largest finite value, so a vector of +infinity would come back as
// DBL_MAX.
template <class D, class V>
HWY_INLINE double SmallestLane(D d, V v) {
  double lanes[16];  // Lanes <= 8 for double on every x86 target
  hn::StoreU(v, d, lanes);
  double low = lanes[0];
  for (std::size_t i = 1; i < hn::Lanes(d); ++i) low = std::min(low, lanes[i]);
  return low;
}

// SnapKV's running sums (the fast path, snapkv.cpp) over one run of slots:
// for each k < n, run[k] = (run[k] + (double)w[k]) - (double)cells[k], then
// cells[k] = w[k]; folds the largest w[k] into `top` and the smallest
// nonzero one into `least`. Two roundings a slot, the same on every target
// (lanes are independent; minima and maxima are order-free).
HWY_INLINE void SnapObserveRun(float* HWY_RESTRICT cells, double* HWY_RESTRICT run, const float* HWY_RESTRICT w,
                               std::size_t n, double& top, double& least) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const std::size_t N = hn::Lanes(dd);
  const auto zero = hn::Zero(dd);
  const auto none = hn::Set(dd, std::numeric_limits<double>::infinity());
  auto high = zero;
  auto low = none;
  std::size_t k = 0;
  for (; k + N <= n; k += N) {
    const auto fresh = hn::LoadU(df, w + k);
    const auto wide = hn::PromoteTo(dd, fresh);
    const auto old = hn::PromoteTo(dd, hn::LoadU(df, cells + k));
    hn::StoreU(hn::Sub(hn::Add(hn::LoadU(dd, run + k), wide), old), dd, run + k);
    hn::StoreU(fresh, df, cells + k);
    high = hn::Max(high, wide);
    low = hn::Min(low, hn::IfThenElse(wide > zero, wide, none));
  }
  top = std::max(top, hn::GetLane(hn::MaxOfLanes(dd, high)));
  least = std::min(least, SmallestLane(dd, low));
  for (; k < n; ++k) {
    const double wide = static_cast<double>(w[k]);
    run[k] = (run[k] + wide) - static_cast<double>(cells[k]);
    cells[k] = w[k];
    top = std::max(top, wide);
    if (wide > 0.0) least = std::min(least, wide);
  }
}

// SnapObserveRun over held slots [0, n): slot i's cell is row[ring], its
// ring the i-th one not among `holes` (ascending), its running sum run[i].
SnapExtremes SnapObserve(float* HWY_RESTRICT row, double* HWY_RESTRICT run, const float* HWY_RESTRICT w, std::size_t n,
                         const std::uint32_t* HWY_RESTRICT holes, std::size_t hole_count) {
  double top = 0.0;
  double least = std::numeric_limits<double>::infinity();
  std::size_t slot = 0;
  std::size_t ring = 0;
  for (std::size_t h = 0; h < hole_count && slot < n; ++h) {
    const std::size_t len = std::min<std::size_t>(holes[h] - ring, n - slot);
    SnapObserveRun(row + ring, run + slot, w + slot, len, top, least);
    slot += holes[h] - ring;
    ring = std::size_t{holes[h]} + 1;
  }
  if (slot < n) SnapObserveRun(row + ring, run + slot, w + slot, n - slot, top, least);
  // (least is +infinity or one of the float weights, so converting it is exact.)
  return {static_cast<float>(top), static_cast<float>(least)};
}

// SnapKV's window sums: out[i] = sum over c = 0 ... rows-1, in that order, of
// (double)ring[c * stride + i], from 0.0 -- the spec's ring-order float64 sum,
// each lane adding its own slot's cells in the same order; returns the
// largest cell it read (0 when none).
float RingSumsMax(const float* HWY_RESTRICT ring, std::size_t rows, std::size_t stride, std::size_t n,
                  double* HWY_RESTRICT out) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const std::size_t N = hn::Lanes(dd);
  auto high = hn::Zero(dd);
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    auto a = hn::Zero(dd);
    auto b = hn::Zero(dd);
    for (std::size_t c = 0; c < rows; ++c) {
      const float* row = ring + c * stride + i;
      const auto x = hn::PromoteTo(dd, hn::LoadU(df, row));
      const auto y = hn::PromoteTo(dd, hn::LoadU(df, row + N));
      a = hn::Add(a, x);
      b = hn::Add(b, y);
      high = hn::Max(high, hn::Max(x, y));
    }
    hn::StoreU(a, dd, out + i);
    hn::StoreU(b, dd, out + i + N);
  }
  double top = hn::GetLane(hn::MaxOfLanes(dd, high));
  for (; i < n; ++i) {
    double sum = 0.0;
    for (std::size_t c = 0; c < rows; ++c) {
      const double x = static_cast<double>(ring[c * stride + i]);
      sum += x;
      top = std::max(top, x);
    }
    out[i] = sum;
  }
  return static_cast<float>(top);
}

// How many of v[begin, end) are <= t, and the first of them (end if none):
// the lanes count without a branch (a true lane is all ones, -1 as an
// integer), then the first is found by a scan that stops at it.
AtMost CountAtMost(const double* HWY_RESTRICT v, std::size_t begin, std::size_t end, double t) {
  const hn::ScalableTag<double> dd;
  const hn::RebindToSigned<decltype(dd)> di;
  const std::size_t N = hn::Lanes(dd);
  const auto limit = hn::Set(dd, t);
  auto counts0 = hn::Zero(di);
  auto counts1 = hn::Zero(di);
  std::size_t i = begin;
  for (; i + 2 * N <= end; i += 2 * N) {
    counts0 = hn::Sub(counts0, hn::BitCast(di, hn::VecFromMask(dd, hn::LoadU(dd, v + i) <= limit)));
    counts1 = hn::Sub(counts1, hn::BitCast(di, hn::VecFromMask(dd, hn::LoadU(dd, v + i + N) <= limit)));
  }
  auto count = static_cast<std::size_t>(hn::GetLane(hn::SumOfLanes(di, hn::Add(counts0, counts1))));
  for (; i < end; ++i) count += v[i] <= t ? 1 : 0;
  AtMost result{count, end};
  if (count == 0) return result;
  i = begin;
  for (; i + N <= end; i += N) {
    const auto hit = hn::LoadU(dd, v + i) <= limit;
    if (!hn::AllFalse(dd, hit)) {
      result.first = i + hn::FindKnownFirstTrue(dd, hit);
      return result;
    }
  }
  for (; i < end && v[i] > t; ++i) {
  }
  result.first = i;
  return result;
}

// words[w] &= words shifted down by `shift` bits (0 < shift < 64): afterwards
// bit k is the AND of bits k and k + shift; bits past the array read as 1.
HWY_INLINE void AndShifted(std::uint64_t* HWY_RESTRICT words, std::size_t count, std::size_t shift) {
  for (std::size_t w = 0; w < count; ++w) {
    const std::uint64_t next = w + 1 < count ? words[w + 1] : ~std::uint64_t{0};
    words[w] &= (words[w] >> shift) | (next << (64 - shift));
  }
}

// SnapKV's screened pooling: every i in [0, end) whose pooled score (the
// maximum of v over [i - r, i + r] clipped to [0, n)) is <= limit,
// ascending, written with that score while there is room; returns how many
// there are, or room + 1 when there are more. A window qualifies only when
// every value in it is <= limit: one compare a value (bit k of `bits`), then
// the windows' ANDs by doubling shifts of the bit array, so only the few
// qualifying windows are pooled. r <= 31; `bits` holds n / 64 + 2 words.
std::size_t ScreenPool(const double* HWY_RESTRICT v, std::size_t n, std::size_t r, std::size_t end, double limit,
                       std::uint32_t* HWY_RESTRICT index, double* HWY_RESTRICT score, std::size_t room,
                       std::uint64_t* HWY_RESTRICT bits) {
  const hn::ScalableTag<double> dd;
  const std::size_t N = hn::Lanes(dd);
  const auto top = hn::Set(dd, limit);
  const std::size_t words = n / 64 + 2;
  // Bit k: v[k] <= limit; bits past n are 1 (the clipped windows ignore them).
  std::uint64_t word = 0;
  std::size_t bit = 0;
  std::size_t w = 0;
  std::size_t k = 0;
  uint8_t lanes[8] = {};
  // Whole words first: 64 / N independent compares, each OR-ed in at its
  // own offset (N <= 8 lanes divide 64).
  for (; k + 64 <= n; k += 64) {
    std::uint64_t whole = 0;
    for (std::size_t j = 0; j < 64; j += N) {
      hn::StoreMaskBits(dd, hn::LoadU(dd, v + k + j) <= top, lanes);
      whole |= std::uint64_t{lanes[0]} << j;
    }
    bits[w++] = whole;
  }
  // The last partial word (under 64 values) one by one.
  for (; k < n; ++k) word |= std::uint64_t{v[k] <= limit} << bit++;
  if (bit > 0) bits[w++] = word | (~std::uint64_t{0} << bit);
  for (; w < words; ++w) bits[w] = ~std::uint64_t{0};
  // Bit k becomes the AND over [k, k + 2r]: windows of 1, 2, 4, ... then the rest.
  const std::size_t width = 2 * r + 1;
  std::size_t covered = 1;
  for (; 2 * covered <= width; covered *= 2) AndShifted(bits, words, covered);
  if (covered < width) AndShifted(bits, words, width - covered);

  std::size_t found = 0;
  const auto emit = [&](std::size_t i, double pooled) {
    if (found < room) {
      index[found] = static_cast<std::uint32_t>(i);
      score[found] = pooled;
    }
    ++found;
  };
  // The first r windows are clipped on the left: checked one by one.
  double prefix = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < std::min(r, n); ++j) prefix = std::max(prefix, v[j]);
  for (std::size_t i = 0; i < std::min(r, end); ++i) {
    if (i + r < n) prefix = std::max(prefix, v[i + r]);
    if (prefix <= limit) emit(i, prefix);
  }
  // Window i >= r starts at i - r: bit i - r.
  for (std::size_t at = 0; at < words && at * 64 + r < end && found <= room; ++at) {
    std::uint64_t set = bits[at];
    while (set != 0) {
      const std::size_t i = at * 64 + static_cast<std::size_t>(__builtin_ctzll(set)) + r;
      set &= set - 1;
      if (i >= end) break;
      const std::size_t hi = std::min(n - 1, i + r);
      double pooled = v[i - r];
      for (std::size_t j = i - r + 1; j <= hi; ++j) pooled = std::max(pooled, v[j]);
      emit(i, pooled);
      if (found > room) break;
    }
  }
  return std::min(found, room + 1);
}

// SnapKV's pooling: out[i] = max of v[j] for j in [i - r, i + r] clipped to
// [0, n). A maximum of non-NaN values does not depend on the order it is
// taken in, so the vector body is exact.
HWY_INLINE void PoolOne(const double* HWY_RESTRICT v, std::size_t n, std::size_t r, std::size_t i,
                        double* HWY_RESTRICT out) {
  const std::size_t lo = i >= r ? i - r : 0;
  const std::size_t hi = std::min(n - 1, i + r);
  double best = v[lo];
  for (std::size_t j = lo + 1; j <= hi; ++j) best = std::max(best, v[j]);
  out[i] = best;
}

// PoolMax's loops; with kMin, also the minimum of out[0, end) (+infinity
// when empty), taken as each output is stored.
template <bool kMin>
HWY_INLINE double PoolMaxImpl(const double* HWY_RESTRICT v, std::size_t n, std::size_t r, double* HWY_RESTRICT out,
                              std::size_t end) {
  const hn::ScalableTag<double> dd;
  const std::size_t N = hn::Lanes(dd);
  double low = std::numeric_limits<double>::infinity();
  if (n == 0) return low;
  auto lows = hn::Set(dd, low);
  // Folds out[from, from + N) into the minimum: only the lanes below `end`.
  const auto fold = [&](std::size_t from, decltype(lows) m) {
    if constexpr (kMin) {
      if (from + N <= end) {
        lows = hn::Min(lows, m);
      } else if (from < end) {
        lows = hn::Min(lows, hn::IfThenElse(hn::FirstN(dd, end - from), m, hn::Set(dd, low)));
      }
    }
  };
  const auto fold_one = [&](std::size_t at) {
    if constexpr (kMin) {
      if (at < end) low = std::min(low, out[at]);
    }
  };
  std::size_t i = 0;
  if (r == 0) {
    for (; i + N <= n; i += N) {
      const auto m = hn::LoadU(dd, v + i);
      hn::StoreU(m, dd, out + i);
      fold(i, m);
    }
    for (; i < n; ++i) {
      out[i] = v[i];
      fold_one(i);
    }
  } else {
    for (; i < std::min(r, n); ++i) {
      PoolOne(v, n, r, i, out);
      fold_one(i);
    }
    // Body: every window lies inside [0, n). Four output vectors at a time,
    // so four independent chains of maxima hide each one's latency.
    for (; i + 4 * N + r <= n; i += 4 * N) {
      const double* at = v + i - r;
      auto m0 = hn::LoadU(dd, at);
      auto m1 = hn::LoadU(dd, at + N);
      auto m2 = hn::LoadU(dd, at + 2 * N);
      auto m3 = hn::LoadU(dd, at + 3 * N);
      for (std::size_t k = 1; k <= 2 * r; ++k) {
        m0 = hn::Max(m0, hn::LoadU(dd, at + k));
        m1 = hn::Max(m1, hn::LoadU(dd, at + k + N));
        m2 = hn::Max(m2, hn::LoadU(dd, at + k + 2 * N));
        m3 = hn::Max(m3, hn::LoadU(dd, at + k + 3 * N));
      }
      hn::StoreU(m0, dd, out + i);
      hn::StoreU(m1, dd, out + i + N);
      hn::StoreU(m2, dd, out + i + 2 * N);
      hn::StoreU(m3, dd, out + i + 3 * N);
      fold(i, m0);
      fold(i + N, m1);
      fold(i + 2 * N, m2);
      fold(i + 3 * N, m3);
    }
    for (; i + N + r <= n; i += N) {
      auto m = hn::LoadU(dd, v + i - r);
      for (std::size_t k = 1; k <= 2 * r; ++k) m = hn::Max(m, hn::LoadU(dd, v + i - r + k));
      hn::StoreU(m, dd, out + i);
      fold(i, m);
    }
    for (; i < n; ++i) {
      PoolOne(v, n, r, i, out);
      fold_one(i);
    }
  }
  if constexpr (kMin) low = std::min(low, SmallestLane(dd, lows));
  return low;
}

void PoolMax(const double* HWY_RESTRICT v, std::size_t n, std::size_t r, double* HWY_RESTRICT out) {
  PoolMaxImpl<false>(v, n, r, out, 0);
}

double PoolMaxMin(const double* HWY_RESTRICT v, std::size_t n, std::size_t r, double* HWY_RESTRICT out,
                  std::size_t end) {
  return PoolMaxImpl<true>(v, n, r, out, end);
}

bool WeightsValid(const float* HWY_RESTRICT w, std::size_t n) {
  const hn::ScalableTag<float> df;
  const std::size_t N = hn::Lanes(df);
  const auto zero = hn::Zero(df);
  const auto top = hn::Set(df, kMaxWeight);
  auto ok = hn::FirstN(df, N);
  PrefetchStart(w, n);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    if (i % kBlock == 0) PrefetchAhead(w, i, n);
    const auto x = hn::LoadU(df, w + i);
    ok = hn::And(ok, hn::And(x >= zero, x <= top));
  }
  bool scalar_ok = true;
  for (; i < n; ++i) scalar_ok = scalar_ok && ScalarValid(w[i]);
  return scalar_ok && hn::AllTrue(df, ok);
}

// The first v[i] == value in [begin, end), `end` if none: four vectors are
// tested with one OR, then the one that holds it names the lane.
template <class D, typename T>
HWY_INLINE std::size_t FindFirstImpl(D d, const T* HWY_RESTRICT v, std::size_t begin, std::size_t end, T value) {
  const std::size_t N = hn::Lanes(d);
  const auto x = hn::Set(d, value);
  std::size_t i = begin;
  for (; i + 4 * N <= end; i += 4 * N) {
    const auto m0 = hn::Eq(hn::LoadU(d, v + i), x);
    const auto m1 = hn::Eq(hn::LoadU(d, v + i + N), x);
    const auto m2 = hn::Eq(hn::LoadU(d, v + i + 2 * N), x);
    const auto m3 = hn::Eq(hn::LoadU(d, v + i + 3 * N), x);
    if (!hn::AllFalse(d, hn::Or(hn::Or(m0, m1), hn::Or(m2, m3)))) break;
  }
  for (; i + N <= end; i += N) {
    const intptr_t lane = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, v + i), x));
    if (lane >= 0) return i + static_cast<std::size_t>(lane);
  }
  for (; i < end; ++i) {
    if (v[i] == value) return i;
  }
  return end;
}

// The first minimum: the minimum (order-free), then its first occurrence.
template <class D, typename T>
HWY_INLINE std::size_t FirstMinImpl(D d, const T* HWY_RESTRICT v, std::size_t begin, std::size_t end) {
  if (begin >= end) return end;
  const std::size_t N = hn::Lanes(d);
  auto low = hn::Set(d, v[begin]);
  std::size_t i = begin;
  for (; i + N <= end; i += N) low = hn::Min(low, hn::LoadU(d, v + i));
  T m = hn::GetLane(hn::MinOfLanes(d, low));
  for (; i < end; ++i) m = v[i] < m ? v[i] : m;
  return FindFirstImpl(d, v, begin, end, m);
}

// The first maximum: the maximum (order-free without NaN), then its first
// occurrence.
std::size_t FirstMaxF64(const double* HWY_RESTRICT v, std::size_t begin, std::size_t end) {
  if (begin >= end) return end;
  const hn::ScalableTag<double> d;
  const std::size_t N = hn::Lanes(d);
  auto high = hn::Set(d, v[begin]);
  std::size_t i = begin;
  for (; i + 2 * N <= end; i += 2 * N) high = hn::Max(high, hn::Max(hn::LoadU(d, v + i), hn::LoadU(d, v + i + N)));
  for (; i + N <= end; i += N) high = hn::Max(high, hn::LoadU(d, v + i));
  double m = hn::GetLane(hn::MaxOfLanes(d, high));
  for (; i < end; ++i) m = v[i] > m ? v[i] : m;
  return FindFirstImpl(d, v, begin, end, m);
}

// KeyDiff's anchor, lanes across channels: four vectors of channels stay in
// registers while every row is added to them in row order, so each lane is
// its channel's plain sum.
void AddRows(const double* HWY_RESTRICT values, std::size_t rows, std::size_t dim, const double* HWY_RESTRICT skip,
             double* HWY_RESTRICT sums) {
  const hn::ScalableTag<double> dd;
  const std::size_t N = hn::Lanes(dd);
  std::size_t c = 0;
  for (; c + 4 * N <= dim; c += 4 * N) {
    auto s0 = hn::LoadU(dd, sums + c);
    auto s1 = hn::LoadU(dd, sums + c + N);
    auto s2 = hn::LoadU(dd, sums + c + 2 * N);
    auto s3 = hn::LoadU(dd, sums + c + 3 * N);
    for (std::size_t r = 0; r < rows; ++r) {
      if (skip[r] == 0.0) continue;
      const double* row = values + r * dim + c;
      s0 = hn::Add(s0, hn::LoadU(dd, row));
      s1 = hn::Add(s1, hn::LoadU(dd, row + N));
      s2 = hn::Add(s2, hn::LoadU(dd, row + 2 * N));
      s3 = hn::Add(s3, hn::LoadU(dd, row + 3 * N));
    }
    hn::StoreU(s0, dd, sums + c);
    hn::StoreU(s1, dd, sums + c + N);
    hn::StoreU(s2, dd, sums + c + 2 * N);
    hn::StoreU(s3, dd, sums + c + 3 * N);
  }
  for (; c + N <= dim; c += N) {
    auto s0 = hn::LoadU(dd, sums + c);
    for (std::size_t r = 0; r < rows; ++r) {
      if (skip[r] != 0.0) s0 = hn::Add(s0, hn::LoadU(dd, values + r * dim + c));
    }
    hn::StoreU(s0, dd, sums + c);
  }
  for (; c < dim; ++c) {
    double sum = sums[c];
    for (std::size_t r = 0; r < rows; ++r) {
      if (skip[r] != 0.0) sum += values[r * dim + c];
    }
    sums[c] = sum;
  }
}

std::size_t FindFirstU32(const std::uint32_t* HWY_RESTRICT v, std::size_t begin, std::size_t end,
                         std::uint32_t value) {
  return FindFirstImpl(hn::ScalableTag<std::uint32_t>(), v, begin, end, value);
}
std::size_t FindFirstF64(const double* HWY_RESTRICT v, std::size_t begin, std::size_t end, double value) {
  return FindFirstImpl(hn::ScalableTag<double>(), v, begin, end, value);
}
std::size_t FindFirstF32(const float* HWY_RESTRICT v, std::size_t begin, std::size_t end, float value) {
  return FindFirstImpl(hn::ScalableTag<float>(), v, begin, end, value);
}
std::size_t FirstMinU32(const std::uint32_t* HWY_RESTRICT v, std::size_t begin, std::size_t end) {
  return FirstMinImpl(hn::ScalableTag<std::uint32_t>(), v, begin, end);
}
std::size_t FirstMinF64(const double* HWY_RESTRICT v, std::size_t begin, std::size_t end) {
  return FirstMinImpl(hn::ScalableTag<double>(), v, begin, end);
}

}  // namespace kvevict::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

namespace kvevict::detail {

HWY_EXPORT(CountVotesChecked);
HWY_EXPORT(UncountVotes);
HWY_EXPORT(AddWeightsMin);
HWY_EXPORT(WeightsValid);
HWY_EXPORT(TovaObserve);
HWY_EXPORT(FindFirstF32);
HWY_EXPORT(PoolMax);
HWY_EXPORT(PoolMaxMin);
HWY_EXPORT(ScreenPool);
HWY_EXPORT(SnapObserve);
HWY_EXPORT(RingSumsMax);
HWY_EXPORT(CountAtMost);
HWY_EXPORT(FindFirstU32);
HWY_EXPORT(FindFirstF64);
HWY_EXPORT(FirstMinU32);
HWY_EXPORT(FirstMinF64);
HWY_EXPORT(FirstMaxF64);
HWY_EXPORT(AddRows);

float vote_threshold(double share) noexcept {
  float t = static_cast<float>(share);
  if (static_cast<double>(t) <= share) {
    t = std::nextafter(t, std::numeric_limits<float>::infinity());
  } else {
    while (static_cast<double>(std::nextafter(t, -std::numeric_limits<float>::infinity())) > share) {
      t = std::nextafter(t, -std::numeric_limits<float>::infinity());
    }
  }
  return t;
}

VotePass count_votes_checked(std::uint32_t* votes, const float* w, std::size_t n, float threshold,
                             std::size_t begin, std::size_t end) noexcept {
  return HWY_DYNAMIC_DISPATCH(CountVotesChecked)(votes, w, n, threshold, begin, end);
}

void uncount_votes(std::uint32_t* votes, const float* w, std::size_t n, float threshold) noexcept {
  HWY_DYNAMIC_DISPATCH(UncountVotes)(votes, w, n, threshold);
}

ScorePass add_weights_min(double* scores, const float* w, std::size_t n, std::size_t begin,
                          std::size_t end) noexcept {
  return HWY_DYNAMIC_DISPATCH(AddWeightsMin)(scores, w, n, begin, end);
}

bool weights_valid(const float* w, std::size_t n) noexcept { return HWY_DYNAMIC_DISPATCH(WeightsValid)(w, n); }

ObserveResult tova_observe(float* dst, const float* src, const float* w, std::size_t n, std::size_t kept,
                           std::size_t hole) noexcept {
  return HWY_DYNAMIC_DISPATCH(TovaObserve)(dst, src, w, n, kept, hole);
}

std::size_t find_first(const float* v, std::size_t begin, std::size_t end, float value) noexcept {
  return HWY_DYNAMIC_DISPATCH(FindFirstF32)(v, begin, end, value);
}

void pool_max(const double* v, std::size_t n, std::size_t radius, double* out) noexcept {
  HWY_DYNAMIC_DISPATCH(PoolMax)(v, n, radius, out);
}

SnapExtremes snap_observe(float* row, double* run, const float* w, std::size_t n, const std::uint32_t* holes,
                          std::size_t hole_count) noexcept {
  return HWY_DYNAMIC_DISPATCH(SnapObserve)(row, run, w, n, holes, hole_count);
}

float ring_sums_max(const float* ring, std::size_t rows, std::size_t stride, std::size_t n, double* out) noexcept {
  return HWY_DYNAMIC_DISPATCH(RingSumsMax)(ring, rows, stride, n, out);
}

double pool_max_min(const double* v, std::size_t n, std::size_t radius, double* out, std::size_t end) noexcept {
  return HWY_DYNAMIC_DISPATCH(PoolMaxMin)(v, n, radius, out, end);
}

std::size_t screen_pool(const double* v, std::size_t n, std::size_t radius, std::size_t end, double limit,
                        std::uint32_t* index, double* score, std::size_t room, std::uint64_t* bits) noexcept {
  return HWY_DYNAMIC_DISPATCH(ScreenPool)(v, n, radius, end, limit, index, score, room, bits);
}

AtMost count_at_most(const double* v, std::size_t begin, std::size_t end, double t) noexcept {
  return HWY_DYNAMIC_DISPATCH(CountAtMost)(v, begin, end, t);
}

std::size_t find_first(const std::uint32_t* v, std::size_t begin, std::size_t end, std::uint32_t value) noexcept {
  return HWY_DYNAMIC_DISPATCH(FindFirstU32)(v, begin, end, value);
}

std::size_t find_first(const double* v, std::size_t begin, std::size_t end, double value) noexcept {
  return HWY_DYNAMIC_DISPATCH(FindFirstF64)(v, begin, end, value);
}

std::size_t first_min(const std::uint32_t* v, std::size_t begin, std::size_t end) noexcept {
  return HWY_DYNAMIC_DISPATCH(FirstMinU32)(v, begin, end);
}

std::size_t first_min(const double* v, std::size_t begin, std::size_t end) noexcept {
  return HWY_DYNAMIC_DISPATCH(FirstMinF64)(v, begin, end);
}

std::size_t first_max(const double* v, std::size_t begin, std::size_t end) noexcept {
  return HWY_DYNAMIC_DISPATCH(FirstMaxF64)(v, begin, end);
}

void add_rows(const double* values, std::size_t rows, std::size_t dim, const double* skip, double* sums) noexcept {
  HWY_DYNAMIC_DISPATCH(AddRows)(values, rows, dim, skip, sums);
}

}  // namespace kvevict::detail
#endif  // HWY_ONCE
