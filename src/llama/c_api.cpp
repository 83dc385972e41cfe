// The C API of the llama.cpp adapter (include/kvevict_llama.h): handles,
// status codes and the thread's last error as the core's C API has them
// (core/c_api_internal.h), around LlamaPolicy.
#include "kvevict_llama.h"

#include <algorithm>
#include <memory>
#include <span>

#include "core/c_api_internal.h"
#include "kvevict/llama/llama_policy.h"

struct kvevict_llama_policy {
  std::unique_ptr<kvevict::LlamaPolicy> impl;
};

namespace {

using kvevict::c_api::check_live;
using kvevict::c_api::guard;
using kvevict::c_api::need;

kvevict_status copy_out(std::span<const kvevict::Position> from, std::uint32_t* out, std::size_t capacity,
                        std::size_t* count, const char* what) {
  return guard([&] {
    need(count, what, "count");
    *count = from.size();
    if (from.size() > capacity) {
      throw kvevict::c_api::ArgumentError(std::string(what) + ": " + std::to_string(from.size()) +
                                          " positions do not fit a capacity of " + std::to_string(capacity));
    }
    if (!from.empty()) need(out, what, "out");
    std::copy(from.begin(), from.end(), out);
  });
}

}  // namespace

extern "C" {

void kvevict_llama_options_init(kvevict_llama_options* options) {
  if (options == nullptr) return;
  *options = kvevict_llama_options{nullptr, nullptr, 0, 256, 1, 0, 1, 0};
}

kvevict_status kvevict_llama_check_release(void) { return guard([] { kvevict::check_llama_cpp_release(); }); }

kvevict_status kvevict_llama_policy_create(const llama_model* model, const kvevict_llama_options* options,
                                           kvevict_llama_policy** out) {
  return guard([&] {
    const char* what = "kvevict_llama_policy_create";
    need(model, what, "model");
    need(options, what, "options");
    need(options->policy, what, "options->policy");
    need(out, what, "out");
    kvevict::LlamaPolicyOptions o;
    o.policy = options->policy;
    o.params = kvevict::c_api::param_map(options->params, options->param_count, what);
    o.budget = options->budget;
    o.sequences = options->sequences;
    o.context = options->context;
    o.batch = options->batch;
    o.cache_positions = options->cache_positions != 0;
    auto handle = std::make_unique<kvevict_llama_policy>();
    handle->impl = std::make_unique<kvevict::LlamaPolicy>(kvevict::llama_shape(model), o);
    *out = handle.release();
    kvevict::c_api::remember(*out);
  });
}

kvevict_status kvevict_llama_policy_destroy(kvevict_llama_policy* policy) {
  if (policy == nullptr) return KVEVICT_OK;
  return guard([&] {
    if (!kvevict::c_api::forget(policy)) {
      throw kvevict::c_api::ArgumentError("kvevict_llama_policy_destroy: not a live policy (destroyed twice?)");
    }
    delete policy;
  });
}

bool kvevict_llama_policy_observe(ggml_tensor* tensor, bool ask, void* policy) {
  auto* p = static_cast<kvevict_llama_policy*>(policy);
  if (p == nullptr || tensor == nullptr) return false;
  try {
    return kvevict::LlamaPolicy::observe(tensor, ask, p->impl.get());
  } catch (...) {  // the scheduler is C: nothing may cross it; after_decode then finds the layer missing
    return false;
  }
}

kvevict_status kvevict_llama_policy_after_decode(kvevict_llama_policy* policy, llama_context* ctx,
                                                 const int32_t* seqs, const int32_t* positions, size_t count) {
  return guard([&] {
    const char* what = "kvevict_llama_policy_after_decode";
    check_live(policy, what);
    need(ctx, what, "ctx");
    if (count > 0) {
      need(seqs, what, "seqs");
      need(positions, what, "positions");
    }
    policy->impl->after_decode(ctx, std::span<const std::int32_t>(seqs, count),
                               std::span<const std::int32_t>(positions, count));
  });
}

kvevict_status kvevict_llama_policy_next_position(const kvevict_llama_policy* policy, uint32_t seq, int32_t* out) {
  return guard([&] {
    const char* what = "kvevict_llama_policy_next_position";
    check_live(policy, what);
    need(out, what, "out");
    *out = policy->impl->next_position(seq);
  });
}

kvevict_status kvevict_llama_policy_victims(const kvevict_llama_policy* policy, uint32_t seq, uint32_t* out,
                                            size_t capacity, size_t* count) {
  std::span<const kvevict::Position> from;
  if (const kvevict_status s = guard([&] {
        check_live(policy, "kvevict_llama_policy_victims");
        from = policy->impl->victims(seq);
      });
      s != KVEVICT_OK) {
    return s;
  }
  return copy_out(from, out, capacity, count, "kvevict_llama_policy_victims");
}

kvevict_status kvevict_llama_policy_held(const kvevict_llama_policy* policy, uint32_t seq, uint32_t* out,
                                         size_t capacity, size_t* count) {
  std::span<const kvevict::Position> from;
  if (const kvevict_status s = guard([&] {
        check_live(policy, "kvevict_llama_policy_held");
        from = policy->impl->held(seq);
      });
      s != KVEVICT_OK) {
    return s;
  }
  return copy_out(from, out, capacity, count, "kvevict_llama_policy_held");
}

kvevict_status kvevict_llama_policy_reset(kvevict_llama_policy* policy, uint32_t seq) {
  return guard([&] {
    check_live(policy, "kvevict_llama_policy_reset");
    policy->impl->reset(seq);
  });
}

}  // extern "C"
