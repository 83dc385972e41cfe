// The context a model runs at: what the file says it was trained on, capped
// (ModelOptions::kDefaultContextCap) or as the user asked; every builder ends with it.
#include <string>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "model/arch/model_builder.h"

namespace kvevict {

void apply_context(ModelConfig& c, const ModelOptions& options, const std::string& file) {
  c.trained_context = c.context;
  if (options.context > c.context) {
    throw InputError(fmt::format("{}: --context {} is over the {} positions the model was trained on", file,
                                 options.context, c.context));
  }
  if (options.context != 0) {
    c.context = options.context;
  } else if (c.context > ModelOptions::kDefaultContextCap) {
    c.context = ModelOptions::kDefaultContextCap;
  }
  if (c.context < 2) {
    throw InputError(fmt::format("{}: --context {} leaves nothing to predict (at least 2)", file, c.context));
  }
}

}  // namespace kvevict
