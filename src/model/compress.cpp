#include "kvevict/model/compress.h"

#include <algorithm>

#include "kvevict/core/errors.h"
#include "kvevict/core/prefill.h"
#include "kvevict/model/perplexity.h"

namespace kvevict {

PrefillCompressor::PrefillCompressor(const ModelConfig& config, const RunSpec& spec, std::uint32_t prompt,
                                     std::uint32_t window)
    : config_(config), spec_(spec), prompt_(prompt), window_(std::min(window, prompt)) {
  if (prompt < 1) throw ContractError("prefill compression: the prompt is empty");
  rows_.assign(config.head_count(), {});
}

bool PrefillCompressor::after_step(Decoder& decoder, std::uint32_t i) {
  if (i >= prompt_) return false;
  if (i + window_ >= prompt_) {
    // Row for query i: its weights over positions 0 ... i (itself included;
    // the cache is still full), zero after it: kvevict::prefill's layout.
    for (std::uint32_t h = 0; h < config_.head_count(); ++h) {
      const std::span<const float> w = decoder.attention(h);
      std::vector<float>& out = rows_[h];
      const std::size_t begin = out.size();
      out.resize(begin + prompt_, 0.0F);
      std::copy(w.begin(), w.end(), out.begin() + static_cast<std::ptrdiff_t>(begin));
    }
  }
  if (i + 1 != prompt_) return false;
  for (std::uint32_t h = 0; h < config_.head_count(); ++h) {
    ParamMap params = head_params(spec_, config_, h / config_.kv_heads);
    params.erase(std::remove_if(params.begin(), params.end(), [](const auto& kv) { return kv.first == "budget"; }),
                 params.end());
    const std::vector<Position> kept =
        prefill(spec_.policy, params, spec_.budget, PrefillWindow{rows_[h], window_, prompt_});
    std::vector<Position> drop;
    for (const Position p : decoder.held(h)) {
      if (!std::binary_search(kept.begin(), kept.end(), p)) drop.push_back(p);
    }
    decoder.drop(h, drop);
  }
  return true;
}

}  // namespace kvevict
