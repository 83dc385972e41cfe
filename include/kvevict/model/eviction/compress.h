// Compression of a prompt: a decoder reads the prompt with its full cache
// while this collects each cache's attention rows over the last `window`
// prompt positions; after the prompt's last byte every cache keeps what
// kvevict::prefill (core/prefill.h) chooses and drops the rest. Used by
// `kvevict tasks` (moments prefill and prefill-query), by perplexity with a
// prefill (ModelRunOptions::prefill) and by `kvevict serve-bench --chunk`.
//
// Chunked (chunk >= 1): the prompt is read in chunks of `chunk` bytes and
// every cache is compressed to the budget after each chunk, from the rows of
// that chunk's last `window` queries (SnapKV's setting), so no cache ever
// holds more than budget + chunk positions during the prompt. The rows are
// over the positions the cache holds, in order; a policy scores them as the
// prompt it would see if those were all there were (positional policies keep
// the first and the newest of them).
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"

namespace kvevict {

class PrefillCompressor {
 public:
  // Compresses after `prompt` bytes (>= 1) to spec.budget per cache; with
  // `chunk` >= 1 also after every `chunk` bytes before that.
  PrefillCompressor(const ModelConfig& config, const RunSpec& spec, std::uint32_t prompt, std::uint32_t window,
                    std::uint32_t chunk = 0);

  // Call after each step of prompt byte i (0-based). Records the row when i
  // is in a chunk's window; at a chunk's end (and after the last prompt
  // byte), compresses the decoder's caches (which must have no policies).
  // Returns true on the last prompt byte's step.
  bool after_step(Decoder& decoder, std::uint32_t i);

  // The first prompt byte at or after i whose after_step() reads the decoder
  // (a row, the queries, or a compression); kNone once none is left. A
  // caller that feeds tokens several a pass ends the pass there and calls
  // after_step() for that byte alone: on the bytes before it, after_step()
  // does nothing.
  static constexpr std::uint32_t kNone = 0xFFFFFFFFU;
  std::uint32_t next_read(std::uint32_t i) const noexcept;

 private:
  void compress(Decoder& decoder, std::uint32_t rows);
  // Drops from cache `h` every held position whose index is not in `kept`.
  void keep(Decoder& decoder, std::uint32_t h, const std::vector<Position>& kept);

  const ModelConfig& config_;
  const RunSpec& spec_;
  std::uint32_t prompt_;
  std::uint32_t window_;
  std::uint32_t chunk_;   // = prompt_ for one compression at the end
  std::vector<ParamMap> params_;          // per cache, without the budget
  std::vector<std::vector<float>> rows_;  // per cache: the window's rows, each as long as the row it is
  // Per cache, when the policy reads queries (Expected Attention): every
  // prompt position's queries before RoPE, [prompt x group x head_dim].
  std::vector<std::vector<float>> queries_;
  std::vector<float> held_queries_;  // the held positions' rows of queries_, for one compression
  std::vector<float> matrix_;
  std::vector<Position> drop_;
};

}  // namespace kvevict
