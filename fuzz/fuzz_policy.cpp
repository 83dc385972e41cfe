// libFuzzer target: bytes decoded into a policy, its parameters, and a
// sequence of decode steps and evictions with arbitrary (also NaN, infinite,
// negative, denormal) weights, short and long vectors, skipped positions and
// mismatched budgets. Checks after every call what every policy promises;
// a broken promise traps.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace {
void require(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const auto all = kvevict::policies();
  const kvevict::PolicyInfo& info = *all[in.ConsumeIntegralInRange<std::size_t>(0, all.size() - 1)];
  kvevict::ParamMap params;
  for (const auto& p : info.params) {
    if (in.ConsumeBool()) params.emplace_back(p.name, in.ConsumeIntegralInRange<std::int64_t>(-3, 70));
  }
  std::unique_ptr<kvevict::Policy> policy;
  try {
    policy = info.make(params);
  } catch (const kvevict::ParameterError&) {
    return 0;
  }
  const std::int64_t budget = info.effective(params).front().second;
  const std::size_t memory = policy->memory_bytes();

  std::vector<kvevict::Position> held{0};
  std::vector<float> attn;
  std::int64_t pos = 0;
  for (int step = 0; step < 4000 && in.remaining_bytes() > 0; ++step) {
    const int action = in.ConsumeIntegralInRange(0, 7);
    if (action == 7) {  // an eviction at an arbitrary budget
      const auto b = in.ConsumeIntegralInRange<std::int64_t>(-1, budget + 2);
      try {
        const auto victims = policy->evict(b);
        require(std::is_sorted(victims.begin(), victims.end()));
        require(std::adjacent_find(victims.begin(), victims.end()) == victims.end());
        for (const auto v : victims) {
          const auto it = std::lower_bound(held.begin(), held.end(), v);
          require(it != held.end() && *it == v);
          held.erase(it);
        }
      } catch (const kvevict::ContractError&) {
        require(b < 0);
      }
      require(policy->kept_count() == held.size());
      continue;
    }
    pos += 1 + (in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegralInRange(0, 3) : 0);
    const bool present = action != 0;
    attn.clear();
    if (present) {
      std::size_t len = held.size();
      if (action == 1) len = in.ConsumeIntegralInRange<std::size_t>(0, held.size());
      if (action == 2) len += in.ConsumeIntegralInRange<std::size_t>(1, 3);
      const bool raw_bits = in.ConsumeIntegralInRange(0, 9) == 0;
      for (std::size_t i = 0; i < len; ++i) {
        attn.push_back(raw_bits ? std::bit_cast<float>(in.ConsumeIntegral<std::uint32_t>())
                                : static_cast<float>(in.ConsumeIntegralInRange(0, 16)) / 16.0F);
      }
    }
    const std::size_t before = policy->kept_count();
    try {
      policy->on_decode_step(pos, present ? kvevict::Attention(std::span<const float>(attn))
                                          : std::nullopt);
      held.push_back(static_cast<kvevict::Position>(pos));
    } catch (const kvevict::ContractError&) {
      require(policy->kept_count() == before);  // refused before anything changed
    }
    require(policy->kept_count() == held.size());
    require(policy->memory_bytes() == memory);
  }
  return 0;
}
