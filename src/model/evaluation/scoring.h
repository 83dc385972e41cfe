// What perplexity and the stream share: scoring a prediction, and decoders
// that borrow the caller's model. Internal to the model library.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>

#include "kvevict/model/decoder/model.h"

namespace kvevict::detail {

// -log p(next) in nats from float32 logits, in float64.
inline double negative_log_likelihood(std::span<const float> logits, Token next) {
  double top = logits[0];
  for (const float l : logits) top = std::max(top, static_cast<double>(l));
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - top);
  return std::log(sum) + top - static_cast<double>(logits[next]);
}

// The decoders share the caller's model without owning it.
inline std::shared_ptr<const Model> shared_view(const Model& model) {
  return std::shared_ptr<const Model>(std::shared_ptr<const Model>{}, &model);
}

}  // namespace kvevict::detail
