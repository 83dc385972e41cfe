#include "kvevict/model/eviction/decoder_policies.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict {

namespace {

bool names_param(const ParamMap& params, std::string_view key) {
  return std::any_of(params.begin(), params.end(), [&](const auto& kv) { return kv.first == key; });
}

}  // namespace

std::unique_ptr<LayerBudget> make_layer_budget(const RunSpec& spec, const ModelConfig& config, std::uint32_t layer,
                                               const PagedOptions& paged) {
  LayerBudgetParams params;
  params.heads = config.kv_heads;
  params.layer_budget = layer_budget_of(spec.budget, config.kv_heads, paged);
  params.head_floor = paged.head_floor;
  ParamMap given = head_params(spec, config, layer);
  std::erase_if(given, [](const auto& kv) { return kv.first == "budget"; });
  return std::make_unique<LayerBudget>(find_policy(spec.policy).name, given, params);
}

void check_budget_in_context(const RunSpec& spec, const ModelConfig& config) {
  if (spec.budget < 1 || spec.budget + 1 > std::int64_t{config.context}) {
    throw ParameterError(fmt::format("{}: budget ({}) must be 1 ... {}: a cache holds the budget and the new token, "
                                     "within the model's context of {} positions",
                                     find_policy(spec.policy).name, spec.budget, std::int64_t{config.context} - 1,
                                     config.context));
  }
}

DecoderPolicies::DecoderPolicies(const RunSpec& spec, const ModelConfig& config, const PagedOptions& paged)
    : budget_(spec.budget) {
  check_budget_in_context(spec, config);
  check_paged(paged);
  if (paged.sequence_budget) {
    check_sequence_policy(spec);
    const PolicyInfo& info = find_policy(spec.policy);
    sequence_ = std::make_unique<SequenceBudget>(
        info.name, head_params(spec, config, 0),
        SequenceBudgetParams{.caches = std::int64_t{config.head_count()}, .budget = spec.budget, .keep_newest = true});
    return;
  }
  if (paged.layer_budget) {
    for (std::uint32_t l = 0; l < config.layers; ++l) layers_.push_back(make_layer_budget(spec, config, l, paged));
    return;
  }
  const std::string name(find_policy(spec.policy).name);
  for (std::uint32_t h = 0; h < config.head_count(); ++h) {
    policies_.push_back(make_run_policy(name, head_params(spec, config, h / config.kv_heads), spec.budget, paged));
  }
}

void DecoderPolicies::check_sequence_policy(const RunSpec& spec) {
  const PolicyInfo& info = find_policy(spec.policy);
  if (info.has_param("layer") && info.has_param("numLayers")) {
    throw ParameterError(fmt::format("{}: its budget differs by layer, and --granularity sequence holds the same "
                                     "positions in every layer (use head or layer)",
                                     info.name));
  }
}

void DecoderPolicies::attach(Decoder& decoder) const {
  if (sequence_ != nullptr) decoder.set_sequence_budget(sequence_.get());
  for (std::uint32_t l = 0; l < layers_.size(); ++l) {
    decoder.set_layer_budget(l, layers_[l].get(), layers_[l]->layer_budget());
  }
  for (std::uint32_t h = 0; h < policies_.size(); ++h) decoder.set_policy(h, policies_[h].get(), budget_);
}

ParamMap head_params(const RunSpec& spec, const ModelConfig& config, std::uint32_t layer) {
  const PolicyInfo& info = find_policy(spec.policy);
  ParamMap params = spec.params;
  set_param(params, "budget", spec.budget);
  if (info.has_param("layer") && info.has_param("numLayers")) {
    if (!names_param(spec.params, "numLayers")) set_param(params, "numLayers", config.layers);
    if (!names_param(spec.params, "layer")) set_param(params, "layer", layer);
  }
  // A key-aware policy's sizes are the model's: the length of a key, and the
  // query heads that share a cache.
  if (info.has_param("headDim") && !names_param(spec.params, "headDim")) set_param(params, "headDim", config.head_dim());
  if (info.has_param("groups") && !names_param(spec.params, "groups")) set_param(params, "groups", config.group());
  // Expected Attention turns its modelled queries by the model's RoPE.
  if (info.has_param("ropeBase") && !names_param(spec.params, "ropeBase")) {
    set_param(params, "ropeBase", static_cast<std::int64_t>(std::lround(config.rope_base)));
  }
  return params;
}

}  // namespace kvevict
