// The real model's C API (include/kvevict_model.h): load a model, measure
// perplexity with a policy per (layer, head). Handles and errors as in the
// core's C API (src/core/c_api.cpp, core/c_api_internal.h).
#include "kvevict_model.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "core/c_api_internal.h"
#include "kvevict/model/serving/batch.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/evaluation/stream.h"

struct kvevict_model {
  std::shared_ptr<const kvevict::Model> impl;
};

struct kvevict_batch {
  std::unique_ptr<kvevict::Batch> impl;
};

using kvevict::c_api::ArgumentError;
using kvevict::c_api::check_live;
using kvevict::c_api::guard;
using kvevict::c_api::need;
using kvevict::c_api::param_map;
using kvevict::c_api::remember;

extern "C" {

kvevict_status kvevict_model_load(const char* path, kvevict_model** out) {
  return guard([&] {
    need(out, "kvevict_model_load", "out");
    *out = nullptr;
    need(path, "kvevict_model_load", "path");
    auto handle = std::make_unique<kvevict_model>();
    handle->impl = kvevict::Model::load(path);
    remember(handle.get());
    *out = handle.release();
  });
}

kvevict_status kvevict_model_destroy(kvevict_model* model) {
  return kvevict::c_api::destroy_handle(model, "kvevict_model_destroy");
}

kvevict_status kvevict_model_get_config(const kvevict_model* model, kvevict_model_config* config) {
  return guard([&] {
    check_live(model, "kvevict_model_get_config");
    need(config, "kvevict_model_get_config", "config");
    const kvevict::ModelConfig& c = model->impl->config();
    *config = {c.vocab, c.layers, c.heads, c.width, c.ff, c.context, c.kv_heads};
  });
}

}  // extern "C"

namespace {

// A string the caller frees with kvevict_string_free (std::free).
char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// "original", "cache" or a comma-separated list of them; a bad item is a
// ParameterError naming `who` and the item.
std::vector<kvevict::PositionMode> position_modes(const char* text, const char* who) {
  std::vector<kvevict::PositionMode> out;
  for (const std::string& item : kvevict::split_list(text, std::string(who) + ": positions")) {
    try {
      out.push_back(kvevict::parse_position_mode(item));
    } catch (const kvevict::InputError& e) {
      throw kvevict::ParameterError(std::string(who) + ": " + e.what());
    }
  }
  return out;
}

// Both perplexity entry points: `who` names the function in errors; a null
// precision is fp32.
kvevict_status model_perplexity(const char* who, const kvevict_model* model, const uint8_t* text, size_t length,
                                const char* policy, int64_t budget, const kvevict_param* params, size_t param_count,
                                uint32_t max_windows, const char* kv_precision, int64_t kv_residual,
                                kvevict_perplexity_result* result, uint64_t* peak_cache_bytes,
                                const char* granularity = nullptr) {
  return guard([&] {
    check_live(model, who);
    need(result, who, "result");
    if (length > 0) need(text, who, "text");
    std::vector<kvevict::RunSpec> specs;
    if (policy != nullptr) specs.push_back({kvevict::find_policy(policy).name, param_map(params, param_count, who), budget});
    kvevict::ModelRunOptions options;
    options.max_windows = max_windows;
    if (kv_precision != nullptr) {
      options.kv.precision = kvevict::parse_precision(kv_precision, std::string(who) + ": kv_precision");
    }
    options.kv.residual = kv_residual;
    if (granularity != nullptr) options.paged.set_granularity(kvevict::parse_granularity(granularity));
    const auto rows = kvevict::perplexity(*model->impl, std::span<const std::uint8_t>(text, length), specs, options);
    const kvevict::PerplexityRow& row = rows.back();
    *result = {row.perplexity, row.bits_per_byte, row.predictions, row.evicted};
    if (peak_cache_bytes != nullptr) *peak_cache_bytes = row.peak_cache_bytes;
  });
}

}  // namespace

extern "C" {

kvevict_status kvevict_model_perplexity(const kvevict_model* model, const uint8_t* text, size_t length,
                                        const char* policy, int64_t budget, const kvevict_param* params,
                                        size_t param_count, uint32_t max_windows,
                                        kvevict_perplexity_result* result) {
  return model_perplexity("kvevict_model_perplexity", model, text, length, policy, budget, params, param_count,
                          max_windows, nullptr, -1, result, nullptr);
}

kvevict_status kvevict_model_perplexity_kv(const kvevict_model* model, const uint8_t* text, size_t length,
                                           const char* policy, int64_t budget, const kvevict_param* params,
                                           size_t param_count, uint32_t max_windows, const char* kv_precision,
                                           int64_t kv_residual, kvevict_perplexity_result* result,
                                           uint64_t* peak_cache_bytes) {
  return model_perplexity("kvevict_model_perplexity_kv", model, text, length, policy, budget, params, param_count,
                          max_windows, kv_precision, kv_residual, result, peak_cache_bytes);
}

kvevict_status kvevict_model_perplexity_granular(const kvevict_model* model, const uint8_t* text, size_t length,
                                                 const char* policy, int64_t budget, const kvevict_param* params,
                                                 size_t param_count, uint32_t max_windows, const char* granularity,
                                                 kvevict_perplexity_result* result) {
  return model_perplexity("kvevict_model_perplexity_granular", model, text, length, policy, budget, params,
                          param_count, max_windows, nullptr, -1, result, nullptr, granularity);
}

kvevict_status kvevict_model_stream(const kvevict_model* model, const uint8_t* text, size_t length,
                                    const char* policies, const int64_t* budgets, size_t budget_count,
                                    const kvevict_param* overrides, size_t override_count, const char* positions,
                                    uint32_t tokens, uint32_t segment, int full_cache, uint32_t recompute,
                                    uint32_t recompute_tokens, const char* kv_precision, int64_t kv_residual,
                                    char** json) {
  const char* const who = "kvevict_model_stream";
  return guard([&] {
    need(json, who, "json");
    *json = nullptr;
    check_live(model, who);
    if (length > 0) need(text, who, "text");
    const std::string names = policies == nullptr ? "default" : policies;
    std::vector<std::int64_t> budget_list{256, 512};
    if (budget_count > 0) {
      need(budgets, who, "budgets");
      budget_list.assign(budgets, budgets + budget_count);
    }
    kvevict::StreamRequest request;
    const kvevict::ParamMap sets = param_map(overrides, override_count, who);
    if (names != "none") request.specs = kvevict::stream_specs(names, budget_list, sets);
    if (positions != nullptr) request.positions = position_modes(positions, who);
    request.full_cache = full_cache != 0;
    request.tokens = tokens;
    request.segment = segment;
    request.recompute_window = recompute;
    request.recompute_tokens = recompute_tokens;
    kvevict::ModelRunOptions options;
    if (kv_precision != nullptr) {
      options.kv.precision = kvevict::parse_precision(kv_precision, std::string(who) + ": kv_precision");
    }
    options.kv.residual = kv_residual;
    const auto rows =
        kvevict::stream_perplexity(*model->impl, std::span<const std::uint8_t>(text, length), request, options);
    *json = copy_string(kvevict::stream_json(rows, {"stream", model->impl->path()}));
  });
}

kvevict_status kvevict_model_sink_shares(const kvevict_model* model, const uint8_t* text, size_t length,
                                         uint32_t tokens, char** json) {
  const char* const who = "kvevict_model_sink_shares";
  return guard([&] {
    need(json, who, "json");
    *json = nullptr;
    check_live(model, who);
    if (length > 0) need(text, who, "text");
    const auto shares = kvevict::sink_shares(*model->impl, std::span<const std::uint8_t>(text, length), tokens);
    *json = copy_string(kvevict::sinks_json(shares, {"stream", model->impl->path()}));
  });
}

kvevict_status kvevict_batch_create_positions(const kvevict_model* model, const kvevict_batch_options* options,
                                              const char* positions, kvevict_batch** out) {
  const char* const who = positions == nullptr ? "kvevict_batch_create" : "kvevict_batch_create_positions";
  return guard([&] {
    need(out, who, "out");
    *out = nullptr;
    check_live(model, who);
    need(options, who, "options");
    kvevict::BatchOptions o;
    o.capacity = options->capacity;
    o.block_size = options->block_size;
    o.pool_blocks = options->pool_blocks;
    o.share_prefix = options->share_prefix != 0;
    if (positions != nullptr) {
      const std::vector<kvevict::PositionMode> modes = position_modes(positions, who);
      if (modes.size() != 1) {
        throw kvevict::ParameterError(std::string(who) + ": positions '" + positions +
                                      "': give one mode, 'original' or 'cache'");
      }
      o.positions = modes.front();
    }
    auto handle = std::make_unique<kvevict_batch>();
    handle->impl = std::make_unique<kvevict::Batch>(model->impl, o);
    remember(handle.get());
    *out = handle.release();
  });
}

kvevict_status kvevict_batch_create(const kvevict_model* model, const kvevict_batch_options* options,
                                    kvevict_batch** out) {
  return kvevict_batch_create_positions(model, options, nullptr, out);
}

kvevict_status kvevict_batch_destroy(kvevict_batch* batch) {
  return kvevict::c_api::destroy_handle(batch, "kvevict_batch_destroy");
}

kvevict_status kvevict_batch_join(kvevict_batch* batch, const char* policy, int64_t budget,
                                  const kvevict_param* params, size_t param_count, int block_mode, uint64_t* id) {
  return guard([&] {
    check_live(batch, "kvevict_batch_join");
    need(id, "kvevict_batch_join", "id");
    kvevict::PagedOptions paged;
    if (policy == nullptr) {
      *id = batch->impl->join();
      return;
    }
    kvevict::RunSpec spec{std::string(kvevict::find_policy(policy).name),
                          param_map(params, param_count, "kvevict_batch_join"), budget};
    if (block_mode != 0) paged.block_size = batch->impl->pool().block_size();
    *id = batch->impl->join(&spec, paged);
  });
}

kvevict_status kvevict_batch_leave(kvevict_batch* batch, uint64_t id) {
  return guard([&] {
    check_live(batch, "kvevict_batch_leave");
    batch->impl->leave(id);
  });
}

kvevict_status kvevict_batch_step(kvevict_batch* batch, uint64_t id, uint32_t token, const float** logits,
                                  size_t* count) {
  return guard([&] {
    check_live(batch, "kvevict_batch_step");
    need(logits, "kvevict_batch_step", "logits");
    need(count, "kvevict_batch_step", "count");
    const std::span<const float> out = batch->impl->step(id, token);
    *logits = out.data();
    *count = out.size();
  });
}

kvevict_status kvevict_batch_pool_stats(const kvevict_batch* batch, kvevict_pool_stats* stats) {
  return guard([&] {
    check_live(batch, "kvevict_batch_pool_stats");
    need(stats, "kvevict_batch_pool_stats", "stats");
    const kvevict::BlockPool& pool = batch->impl->pool();
    const kvevict::PoolStats& s = pool.stats();
    *stats = {s.blocks, pool.free_blocks(), s.in_use, s.peak_in_use, s.references, s.peak_saved, s.shared, s.copies};
  });
}

}  // extern "C"
