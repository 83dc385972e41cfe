#include "kvevict/model/decoder_policies.h"

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/perplexity.h"

namespace kvevict {

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
  if (paged.layer_budget) {
    for (std::uint32_t l = 0; l < config.layers; ++l) layers_.push_back(make_layer_budget(spec, config, l, paged));
    return;
  }
  const std::string name(find_policy(spec.policy).name);
  for (std::uint32_t h = 0; h < config.head_count(); ++h) {
    policies_.push_back(make_run_policy(name, head_params(spec, config, h / config.kv_heads), spec.budget, paged));
  }
}

void DecoderPolicies::attach(Decoder& decoder) const {
  for (std::uint32_t l = 0; l < layers_.size(); ++l) {
    decoder.set_layer_budget(l, layers_[l].get(), layers_[l]->layer_budget());
  }
  for (std::uint32_t h = 0; h < policies_.size(); ++h) decoder.set_policy(h, policies_[h].get(), budget_);
}

}  // namespace kvevict
