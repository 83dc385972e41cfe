// Compression once, after a prefill: a decoder reads a prompt with its full
// cache while this collects each cache's attention rows over the last
// `window` prompt positions; after the prompt's last byte every cache keeps
// what kvevict::prefill (core/prefill.h) chooses and drops the rest. Used by
// `kvevict tasks` (moments prefill and prefill-query) and by perplexity with
// a prefill (ModelRunOptions::prefill).
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/model/model.h"

namespace kvevict {

class PrefillCompressor {
 public:
  // Compresses after `prompt` bytes (>= 1) to spec.budget per cache.
  PrefillCompressor(const ModelConfig& config, const RunSpec& spec, std::uint32_t prompt, std::uint32_t window);

  // Call after each step of prompt byte i (0-based). Records the row when i
  // is in the window; after the last prompt byte, compresses the decoder's
  // caches (which must have no policies). Returns true on that step.
  bool after_step(Decoder& decoder, std::uint32_t i);

 private:
  const ModelConfig& config_;
  const RunSpec& spec_;
  std::uint32_t prompt_;
  std::uint32_t window_;
  std::vector<std::vector<float>> rows_;  // per cache: window x prompt, row-major
};

}  // namespace kvevict
