#include "kvevict/model/eviction/compress.h"

#include <algorithm>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/eviction/decoder_policies.h"

namespace kvevict {

PrefillCompressor::PrefillCompressor(const ModelConfig& config, const RunSpec& spec, std::uint32_t prompt,
                                     std::uint32_t window, std::uint32_t chunk)
    : config_(config), spec_(spec), prompt_(prompt), window_(std::min(window, prompt)),
      chunk_(chunk == 0 ? prompt : std::min(chunk, prompt)) {
  if (prompt < 1) throw ContractError("prefill compression: the prompt is empty");
  rows_.assign(config.head_count(), {});
  if ((find_policy(spec.policy).signals & kSignalQueries) != 0) {
    queries_.assign(config.head_count(), std::vector<float>(std::size_t{prompt} * config.group() * config.head_dim()));
  }
  for (std::uint32_t h = 0; h < config.head_count(); ++h) {
    ParamMap params = head_params(spec_, config_, h / config_.kv_heads);
    std::erase_if(params, [](const auto& kv) { return kv.first == "budget"; });
    params_.push_back(std::move(params));
  }
}

bool PrefillCompressor::after_step(Decoder& decoder, std::uint32_t i) {
  if (i >= prompt_) return false;
  for (std::uint32_t h = 0; h < queries_.size(); ++h) {
    const std::span<const float> q = decoder.queries(h);
    std::copy(q.begin(), q.end(), queries_[h].begin() + static_cast<std::ptrdiff_t>(std::size_t{i} * q.size()));
  }
  const std::uint32_t chunk_begin = i / chunk_ * chunk_;
  const std::uint32_t chunk_end = std::min(prompt_, chunk_begin + chunk_);
  const std::uint32_t rows = std::min(window_, chunk_end - chunk_begin);
  if (i + rows >= chunk_end) {
    // The row for query i: its weights over the positions its cache holds
    // (itself the last), ascending; nothing is dropped within a chunk, so
    // each row is a prefix of the chunk's last row.
    for (std::uint32_t h = 0; h < config_.head_count(); ++h) {
      const std::span<const float> w = decoder.attention(h);
      rows_[h].insert(rows_[h].end(), w.begin(), w.end());
    }
  }
  if (i + 1 != chunk_end) return false;
  compress(decoder, rows);
  return i + 1 == prompt_;
}

std::uint32_t PrefillCompressor::next_read(std::uint32_t i) const noexcept {
  if (i >= prompt_) return kNone;
  if (!queries_.empty()) return i;  // every byte's queries are kept
  // As after_step: the chunk's last `rows` bytes record a row, its last compresses.
  const std::uint32_t chunk_begin = i / chunk_ * chunk_;
  const std::uint32_t chunk_end = std::min(prompt_, chunk_begin + chunk_);
  const std::uint32_t rows = std::min(window_, chunk_end - chunk_begin);
  return std::max(i, chunk_end - std::max<std::uint32_t>(rows, 1));
}

void PrefillCompressor::compress(Decoder& decoder, std::uint32_t rows) {
  const bool reads_keys = (find_policy(spec_.policy).signals & kSignalKey) != 0;
  for (std::uint32_t h = 0; h < config_.head_count(); ++h) {
    const std::span<const Position> held = decoder.held(h);
    const std::size_t length = held.size();
    if (reads_keys) {
      // A key-aware policy scores the held keys and values themselves; the
      // attention rows are not needed.
      const std::size_t d = config_.head_dim();
      const auto [keys, values] = decoder.held_rows(h);
      // The held positions' queries, when the policy reads them (each held
      // position's own row: a position's queries are those of its step).
      std::size_t width = 0;
      held_queries_.clear();
      if (!queries_.empty()) {
        width = std::size_t{config_.group()} * d;
        for (const Position p : held) {
          const auto from = queries_[h].begin() + static_cast<std::ptrdiff_t>(std::size_t{p} * width);
          held_queries_.insert(held_queries_.end(), from, from + static_cast<std::ptrdiff_t>(width));
        }
      }
      keep(decoder, h, prefill_signals(spec_.policy, params_[h], spec_.budget,
                                       PrefillSignals{.length = length,
                                                      .head_dim = d,
                                                      .keys = {keys, length * d},
                                                      .values = {values, length * d},
                                                      .queries = held_queries_,
                                                      .query_width = width}));
      continue;
    }
    // kvevict::prefill's layout: rows x length, each row its weights then 0.
    matrix_.assign(std::size_t{rows} * length, 0.0F);
    std::size_t from = 0;
    for (std::uint32_t r = 0; r < rows; ++r) {
      const std::size_t n = decoder.attention(h).size() - (rows - 1 - r);  // the caches grow by one per row
      std::copy_n(rows_[h].begin() + static_cast<std::ptrdiff_t>(from), n,
                  matrix_.begin() + static_cast<std::ptrdiff_t>(r * length));
      from += n;
    }
    keep(decoder, h, prefill(spec_.policy, params_[h], spec_.budget, PrefillWindow{matrix_, rows, length}));
  }
}

void PrefillCompressor::keep(Decoder& decoder, std::uint32_t h, const std::vector<Position>& kept) {
  const std::span<const Position> held = decoder.held(h);
  drop_.clear();
  std::size_t k = 0;
  for (std::size_t j = 0; j < held.size(); ++j) {  // kept holds indices into `held`, ascending
    if (k < kept.size() && kept[k] == j) {
      ++k;
    } else {
      drop_.push_back(held[j]);
    }
  }
  decoder.drop(h, drop_);
  rows_[h].clear();
}

}  // namespace kvevict
