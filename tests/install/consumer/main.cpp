// Builds against the installed headers and library: one Scissorhands step.
#include <kvevict/core/policies/scissorhands.h>
#include <kvevict/core/registry.h>

#include <cstdio>
#include <vector>

int main() {
  kvevict::Scissorhands policy({.budget = 2, .recent_window = 1});
  policy.on_decode_step(1, std::vector<float>{1.0F});
  policy.on_decode_step(2, std::vector<float>{0.75F, 0.25F});
  const auto victims = policy.evict(2);  // 0 has a vote, 1 none: 1 goes
  const bool ok = victims.size() == 1 && victims[0] == 1 && kvevict::policies().size() == 7;
  std::printf("consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
