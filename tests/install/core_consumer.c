/* An inference engine's use of the core alone, from C99: compiled and linked
 * with `pkg-config kvevict-core` against a prefix holding nothing but the core
 * (cmake --install --component core). A decode loop over one Scissorhands
 * instance (which starts holding position 0): it holds at most `budget`
 * positions, never evicts the newest, and a bad parameter is refused with a
 * status and a message. */
#include <kvevict.h>

#include <stdio.h>
#include <string.h>

#define BUDGET 4
#define STEPS 20

static int failures = 0;

static void check(int ok, const char* what) {
  if (!ok) {
    ++failures;
    fprintf(stderr, "core consumer: FAIL: %s (last error: %s)\n", what, kvevict_last_error());
  }
}

int main(void) {
  const kvevict_param params[] = {{"budget", BUDGET}, {"recentWindow", 1}};
  const kvevict_param bad[] = {{"budget", BUDGET}, {"recentWindow", BUDGET}};
  kvevict_policy* policy = NULL;
  float attn[BUDGET + 1];
  uint32_t victims[BUDGET + 1];
  size_t kept = 0;
  size_t n = 0;
  size_t evicted = 0;
  size_t i = 0;
  int found = 0;
  int64_t pos = 0;

  for (i = 0; i < kvevict_policy_count(); ++i) found |= strcmp(kvevict_policy_name_at(i), "scissorhands") == 0;
  check(found, "scissorhands is registered");
  check(kvevict_policy_create("scissorhands", bad, 2, &policy) == KVEVICT_ERROR_PARAMETER && policy == NULL,
        "recentWindow = budget is refused");
  check(strstr(kvevict_last_error(), "recentWindow") != NULL, "the message names the parameter");

  check(kvevict_policy_create("scissorhands", params, 2, &policy) == KVEVICT_OK, "create");
  for (pos = 1; pos < STEPS && failures == 0; ++pos) {
    check(kvevict_policy_kept_count(policy, &kept) == KVEVICT_OK, "kept_count");
    for (i = 0; i < kept; ++i) attn[i] = 1.0F / (float)kept;
    check(kvevict_policy_on_decode_step(policy, pos, attn, kept) == KVEVICT_OK, "decode step");
    check(kvevict_policy_kept_count(policy, &kept) == KVEVICT_OK, "kept_count");
    if (kept > BUDGET) {
      check(kvevict_policy_evict(policy, BUDGET, victims, BUDGET + 1, &n) == KVEVICT_OK, "evict");
      check(n == 1 && victims[0] != (uint32_t)pos, "one victim, never the newest");
      evicted += n;
    }
  }
  check(kvevict_policy_kept_count(policy, &kept) == KVEVICT_OK && kept == BUDGET, "budget positions held");
  check(evicted == STEPS - BUDGET, "one eviction per step past the budget");
  check(kvevict_policy_destroy(policy) == KVEVICT_OK, "destroy");
  printf("core consumer (C, pkg-config kvevict-core, libkvevict-core %s): %s\n", kvevict_version(),
         failures == 0 ? "ok" : "WRONG");
  return failures == 0 ? 0 : 1;
}
