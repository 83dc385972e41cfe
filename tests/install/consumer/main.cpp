// Builds against the installed core alone (headers and libkvevict-core):
// one Scissorhands step, the registry, and a bank of instances stepped
// together (OpenMP inside the library; nothing of it here).
#include <kvevict/core/bank.h>
#include <kvevict/core/policies/scissorhands.h>
#include <kvevict/core/registry.h>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  kvevict::Scissorhands policy({.budget = 2, .recent_window = 1});
  policy.on_decode_step(1, std::vector<float>{1.0F});
  policy.on_decode_step(2, std::vector<float>{0.75F, 0.25F});
  const auto victims = policy.evict(2);  // 0 has a vote, 1 none: 1 goes
  bool ok = victims.size() == 1 && victims[0] == 1 &&
            kvevict::find_policy("scissorhands").name == "scissorhands" &&
            kvevict::make_policy("h2o", {{"budget", 64}})->kept_count() == 1;

  // 8 instances at budget 4, positions 1 ... 9 (each starts holding 0): every
  // instance evicts one position per step past the budget, never the newest.
  constexpr std::size_t kInstances = 8;
  kvevict::PolicyBank bank({.policy = "scissorhands", .instances = kInstances, .budget = 4, .recent_window = 1});
  const std::size_t stride = bank.capacity();
  std::vector<float> attn(kInstances * stride, 0.1F);
  std::vector<kvevict::Position> victim_pos(kInstances);
  std::vector<std::uint32_t> victim_slot(kInstances);
  int evictions = 0;
  for (std::int64_t pos = 1; pos <= 9; ++pos) {
    bank.step(pos, attn.data(), stride, victim_pos.data(), victim_slot.data());
    for (std::size_t k = 0; k < kInstances; ++k) {
      if (victim_slot[k] == kvevict::PolicyBank::kFree) continue;
      ++evictions;
      ok = ok && victim_pos[k] != static_cast<kvevict::Position>(pos);
    }
  }
  for (std::size_t k = 0; k < kInstances; ++k) ok = ok && bank.kept_count(k) == 4;
  ok = ok && evictions == static_cast<int>(kInstances) * 6;
  std::printf("consumer (kvevict::core): %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
