// Builds against every installed layer (kvevict::kvevict): a policy from the
// core, the canonical trace's parity hash from the evaluation, the model's
// refusal of a missing file, and a report shade.
#include <kvevict/core/errors.h>
#include <kvevict/core/registry.h>
#include <kvevict/eval/trace.h>
#include <kvevict/model/decoder/model.h>
#include <kvevict/report/report.h>

#include <cstdio>

int main() {
  bool ok = kvevict::make_policy("scissorhands")->kept_count() == 1;
  auto trace = kvevict::open_trace("decode-4096");
  ok = ok && trace->length() == 4096 && kvevict::trace_hash(*trace, 10) == 515340780U;  // spec/trace.md
  try {
    kvevict::Model::load("no-such-model.kvm");
    ok = false;
  } catch (const kvevict::InputError&) {
  }
  ok = ok && kvevict::strip_level_of(1.0) == kvevict::kStripLevels - 1;
  std::printf("consumer (kvevict::kvevict): %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
