// The bank's per-instance passes, written once with Google Highway and
// dispatched to the CPU's best target (include/kvevict/core/simd.h). Every lane
// does exactly the scalar loop's work on its slot, and the victim is a
// minimum over unique keys, so every target finds the same victim.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bank_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "bank_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace kvevict::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::uint32_t kFreeSlot = PolicyBank::kFree;
constexpr std::uint32_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
constexpr float kMaxWeight = std::numeric_limits<float>::max();
// Upper bound on lanes of any target (AVX-512: 16 floats), for lane dumps.
constexpr std::size_t kMaxLanes = 64;

HWY_INLINE bool ScalarValid(float x) { return x >= 0.0F && x <= kMaxWeight; }

// The smallest 64-bit key hi << 32 | lo over the lanes, and the slot its lane
// recorded: keys are unique (positions are), so it names one slot. n and
// UINT64_MAX when every lane still holds the all-ones "none".
template <class DU, class V>
HWY_INLINE std::uint64_t LowestLane(DU du, V hi, V lo, V slots, std::size_t n, std::size_t* slot_out) {
  HWY_ALIGN std::uint32_t h[kMaxLanes];
  HWY_ALIGN std::uint32_t l[kMaxLanes];
  HWY_ALIGN std::uint32_t sl[kMaxLanes];
  hn::Store(hi, du, h);
  hn::Store(lo, du, l);
  hn::Store(slots, du, sl);
  std::uint64_t best = kNone;
  std::size_t slot = n;
  for (std::size_t k = 0; k < hn::Lanes(du); ++k) {
    const std::uint64_t key = (std::uint64_t{h[k]} << 32) | l[k];
    if (key < best) {
      best = key;
      slot = sl[k];
    }
  }
  *slot_out = slot;
  return best;
}

void Aggregate(const float* HWY_RESTRICT rows, std::size_t stride, std::size_t group, std::size_t n,
               Aggregation how, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const std::size_t N = hn::Lanes(df);
  const auto g = hn::Set(df, static_cast<float>(group));
  // Slot by slot, the rows in group order: each lane does the scalar loop's
  // operations in the scalar loop's order.
  std::size_t s = 0;
  for (; s + N <= n; s += N) {
    auto acc = hn::LoadU(df, rows + s);
    for (std::size_t k = 1; k < group; ++k) {
      const auto r = hn::LoadU(df, rows + k * stride + s);
      acc = how == Aggregation::kMax ? hn::IfThenElse(r > acc, r, acc) : hn::Add(acc, r);
    }
    if (how == Aggregation::kMean) acc = hn::Div(acc, g);
    hn::StoreU(acc, df, out + s);
  }
  for (; s < n; ++s) {
    float acc = rows[s];
    for (std::size_t k = 1; k < group; ++k) {
      const float r = rows[k * stride + s];
      acc = how == Aggregation::kMax ? (r > acc ? r : acc) : acc + r;
    }
    if (how == Aggregation::kMean) acc /= static_cast<float>(group);
    out[s] = acc;
  }
}

std::uint64_t VoteAndFind(std::uint32_t* HWY_RESTRICT votes, const std::uint32_t* HWY_RESTRICT pos,
                          const float* HWY_RESTRICT w, std::size_t n, float threshold, std::uint32_t protect_from,
                          std::size_t* HWY_RESTRICT slot_out, bool* HWY_RESTRICT valid_out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto free_v = hn::Set(du, kFreeSlot);
  const auto protect = hn::Set(du, protect_from);
  const auto t = hn::Set(df, threshold);
  const auto zero = hn::Zero(df);
  const auto top = hn::Set(df, kMaxWeight);
  const auto none = hn::Set(du, kMaxU32);
  // Per lane, the smallest (votes, position) pair seen -- the 64-bit key
  // votes << 32 | position compared as two 32-bit halves -- and its slot.
  auto low_votes = none;
  auto low_pos = none;
  auto low_slot = hn::Zero(du);
  auto here = hn::Iota(du, 0);
  const auto step = hn::Set(du, static_cast<std::uint32_t>(N));
  auto ok = hn::FirstN(df, N);
  std::size_t s = 0;
  for (; s + N <= n; s += N) {
    const auto p = hn::LoadU(du, pos + s);
    const auto x = hn::LoadU(df, w + s);
    const auto held = hn::Ne(p, free_v);
    // A held weight must be finite and >= 0 (false for NaN); the caller
    // undoes the votes exactly if one is not.
    ok = hn::And(ok, hn::Or(hn::And(x >= zero, x <= top), hn::RebindMask(df, hn::Not(held))));
    const auto voted = hn::And(hn::RebindMask(du, x >= t), held);
    const auto v = hn::Sub(hn::LoadU(du, votes + s), hn::VecFromMask(du, voted));  // -(-1) = +1
    hn::StoreU(v, du, votes + s);
    const auto evictable = hn::And(held, protect > p);
    const auto cv = hn::IfThenElse(evictable, v, none);
    const auto cp = hn::IfThenElse(evictable, p, none);
    const auto better = hn::Or(low_votes > cv, hn::And(hn::Eq(cv, low_votes), low_pos > cp));
    low_votes = hn::IfThenElse(better, cv, low_votes);
    low_pos = hn::IfThenElse(better, cp, low_pos);
    low_slot = hn::IfThenElse(better, here, low_slot);
    here = hn::Add(here, step);
  }
  std::size_t slot = n;
  std::uint64_t best = LowestLane(du, low_votes, low_pos, low_slot, n, &slot);
  bool valid = hn::AllTrue(df, ok);
  for (; s < n; ++s) {
    const bool held = pos[s] != kFreeSlot;
    if (held && !ScalarValid(w[s])) valid = false;
    const std::uint32_t v = votes[s] + (held && w[s] >= threshold ? 1U : 0U);
    votes[s] = v;
    const std::uint64_t key = (std::uint64_t{v} << 32) | pos[s];
    if (held && pos[s] < protect_from && key < best) {
      best = key;
      slot = s;
    }
  }
  *slot_out = slot;
  *valid_out = valid;
  return best;
}

void Unvote(std::uint32_t* HWY_RESTRICT votes, const std::uint32_t* HWY_RESTRICT pos, const float* HWY_RESTRICT w,
            std::size_t n, float threshold) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto free_v = hn::Set(du, kFreeSlot);
  const auto t = hn::Set(df, threshold);
  std::size_t s = 0;
  for (; s + N <= n; s += N) {
    const auto voted = hn::And(hn::RebindMask(du, hn::LoadU(df, w + s) >= t), hn::Ne(hn::LoadU(du, pos + s), free_v));
    hn::StoreU(hn::Add(hn::LoadU(du, votes + s), hn::VecFromMask(du, voted)), du, votes + s);
  }
  for (; s < n; ++s) votes[s] -= (pos[s] != kFreeSlot && w[s] >= threshold) ? 1U : 0U;
}

// H2O: scores are sums of weights >= 0, so never negative, and their bit
// patterns order exactly as the values do: the search compares 64-bit
// integers. The pass adds into a second buffer, checking the held weights as
// it goes: dst = src + w for held slots (src copied for free ones), so a bad
// row leaves src -- the bank's state -- untouched and is read only once.
std::size_t AddAndFindChecked(double* HWY_RESTRICT dst, const double* HWY_RESTRICT src,
                              const std::uint32_t* HWY_RESTRICT pos, const float* HWY_RESTRICT w, std::size_t n,
                              std::uint32_t protect_from, bool* HWY_RESTRICT valid_out) {
  const hn::ScalableTag<double> dd;
  const hn::RebindToUnsigned<decltype(dd)> du;  // u64 lanes
  const hn::Rebind<float, decltype(dd)> df;     // as many floats as doubles
  const hn::Rebind<std::uint32_t, decltype(dd)> dp;
  const std::size_t N = hn::Lanes(dd);
  const auto free_v = hn::Set(du, kFreeSlot);
  const auto protect = hn::Set(du, protect_from);
  const auto none = hn::Set(du, kNone);
  // Checked as doubles: the promotion is exact, NaN fails both tests and an
  // infinity the second, exactly as the float test would.
  const auto zero = hn::Zero(dd);
  const auto top = hn::Set(dd, static_cast<double>(kMaxWeight));
  auto ok = hn::FirstN(dd, N);
  auto low = none;
  auto low_pos = none;
  auto low_slot = hn::Zero(du);
  auto here = hn::Iota(du, 0);
  const auto step = hn::Set(du, static_cast<std::uint64_t>(N));
  std::size_t s = 0;
  for (; s + N <= n; s += N) {
    const auto p = hn::PromoteTo(du, hn::LoadU(dp, pos + s));
    const auto held = hn::Ne(p, free_v);
    const auto xd = hn::PromoteTo(dd, hn::LoadU(df, w + s));
    ok = hn::And(ok, hn::Or(hn::And(xd >= zero, xd <= top), hn::RebindMask(dd, hn::Not(held))));
    const auto x = hn::IfThenElseZero(hn::RebindMask(dd, held), xd);
    // src >= +0.0, so the sum is never -0.0 and its bits order as its value.
    const auto sc = hn::Add(hn::LoadU(dd, src + s), x);
    hn::StoreU(sc, dd, dst + s);
    const auto evictable = hn::And(held, protect > p);
    const auto bits = hn::IfThenElse(evictable, hn::BitCast(du, sc), none);
    const auto better = hn::Or(low > bits, hn::And(hn::And(hn::Eq(bits, low), low_pos > p), evictable));
    low = hn::IfThenElse(better, bits, low);
    low_pos = hn::IfThenElse(better, p, low_pos);
    low_slot = hn::IfThenElse(better, here, low_slot);
    here = hn::Add(here, step);
  }
  HWY_ALIGN std::uint64_t lb[kMaxLanes];
  HWY_ALIGN std::uint64_t lp[kMaxLanes];
  HWY_ALIGN std::uint64_t ls[kMaxLanes];
  hn::Store(low, du, lb);
  hn::Store(low_pos, du, lp);
  hn::Store(low_slot, du, ls);
  std::uint64_t best = kNone;
  std::uint64_t best_pos = kNone;
  std::size_t slot = n;
  for (std::size_t k = 0; k < N; ++k) {
    if (lp[k] != kNone && (lb[k] < best || (lb[k] == best && lp[k] < best_pos))) {
      best = lb[k];
      best_pos = lp[k];
      slot = ls[k];
    }
  }
  bool valid = hn::AllTrue(dd, ok);
  for (; s < n; ++s) {
    dst[s] = src[s];
    if (pos[s] == kFreeSlot) continue;
    if (!ScalarValid(w[s])) valid = false;
    dst[s] += static_cast<double>(w[s]);
    std::uint64_t b;
    std::memcpy(&b, dst + s, sizeof b);
    if (pos[s] < protect_from && (b < best || (b == best && pos[s] < best_pos))) {
      best = b;
      best_pos = pos[s];
      slot = s;
    }
  }
  *valid_out = valid;
  return slot;
}

// TOVA: the row becomes the records of the held slots -- float32, as TOVA's
// own records are (a float32 weight is held exactly) -- checked in the same
// pass, and the held slot with the lowest weight (ties: the lower position)
// is found as the smallest (weight bits, position) pair: weights are >= 0,
// so their bits order as their values do once -0.0 is stored as +0.0.
std::size_t StoreAndFindCheckedF32(float* HWY_RESTRICT dst, const std::uint32_t* HWY_RESTRICT pos,
                                   const float* HWY_RESTRICT w, std::size_t n, bool* HWY_RESTRICT valid_out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto free_v = hn::Set(du, kFreeSlot);
  const auto none = hn::Set(du, kMaxU32);
  const auto zero = hn::Zero(df);
  const auto top = hn::Set(df, kMaxWeight);
  auto ok = hn::FirstN(df, N);
  auto low_bits = none;
  auto low_pos = none;
  auto low_slot = hn::Zero(du);
  auto here = hn::Iota(du, 0);
  const auto step = hn::Set(du, static_cast<std::uint32_t>(N));
  std::size_t s = 0;
  for (; s + N <= n; s += N) {
    const auto p = hn::LoadU(du, pos + s);
    const auto held = hn::Ne(p, free_v);
    const auto x = hn::LoadU(df, w + s);
    ok = hn::And(ok, hn::Or(hn::And(x >= zero, x <= top), hn::RebindMask(df, hn::Not(held))));
    const auto record = hn::IfThenElseZero(hn::RebindMask(df, held), hn::Add(x, zero));  // -0.0 -> +0.0
    hn::StoreU(record, df, dst + s);
    const auto bits = hn::IfThenElse(held, hn::BitCast(du, record), none);
    const auto at = hn::IfThenElse(held, p, none);
    const auto better = hn::Or(low_bits > bits, hn::And(hn::Eq(bits, low_bits), low_pos > at));
    low_bits = hn::IfThenElse(better, bits, low_bits);
    low_pos = hn::IfThenElse(better, at, low_pos);
    low_slot = hn::IfThenElse(better, here, low_slot);
    here = hn::Add(here, step);
  }
  std::size_t slot = n;
  std::uint64_t best = LowestLane(du, low_bits, low_pos, low_slot, n, &slot);
  bool valid = hn::AllTrue(df, ok);
  for (; s < n; ++s) {
    dst[s] = 0.0F;
    if (pos[s] == kFreeSlot) continue;
    if (!ScalarValid(w[s])) valid = false;
    dst[s] = w[s] + 0.0F;
    std::uint32_t b;
    std::memcpy(&b, dst + s, sizeof b);
    const std::uint64_t key = (std::uint64_t{b} << 32) | pos[s];
    if (key < best) {
      best = key;
      slot = s;
    }
  }
  *valid_out = valid;
  return slot;
}

bool HeldWeightsValid(const std::uint32_t* HWY_RESTRICT pos, const float* HWY_RESTRICT w, std::size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto free_v = hn::Set(du, kFreeSlot);
  const auto zero = hn::Zero(df);
  const auto top = hn::Set(df, kMaxWeight);
  auto ok = hn::FirstN(df, N);
  std::size_t s = 0;
  for (; s + N <= n; s += N) {
    const auto x = hn::LoadU(df, w + s);
    const auto held = hn::Ne(hn::LoadU(du, pos + s), free_v);
    ok = hn::And(ok, hn::Or(hn::And(x >= zero, x <= top), hn::RebindMask(df, hn::Not(held))));
  }
  bool valid = hn::AllTrue(df, ok);
  for (; s < n; ++s) valid = valid && (pos[s] == kFreeSlot || ScalarValid(w[s]));
  return valid;
}

}  // namespace kvevict::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvevict::detail {

HWY_EXPORT(Aggregate);
HWY_EXPORT(VoteAndFind);
HWY_EXPORT(Unvote);
HWY_EXPORT(HeldWeightsValid);
HWY_EXPORT(AddAndFindChecked);
HWY_EXPORT(StoreAndFindCheckedF32);

void bank_aggregate(const float* rows, std::size_t stride, std::size_t group, std::size_t n, Aggregation how,
                    float* out) noexcept {
  HWY_DYNAMIC_DISPATCH(Aggregate)(rows, stride, group, n, how, out);
}

std::uint64_t bank_vote_and_find(std::uint32_t* votes, const std::uint32_t* pos, const float* w, std::size_t n,
                                 float threshold, std::uint32_t protect_from, std::size_t& slot,
                                 bool& valid) noexcept {
  return HWY_DYNAMIC_DISPATCH(VoteAndFind)(votes, pos, w, n, threshold, protect_from, &slot, &valid);
}

void bank_unvote(std::uint32_t* votes, const std::uint32_t* pos, const float* w, std::size_t n,
                 float threshold) noexcept {
  HWY_DYNAMIC_DISPATCH(Unvote)(votes, pos, w, n, threshold);
}

std::size_t bank_add_and_find_checked(double* dst, const double* src, const std::uint32_t* pos, const float* w,
                                      std::size_t n, std::uint32_t protect_from, bool& valid) noexcept {
  return HWY_DYNAMIC_DISPATCH(AddAndFindChecked)(dst, src, pos, w, n, protect_from, &valid);
}

std::size_t bank_store_and_find_checked(float* dst, const std::uint32_t* pos, const float* w, std::size_t n,
                                        bool& valid) noexcept {
  return HWY_DYNAMIC_DISPATCH(StoreAndFindCheckedF32)(dst, pos, w, n, &valid);
}

bool bank_held_weights_valid(const std::uint32_t* pos, const float* w, std::size_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(HeldWeightsValid)(pos, w, n);
}

}  // namespace kvevict::detail
#endif  // HWY_ONCE
