// The core's C API (include/kvevict.h): a thin shell over the policies and the
// registry. The evaluation's and the model's C APIs (src/eval/c_api.cpp,
// src/model/c_api.cpp) share its handle table and error handling
// (c_api_internal.h). Every entry point catches everything, so no exception
// crosses into C; handles are checked against a table of live ones, so a
// destroyed or foreign handle is an error, not a crash (unless a later create
// happened to reuse its address).
#include "kvevict.h"

#include <mutex>
#include <unordered_set>

#include <fmt/format.h>

#include "c_api_internal.h"

using kvevict::c_api::ArgumentError;
using kvevict::c_api::check_live;
using kvevict::c_api::guard;
using kvevict::c_api::need;
using kvevict::c_api::param_map;
using kvevict::c_api::remember;

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
  if (policy == nullptr) return KVEVICT_OK;
  return guard([&] {
    if (!kvevict::c_api::forget(policy)) {
      throw ArgumentError("kvevict_policy_destroy: the handle is not a live one (destroyed already?)");
    }
    delete policy;
  });
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

}  // extern "C"
