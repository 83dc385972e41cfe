// The vector runner's block and layer-budget cases (docs/paged.md, "Vector
// fields"): a case with a "blocks" object replays through a BlockEvictor, one
// with a "layer" object through a LayerBudget.
#pragma once

#include <functional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kvevict/core/params.h"
#include "kvevict/core/registry.h"

namespace kvevict::detail {

// A malformed block or layer field or step; the runner reports it as malformed.
class PagedMalformed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds the subject of a case that has "blocks" or "layer" and returns the
// function that executes one of its steps (returning its result, null for
// onDecodeStep); an empty function when the case has neither.
std::function<nlohmann::json(const nlohmann::json& step)> paged_subject(const PolicyInfo& info, const ParamMap& params,
                                                                        const nlohmann::json& vector_case);

}  // namespace kvevict::detail
