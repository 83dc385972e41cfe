// The policies one decoder runs for a RunSpec, built (and their parameters
// checked) before any work, at the granularity `paged` names (docs/paged.md):
// one instance per cache (head; driven by a BlockEvictor in block mode), one
// LayerBudget per layer (layer), or one SequenceBudget over every cache
// (sequence).
// Perplexity, the retrieval tasks and a batch of sequences (batch.h) all
// equip their decoders through this one place.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvevict/core/layer_budget.h"
#include "kvevict/core/sequence_budget.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/paged.h"
#include "kvevict/core/params.h"
#include "kvevict/model/decoder/decoder.h"

namespace kvevict {

// Layer `layer`'s shared budget in layer mode: spec.budget x kv_heads positions.
std::unique_ptr<LayerBudget> make_layer_budget(const RunSpec& spec, const ModelConfig& config, std::uint32_t layer,
                                               const PagedOptions& paged);

// The one rule for a policy's budget on a model: 1 ... context - 1 positions
// (a cache holds the budget and the new token, within the context). At the
// context or above nothing is ever evicted: refused, naming the context,
// wherever a model runs a policy (ParameterError).
void check_budget_in_context(const RunSpec& spec, const ModelConfig& config);

class DecoderPolicies {
 public:
  DecoderPolicies() = default;  // none: the full cache
  // Checks the budget (check_budget_in_context), the granularity
  // (check_paged, check_sequence_policy) and every parameter.
  DecoderPolicies(const RunSpec& spec, const ModelConfig& config, const PagedOptions& paged);
  // Refuses (ParameterError) a policy sequence granularity cannot carry out:
  // one whose budget differs by layer (PyramidKV), where every layer holds
  // the same positions.
  static void check_sequence_policy(const RunSpec& spec);
  // Gives each cache (or layer) of `decoder` its policy; before its first step.
  void attach(Decoder& decoder) const;

 private:
  std::int64_t budget_ = 0;
  std::vector<std::unique_ptr<Policy>> policies_;
  std::vector<std::unique_ptr<LayerBudget>> layers_;
  std::unique_ptr<SequenceBudget> sequence_;
};

// Parameters each (layer, head) instance gets: `params` with the budget set,
// and for a policy with `layer` / `numLayers` parameters (PyramidKV) the head's
// true layer and the model's depth, unless `params` names them.
ParamMap head_params(const RunSpec& spec, const ModelConfig& config, std::uint32_t layer);

}  // namespace kvevict
