// Target selection for every Highway-dispatched kernel in the library, and
// the probe that reports which target actually runs. The probe is itself a
// dispatched function, so "active" is measured, not assumed.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvevict::simd::HWY_NAMESPACE {

std::int64_t RunningTarget() { return HWY_TARGET; }

}  // namespace kvevict::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/simd.h"

namespace kvevict::simd {

HWY_EXPORT(RunningTarget);

namespace {

struct Named {
  const char* name;
  std::int64_t bit;
};

// Our names for Highway's x86 targets; AVX3 is Highway's AVX-512
// (F, VL, DQ, BW). The portable static target is "baseline" on every
// architecture.
constexpr Named kNamed[] = {
#if HWY_ARCH_X86
    {"sse4", HWY_SSE4},
    {"avx2", HWY_AVX2},
    {"avx512", HWY_AVX3},
#endif
    {"baseline", HWY_STATIC_TARGET},
};

const char* name_of(std::int64_t bit) {
  for (const Named& n : kNamed) {
    if (n.bit == bit) return n.name;
  }
  return hwy::TargetName(bit);
}

// Targets this build holds, as Highway's bits, lowest first (higher bits are
// lower targets in Highway's numbering).
std::vector<std::int64_t> compiled_bits() {
  std::vector<std::int64_t> bits;
  for (std::int64_t t = HWY_TARGETS; t != 0; t &= t - 1) bits.push_back(t & -t);
  std::reverse(bits.begin(), bits.end());
  return bits;
}

std::int64_t cpu_bits() {
  hwy::DisableTargets(0);  // what the CPU itself can run, not a narrowed view
  return hwy::SupportedTargets();
}

std::int64_t current_disabled = 0;

// "avx512-vnni" is not one of Highway's targets: Highway's AVX3 with the
// VNNI 8-bit products on. Its name stands after "avx512" in the lists.
#if HWY_ARCH_X86 && (HWY_TARGETS & HWY_AVX3)
constexpr bool kVnniCompiled = true;
constexpr const char* kVnniName = "avx512-vnni";
bool cpu_has_vnni() {
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
#else
constexpr bool kVnniCompiled = false;
constexpr const char* kVnniName = "";
bool cpu_has_vnni() { return false; }
#endif

// Set at every selection; read by every 8-bit product.
std::atomic<bool> vnni_on{false};
// Whether VNNI runs with nothing selected (the best target): the CPU has
// it and AVX-512 is the best target it supports.
// (Called with no target disabled.)
bool vnni_at_best() {
  return kVnniCompiled && cpu_has_vnni() && compiled_bits().back() == HWY_AVX3 &&
         (hwy::SupportedTargets() & HWY_AVX3) != 0;
}
// Before anything is selected: as the best target.
[[maybe_unused]] const bool vnni_initialised = [] {
  vnni_on.store(vnni_at_best(), std::memory_order_relaxed);
  return true;
}();

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> compiled_targets() {
  std::vector<std::string> out;
  for (const std::int64_t b : compiled_bits()) out.emplace_back(name_of(b));
  if (kVnniCompiled) out.emplace_back(kVnniName);
  return out;
}

std::vector<std::string> supported_targets() {
  const std::int64_t cpu = cpu_bits();
  hwy::DisableTargets(current_disabled);  // keep the caller's selection
  std::vector<std::string> out;
  for (const std::int64_t b : compiled_bits()) {
    if ((cpu & b) != 0) out.emplace_back(name_of(b));
  }
  if (kVnniCompiled && (cpu & HWY_AVX3) != 0 && cpu_has_vnni()) out.emplace_back(kVnniName);
  return out;
}

std::string active_target() {
  const std::int64_t running = HWY_DYNAMIC_DISPATCH(RunningTarget)();
  return running == HWY_AVX3 && vnni_active() ? kVnniName : name_of(running);
}

bool vnni_active() noexcept { return vnni_on.load(std::memory_order_relaxed); }

void select_target(std::string_view name) {
  if (name.empty() || name == "best") {
    current_disabled = 0;
    hwy::DisableTargets(0);
    vnni_on.store(vnni_at_best(), std::memory_order_relaxed);
    return;
  }
  const bool vnni = kVnniCompiled && name == kVnniName;
  if (vnni) name = "avx512";
  std::int64_t bit = 0;
  for (const std::int64_t b : compiled_bits()) {
    if (name == name_of(b)) bit = b;
  }
  if (bit == 0) {
    throw ParameterError(fmt::format("SIMD target '{}' is not one this build has (known: {})", name,
                                     joined(compiled_targets())));
  }
  const std::int64_t cpu = cpu_bits();
  if ((cpu & bit) == 0 || (vnni && !cpu_has_vnni())) {
    hwy::DisableTargets(current_disabled);
    throw ParameterError(fmt::format("SIMD target '{}' cannot run on this CPU (it supports: {})",
                                     vnni ? kVnniName : name, joined(supported_targets())));
  }
  vnni_on.store(vnni, std::memory_order_relaxed);
  // Highway prefers lower bit values: disabling every bit below `bit` leaves
  // `bit` the best target, and dispatch re-chooses on the next call.
  current_disabled = bit - 1;
  hwy::DisableTargets(current_disabled);
}

void select_from_environment() {
  const char* value = std::getenv("KVEVICT_SIMD");
  if (value == nullptr) return;
  try {
    select_target(value);
  } catch (const ParameterError& e) {
    throw ParameterError(fmt::format("KVEVICT_SIMD={}: {}", value, e.what()));
  }
}

}  // namespace kvevict::simd
#endif  // HWY_ONCE
