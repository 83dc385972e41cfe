// The core's C API (include/kvevict.h): a thin shell over the policies and the
// registry. The evaluation's and the model's C APIs (src/eval/c_api.cpp,
// src/model/c_api.cpp) share its handle table and error handling
// (c_api_internal.h). Every entry point catches everything, so no exception
// crosses into C; handles are checked against a table of live ones, so a
// destroyed or foreign handle is an error, not a crash (unless a later create
// happened to reuse its address).
#include "kvevict.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_set>

#include <fmt/format.h>

#include "c_api_internal.h"
#include "kvevict/core/attention.h"
#include "kvevict/core/block_evictor.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/prefill.h"

struct kvevict_block_evictor {
  std::unique_ptr<kvevict::BlockEvictor> impl;
};

struct kvevict_layer_budget {
  std::unique_ptr<kvevict::LayerBudget> impl;
};

using kvevict::c_api::ArgumentError;
using kvevict::c_api::check_live;
using kvevict::c_api::guard;
using kvevict::c_api::need;
using kvevict::c_api::param_map;
using kvevict::c_api::remember;

namespace {

// A C step's signals as the core's StepInputs: a NULL attention is absent, a
// NULL key/value/queries is not given (an empty span); a NULL pointer with a
// length is the caller's mistake, named rather than read.
std::span<const float> signal_span(const float* p, size_t len, const char* what, const char* field) {
  if (p == nullptr) {
    if (len != 0) {
      throw ArgumentError(fmt::format("{}: inputs->{} is NULL but {}_len is {}", what, field, field, len));
    }
    return {};
  }
  return {p, len};
}

kvevict::StepInputs step_inputs(const kvevict_step_inputs* in, const char* what) {
  need(in, what, "inputs");
  kvevict::StepInputs out;
  if (in->attention != nullptr) out.attention = std::span<const float>(in->attention, in->attention_len);
  out.key = signal_span(in->key, in->key_len, what, "key");
  out.value = signal_span(in->value, in->value_len, what, "value");
  out.queries = signal_span(in->queries, in->queries_len, what, "queries");
  return out;
}

}  // namespace

namespace kvevict::c_api {

namespace {

std::mutex live_mutex;
std::unordered_set<const void*>& live() {
  static std::unordered_set<const void*> handles;
  return handles;
}

}  // namespace

std::string& last_error() {
  thread_local std::string message;
  return message;
}

void remember(const void* handle) {
  const std::lock_guard lock(live_mutex);
  live().insert(handle);
}

void check_live(const void* handle, const char* what) {
  if (handle == nullptr) throw ArgumentError(fmt::format("{}: the handle is NULL", what));
  const std::lock_guard lock(live_mutex);
  if (live().count(handle) == 0) {
    throw ArgumentError(fmt::format("{}: the handle is not a live one (destroyed already?)", what));
  }
}

bool forget(const void* handle) {
  const std::lock_guard lock(live_mutex);
  return live().erase(handle) == 1;
}

void need(const void* p, const char* what, const char* arg) {
  if (p == nullptr) throw ArgumentError(fmt::format("{}: {} is NULL", what, arg));
}

ParamMap param_map(const kvevict_param* params, std::size_t count, const char* what) {
  ParamMap map;
  if (count > 0) need(params, what, "params");
  for (std::size_t i = 0; i < count; ++i) {
    if (params[i].key == nullptr) throw ArgumentError(fmt::format("{}: params[{}].key is NULL", what, i));
    set_param(map, params[i].key, params[i].value);
  }
  return map;
}

}  // namespace kvevict::c_api

extern "C" {

const char* kvevict_last_error(void) { return kvevict::c_api::last_error().c_str(); }

const char* kvevict_version(void) { return "0.1.0"; }

size_t kvevict_policy_count(void) { return kvevict::policies().size(); }

const char* kvevict_policy_name_at(size_t index) {
  const auto all = kvevict::policies();
  return index < all.size() ? all[index]->name.c_str() : nullptr;
}

kvevict_status kvevict_policy_param_count(const char* policy, size_t* count) {
  return guard([&] {
    need(policy, "kvevict_policy_param_count", "policy");
    need(count, "kvevict_policy_param_count", "count");
    *count = kvevict::find_policy(policy).params.size();
  });
}

kvevict_status kvevict_policy_param_at(const char* policy, size_t index, const char** name,
                                       int64_t* default_value) {
  return guard([&] {
    need(policy, "kvevict_policy_param_at", "policy");
    const auto& info = kvevict::find_policy(policy);
    if (index >= info.params.size()) {
      throw ArgumentError(fmt::format("kvevict_policy_param_at: {} has {} parameters, not {}",
                                      info.name, info.params.size(), index + 1));
    }
    if (name != nullptr) *name = info.params[index].name.c_str();
    if (default_value != nullptr) *default_value = info.params[index].default_value;
  });
}

kvevict_status kvevict_policy_signals_of(const char* policy, uint32_t* signals) {
  return guard([&] {
    need(policy, "kvevict_policy_signals_of", "policy");
    need(signals, "kvevict_policy_signals_of", "signals");
    *signals = kvevict::find_policy(policy).signals;
  });
}

kvevict_status kvevict_policy_create(const char* name, const kvevict_param* params,
                                     size_t param_count, kvevict_policy** out) {
  return guard([&] {
    need(name, "kvevict_policy_create", "name");
    need(out, "kvevict_policy_create", "out");
    *out = nullptr;
    const auto& info = kvevict::find_policy(name);
    auto handle = std::make_unique<kvevict_policy>();
    handle->impl = info.make(param_map(params, param_count, "kvevict_policy_create"));
    handle->info = &info;
    remember(handle.get());
    *out = handle.release();
  });
}

kvevict_status kvevict_policy_destroy(kvevict_policy* policy) {
  return kvevict::c_api::destroy_handle(policy, "kvevict_policy_destroy");
}

kvevict_status kvevict_policy_on_decode_step(kvevict_policy* policy, int64_t pos,
                                             const float* attn, size_t attn_len) {
  return guard([&] {
    check_live(policy, "kvevict_policy_on_decode_step");
    if (attn == nullptr) {
      policy->impl->on_decode_step(pos, std::nullopt);
    } else {
      policy->impl->on_decode_step(pos, std::span<const float>(attn, attn_len));
    }
  });
}

kvevict_status kvevict_policy_signals(const kvevict_policy* policy, uint32_t* signals) {
  return guard([&] {
    check_live(policy, "kvevict_policy_signals");
    need(signals, "kvevict_policy_signals", "signals");
    *signals = policy->impl->signals();
  });
}

kvevict_status kvevict_policy_step(kvevict_policy* policy, int64_t pos, const kvevict_step_inputs* inputs) {
  return guard([&] {
    check_live(policy, "kvevict_policy_step");
    policy->impl->on_step(pos, step_inputs(inputs, "kvevict_policy_step"));
  });
}

kvevict_status kvevict_policy_origin(kvevict_policy* policy, const kvevict_step_inputs* inputs) {
  return guard([&] {
    check_live(policy, "kvevict_policy_origin");
    policy->impl->on_origin(step_inputs(inputs, "kvevict_policy_origin"));
  });
}

kvevict_status kvevict_policy_evict(kvevict_policy* policy, int64_t budget, uint32_t* victims,
                                    size_t capacity, size_t* victim_count) {
  return guard([&] {
    check_live(policy, "kvevict_policy_evict");
    need(victim_count, "kvevict_policy_evict", "victim_count");
    *victim_count = 0;
    const std::size_t kept = policy->impl->kept_count();
    if (capacity < kept) {
      throw ArgumentError(fmt::format(
          "kvevict_policy_evict: the victim buffer holds {} but up to {} positions may go; nothing "
          "was evicted",
          capacity, kept));
    }
    if (kept > 0) need(victims, "kvevict_policy_evict", "victims");
    const auto chosen = policy->impl->evict(budget);
    std::copy(chosen.begin(), chosen.end(), victims);
    *victim_count = chosen.size();
  });
}

kvevict_status kvevict_policy_kept_count(const kvevict_policy* policy, size_t* count) {
  return guard([&] {
    check_live(policy, "kvevict_policy_kept_count");
    need(count, "kvevict_policy_kept_count", "count");
    *count = policy->impl->kept_count();
  });
}

kvevict_status kvevict_policy_memory_bytes(const kvevict_policy* policy, size_t* bytes) {
  return guard([&] {
    check_live(policy, "kvevict_policy_memory_bytes");
    need(bytes, "kvevict_policy_memory_bytes", "bytes");
    *bytes = policy->impl->memory_bytes();
  });
}

kvevict_status kvevict_policy_name(const kvevict_policy* policy, const char** name) {
  return guard([&] {
    check_live(policy, "kvevict_policy_name");
    need(name, "kvevict_policy_name", "name");
    *name = policy->info->name.c_str();
  });
}

kvevict_status kvevict_policy_query(const kvevict_policy* policy, const char* query,
                                    const int64_t* args, size_t arg_count, double* result) {
  return guard([&] {
    check_live(policy, "kvevict_policy_query");
    need(query, "kvevict_policy_query", "query");
    need(result, "kvevict_policy_query", "result");
    const kvevict::QueryInfo* q = policy->info->find_query(query);
    if (q == nullptr) {
      throw ArgumentError(fmt::format("kvevict_policy_query: {} has no query '{}'",
                                      policy->info->name, query));
    }
    if (arg_count != q->arity) {
      throw ArgumentError(fmt::format("kvevict_policy_query: {} takes {} argument(s), got {}", query,
                                      q->arity, arg_count));
    }
    if (arg_count > 0) need(args, "kvevict_policy_query", "args");
    *result = q->call(*policy->impl, std::span<const std::int64_t>(args, arg_count));
  });
}

kvevict_status kvevict_prefill(const char* policy, const kvevict_param* params, size_t param_count,
                               int64_t budget, const float* window, size_t rows, size_t length,
                               uint32_t* kept, size_t capacity, size_t* kept_count) {
  return guard([&] {
    constexpr const char* kWhat = "kvevict_prefill";
    need(policy, kWhat, "policy");
    need(kept_count, kWhat, "kept_count");
    const kvevict::ParamMap map = param_map(params, param_count, kWhat);
    if (rows != 0 && length > SIZE_MAX / sizeof(float) / rows) {
      throw kvevict::InputError(fmt::format("prefill: a window of {} rows by {} positions is too large", rows, length));
    }
    if (rows * length > 0) need(window, kWhat, "window");
    const std::span<const float> weights(window, rows * length);
    const auto result = kvevict::prefill(policy, map, budget, {weights, rows, length});
    if (capacity < result.size()) {
      throw ArgumentError(fmt::format("{}: capacity ({}) is smaller than the {} positions kept", kWhat,
                                      capacity, result.size()));
    }
    if (!result.empty()) need(kept, kWhat, "kept");
    std::copy(result.begin(), result.end(), kept);
    *kept_count = result.size();
  });
}

kvevict_status kvevict_rope_neox(float* x, size_t head_dim, int64_t pos, double base) {
  return guard([&] {
    if (head_dim > 0) need(x, "kvevict_rope_neox", "x");
    kvevict::rope_neox(std::span<float>(x, head_dim), pos, base);
  });
}

kvevict_status kvevict_attention_from_keys(const float* queries, size_t groups, const float* keys, size_t n,
                                           size_t head_dim, float scale, float* out, float* scratch) {
  return guard([&] {
    constexpr const char* kWhat = "kvevict_attention_from_keys";
    if (groups != 0 && head_dim > SIZE_MAX / sizeof(float) / groups) {
      throw ArgumentError(fmt::format("{}: {} query heads of {} floats is too large", kWhat, groups, head_dim));
    }
    if (head_dim != 0 && n > SIZE_MAX / sizeof(float) / head_dim) {
      throw ArgumentError(fmt::format("{}: {} keys of {} floats is too large", kWhat, n, head_dim));
    }
    if (groups * head_dim > 0) need(queries, kWhat, "queries");
    if (n * head_dim > 0) need(keys, kWhat, "keys");
    if (n > 0) {
      need(out, kWhat, "out");
      need(scratch, kWhat, "scratch");
    }
    kvevict::attention_from_keys(std::span<const float>(queries, groups * head_dim), groups,
                                 std::span<const float>(keys, n * head_dim), n, head_dim, scale,
                                 std::span<float>(out, n), std::span<float>(scratch, n));
  });
}

}  // extern "C"

// ---- paged caches (docs/paged.md) ------------------------------------------

namespace {

kvevict::Attention attention_of(const float* attn, size_t len) {
  if (attn == nullptr) return std::nullopt;
  return std::span<const float>(attn, len);
}

// Copies `values` into out[0 .. capacity), refusing a buffer that is too small.
template <class T>
void copy_out(std::span<const T> values, uint32_t* out, size_t capacity, size_t* count, const char* what) {
  need(count, what, "count");
  *count = 0;
  if (capacity < values.size()) {
    throw ArgumentError(fmt::format("{}: the buffer holds {} but {} values are there", what, capacity, values.size()));
  }
  if (!values.empty()) need(out, what, "out");
  std::copy(values.begin(), values.end(), out);
  *count = values.size();
}

}  // namespace

extern "C" {

kvevict_status kvevict_block_evictor_create(const char* policy, const kvevict_param* params, size_t param_count,
                                            const kvevict_block_params* block, kvevict_block_evictor** out) {
  return guard([&] {
    need(out, "kvevict_block_evictor_create", "out");
    *out = nullptr;
    need(policy, "kvevict_block_evictor_create", "policy");
    need(block, "kvevict_block_evictor_create", "block");
    kvevict::BlockParams bp;
    bp.block_size = block->block_size;
    bp.start_blocks = block->start_blocks;
    bp.recent_blocks = block->recent_blocks;
    bp.block_budget = block->block_budget;
    if (block->block_score != nullptr) bp.score = kvevict::parse_block_score(block->block_score);
    auto handle = std::make_unique<kvevict_block_evictor>();
    handle->impl = std::make_unique<kvevict::BlockEvictor>(
        policy, param_map(params, param_count, "kvevict_block_evictor_create"), bp);
    remember(handle.get());
    *out = handle.release();
  });
}

kvevict_status kvevict_block_evictor_destroy(kvevict_block_evictor* evictor) {
  return kvevict::c_api::destroy_handle(evictor, "kvevict_block_evictor_destroy");
}

kvevict_status kvevict_block_evictor_on_decode_step(kvevict_block_evictor* evictor, int64_t pos, const float* attn,
                                                    size_t attn_len) {
  return guard([&] {
    check_live(evictor, "kvevict_block_evictor_on_decode_step");
    evictor->impl->on_decode_step(pos, attention_of(attn, attn_len));
  });
}

kvevict_status kvevict_block_evictor_step(kvevict_block_evictor* evictor, int64_t pos,
                                          const kvevict_step_inputs* inputs) {
  return guard([&] {
    check_live(evictor, "kvevict_block_evictor_step");
    evictor->impl->on_step(pos, step_inputs(inputs, "kvevict_block_evictor_step"));
  });
}

kvevict_status kvevict_block_evictor_origin(kvevict_block_evictor* evictor, const kvevict_step_inputs* inputs) {
  return guard([&] {
    check_live(evictor, "kvevict_block_evictor_origin");
    evictor->impl->on_origin(step_inputs(inputs, "kvevict_block_evictor_origin"));
  });
}

kvevict_status kvevict_block_evictor_evict(kvevict_block_evictor* evictor, int64_t block_budget, uint32_t* blocks,
                                           size_t capacity, size_t* count) {
  return guard([&] {
    const char* what = "kvevict_block_evictor_evict";
    check_live(evictor, what);
    need(count, what, "count");
    *count = 0;
    const std::size_t held = evictor->impl->block_count();
    if (capacity < held) {
      throw ArgumentError(fmt::format("{}: the block buffer holds {} but up to {} blocks may go; nothing was evicted",
                                      what, capacity, held));
    }
    if (held > 0) need(blocks, what, "blocks");
    copy_out(evictor->impl->evict_blocks(block_budget), blocks, capacity, count, what);
  });
}

kvevict_status kvevict_block_evictor_removed_before(const kvevict_block_evictor* evictor, uint32_t* out,
                                                    size_t capacity, size_t* count) {
  return guard([&] {
    check_live(evictor, "kvevict_block_evictor_removed_before");
    copy_out(evictor->impl->removed_before(), out, capacity, count, "kvevict_block_evictor_removed_before");
  });
}

kvevict_status kvevict_block_evictor_evicted_positions(const kvevict_block_evictor* evictor, uint32_t* out,
                                                       size_t capacity, size_t* count) {
  return guard([&] {
    check_live(evictor, "kvevict_block_evictor_evicted_positions");
    copy_out(evictor->impl->evicted_positions(), out, capacity, count, "kvevict_block_evictor_evicted_positions");
  });
}

kvevict_status kvevict_block_evictor_counts(const kvevict_block_evictor* evictor, size_t* positions, size_t* blocks) {
  return guard([&] {
    check_live(evictor, "kvevict_block_evictor_counts");
    if (positions != nullptr) *positions = evictor->impl->kept_count();
    if (blocks != nullptr) *blocks = evictor->impl->block_count();
  });
}

kvevict_status kvevict_layer_budget_create(const char* policy, const kvevict_param* params, size_t param_count,
                                           int64_t heads, int64_t layer_budget, int64_t head_floor,
                                           kvevict_layer_budget** out) {
  return guard([&] {
    need(out, "kvevict_layer_budget_create", "out");
    *out = nullptr;
    need(policy, "kvevict_layer_budget_create", "policy");
    auto handle = std::make_unique<kvevict_layer_budget>();
    handle->impl = std::make_unique<kvevict::LayerBudget>(
        policy, param_map(params, param_count, "kvevict_layer_budget_create"),
        kvevict::LayerBudgetParams{heads, layer_budget, head_floor});
    remember(handle.get());
    *out = handle.release();
  });
}

kvevict_status kvevict_layer_budget_destroy(kvevict_layer_budget* layer) {
  return kvevict::c_api::destroy_handle(layer, "kvevict_layer_budget_destroy");
}

kvevict_status kvevict_layer_budget_on_decode_step(kvevict_layer_budget* layer, size_t head, int64_t pos,
                                                   const float* attn, size_t attn_len) {
  return guard([&] {
    check_live(layer, "kvevict_layer_budget_on_decode_step");
    layer->impl->on_decode_step(head, pos, attention_of(attn, attn_len));
  });
}

kvevict_status kvevict_layer_budget_step(kvevict_layer_budget* layer, size_t head, int64_t pos,
                                         const kvevict_step_inputs* inputs) {
  return guard([&] {
    check_live(layer, "kvevict_layer_budget_step");
    layer->impl->on_step(head, pos, step_inputs(inputs, "kvevict_layer_budget_step"));
  });
}

kvevict_status kvevict_layer_budget_origin(kvevict_layer_budget* layer, size_t head,
                                           const kvevict_step_inputs* inputs) {
  return guard([&] {
    check_live(layer, "kvevict_layer_budget_origin");
    layer->impl->on_origin(head, step_inputs(inputs, "kvevict_layer_budget_origin"));
  });
}

kvevict_status kvevict_layer_budget_evict(kvevict_layer_budget* layer, int64_t layer_budget, size_t* evicted) {
  return guard([&] {
    check_live(layer, "kvevict_layer_budget_evict");
    need(evicted, "kvevict_layer_budget_evict", "evicted");
    *evicted = layer->impl->evict(layer_budget);
  });
}

kvevict_status kvevict_layer_budget_victims(const kvevict_layer_budget* layer, size_t head, uint32_t* out,
                                            size_t capacity, size_t* count) {
  return guard([&] {
    check_live(layer, "kvevict_layer_budget_victims");
    copy_out(layer->impl->victims(head), out, capacity, count, "kvevict_layer_budget_victims");
  });
}

kvevict_status kvevict_layer_budget_kept_count(const kvevict_layer_budget* layer, size_t head, size_t* count) {
  return guard([&] {
    check_live(layer, "kvevict_layer_budget_kept_count");
    need(count, "kvevict_layer_budget_kept_count", "count");
    *count = layer->impl->kept_count(head);
  });
}

}  // extern "C"
