// The evaluation's C API (include/kvevict_eval.h): traces, the harness, the
// compare and the test vectors, over the C++ evaluation library. Handles and
// errors as in the core's C API (src/core/c_api.cpp, core/c_api_internal.h).
#include "kvevict_eval.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/c_api_internal.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/harness.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/trace.h"
#include "kvevict/eval/vectors.h"

struct kvevict_trace {
  std::unique_ptr<kvevict::Trace> impl;
};

using kvevict::c_api::ArgumentError;
using kvevict::c_api::check_live;
using kvevict::c_api::guard;
using kvevict::c_api::need;
using kvevict::c_api::param_map;
using kvevict::c_api::remember;

namespace {

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" {

kvevict_status kvevict_trace_open(const char* id, kvevict_trace** out) {
  return guard([&] {
    need(id, "kvevict_trace_open", "id");
    need(out, "kvevict_trace_open", "out");
    *out = nullptr;
    auto handle = std::make_unique<kvevict_trace>();
    handle->impl = kvevict::open_trace(id);
    remember(handle.get());
    *out = handle.release();
  });
}

kvevict_status kvevict_trace_destroy(kvevict_trace* trace) {
  return kvevict::c_api::destroy_handle(trace, "kvevict_trace_destroy");
}

kvevict_status kvevict_trace_length(const kvevict_trace* trace, uint32_t* length) {
  return guard([&] {
    check_live(trace, "kvevict_trace_length");
    need(length, "kvevict_trace_length", "length");
    *length = trace->impl->length();
  });
}

kvevict_status kvevict_trace_rewind(kvevict_trace* trace) {
  return guard([&] {
    check_live(trace, "kvevict_trace_rewind");
    trace->impl->rewind();
  });
}

kvevict_status kvevict_trace_next(kvevict_trace* trace, const float** weights, size_t* count) {
  return guard([&] {
    check_live(trace, "kvevict_trace_next");
    need(weights, "kvevict_trace_next", "weights");
    need(count, "kvevict_trace_next", "count");
    const auto w = trace->impl->next();
    *weights = w.data();
    *count = w.size();
  });
}

kvevict_status kvevict_trace_hash(const char* id, uint32_t steps, uint32_t* hash) {
  return guard([&] {
    need(id, "kvevict_trace_hash", "id");
    need(hash, "kvevict_trace_hash", "hash");
    auto trace = kvevict::open_trace(id);
    const std::uint32_t n = steps == 0 ? trace->steps() : kvevict::checked_steps(*trace, steps);
    *hash = kvevict::trace_hash(*trace, n);
  });
}

kvevict_status kvevict_run(kvevict_policy* policy, kvevict_trace* trace, int64_t budget,
                           int64_t max_steps, kvevict_run_result* result) {
  return guard([&] {
    check_live(policy, "kvevict_run");
    check_live(trace, "kvevict_run");
    need(result, "kvevict_run", "result");
    const auto totals = kvevict::run(*policy->impl, *trace->impl, budget,
                                     max_steps == 0 ? std::nullopt : std::optional(max_steps));
    const auto m = kvevict::metrics_of(totals);
    *result = kvevict_run_result{totals.steps,          totals.budget,
                                 totals.total_retained_mass, totals.total_heavy_hits,
                                 totals.total_heavy_possible, totals.eviction_calls,
                                 totals.evicted,        m.retained_attention_mass,
                                 m.heavy_hitter_recall};
  });
}

kvevict_status kvevict_compare_json(const char* policies, const int64_t* budgets,
                                    size_t budget_count, const kvevict_param* overrides,
                                    size_t override_count, const char* trace, int64_t max_steps,
                                    char** json) {
  return guard([&] {
    need(json, "kvevict_compare_json", "json");
    *json = nullptr;
    kvevict::CompareRequest request;
    if (policies != nullptr) request.policies = kvevict::parse_policy_list(policies);
    if (budget_count > 0) {
      need(budgets, "kvevict_compare_json", "budgets");
      request.budgets.assign(budgets, budgets + budget_count);
    }
    request.overrides = param_map(overrides, override_count, "kvevict_compare_json");
    kvevict::EvaluateOptions options;
    if (trace != nullptr) options.trace = trace;
    if (max_steps != 0) options.steps = max_steps;
    *json = copy_string(kvevict::rows_json(kvevict::compare(request, options), "compare"));
  });
}

void kvevict_string_free(char* s) { std::free(s); }

kvevict_status kvevict_vectors_run(const char* const* paths, size_t path_count, size_t* passed,
                                   size_t* failed, char** report) {
  return guard([&] {
    need(passed, "kvevict_vectors_run", "passed");
    need(failed, "kvevict_vectors_run", "failed");
    if (report != nullptr) *report = nullptr;
    if (path_count > 0) need(paths, "kvevict_vectors_run", "paths");
    std::vector<std::filesystem::path> list;
    for (std::size_t i = 0; i < path_count; ++i) {
      if (paths[i] == nullptr) throw ArgumentError(fmt::format("kvevict_vectors_run: paths[{}] is NULL", i));
      list.emplace_back(paths[i]);
    }
    const auto result = kvevict::run_vectors(list);
    *passed = result.passed;
    *failed = result.failed;
    if (report != nullptr) {
      std::string text;
      for (const auto& f : result.failures) text += kvevict::describe(f) + "\n";
      *report = copy_string(text);
    }
  });
}

}  // extern "C"
