// `kvevict serve-bench` (docs/serving.md): sequences decoding together over
// one block pool (batch.h), measured. Every sequence reads the same first
// `shared_prefix` bytes of the text, then bytes of its own, in lockstep (one
// step per sequence per tick); the store is measured, not computed: peak pool
// blocks, what prefix sharing saved, positions held, evictions and speed.
// Each sequence runs in one of two ways:
//   decode  (chunk 0): its policy evicts at every step past the budget,
//           per token or, in block mode, whole blocks (BlockEvictor);
//   chunked (chunk C): its first `prompt` bytes are read in chunks of C and
//           every cache is compressed to the budget after each chunk
//           (PrefillCompressor, compress.h); the rest runs without eviction.
//           One-shot compression is C = prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/harness.h"
#include "kvevict/eval/paged.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/model/decoder/model.h"

namespace kvevict {

// One run.
struct ServeRun {
  std::string policy;  // empty: the full cache
  std::int64_t budget = 0;
  bool blocks = false;  // block mode: whole blocks of block_size evicted
  bool share_prefix = true;
  std::uint32_t sequences = 1;
  std::uint32_t chunk = 0;  // 0: evict while decoding
};

struct ServeBenchRequest {
  std::vector<ServeRun> runs;         // in order; serve_runs() makes the usual grid
  std::uint32_t shared_prefix = 512;  // tokens every sequence starts with (bytes for kvevict-tiny)
  // Tokens each sequence reads (0: the model's context). Past the context
  // only when every run evicts while decoding (its policy holds each cache
  // within the context; the full cache and chunked runs stop there); the
  // pool is then sized for the context, not the tokens.
  std::uint32_t tokens = 0;
  PositionMode positions = PositionMode::kOriginal;  // where kept keys sit in rotary space (rope.h)
  std::uint32_t prompt = 0;           // chunked runs: bytes read as the prompt (0: all `tokens`)
  std::uint32_t window = 32;          // chunked runs: attention rows each compression scores from
  std::uint32_t block_size = 16;
  std::uint64_t pool_blocks = 0;      // 0: every cache of every sequence at `tokens` positions
  ParamMap overrides;                 // "policy.param" or "param", as compare's
  // Which caches of a sequence share its budget (paged.h): each its own, a
  // layer's KV heads, or every cache (the same positions, as llama.cpp's
  // cells). Token-mode runs that evict while decoding only.
  Granularity granularity = Granularity::kHead;
  ProgressFn progress;                // (ticks done, ticks in all runs)
};

// The grid: every sequence count x policy ("none" is the full cache) x mode
// ("token", "block") x sharing x chunk, in that nesting order. A chunked run
// is made once (token mode); the full cache once per sequence count,
// sharing and chunk 0. Throws ParameterError for an unknown mode.
std::vector<ServeRun> serve_runs(const std::vector<std::uint32_t>& sequences, const std::vector<std::string>& policies,
                                 std::int64_t budget, const std::vector<std::string>& modes,
                                 const std::vector<bool>& sharing, const std::vector<std::uint32_t>& chunks);

// "a,b", "all" or "none" (the full cache), mixed: the policy names in
// order, "none" kept as it is. Throws ParameterError for an empty item or an
// unknown name. The tool, Python and Node read their policy lists with it.
std::vector<std::string> serve_policy_names(std::string_view list);

struct ServeRow {
  ServeRun run;
  std::string granularity;  // "layer" or "sequence" when shared (empty: head)
  std::uint32_t shared_prefix = 0;
  std::uint32_t tokens = 0;
  std::uint32_t prompt = 0;  // chunked runs
  std::uint32_t block_size = 0;
  std::uint64_t pool_blocks = 0;
  std::uint64_t peak_blocks = 0;        // pool blocks in use at once, the most
  std::uint64_t blocks_saved = 0;       // block references beyond the blocks in use, the most at once
  std::uint64_t shared_blocks = 0;      // times a sequence took a published block instead of its own
  std::uint64_t copied_blocks = 0;      // shared blocks copied before a sequence changed them
  std::uint64_t peak_positions = 0;     // positions held by every cache of every sequence at once, the most
  std::uint64_t peak_cache_positions = 0;  // the most any one cache held
  std::uint64_t positions_held = 0;     // at the end, before the sequences leave
  std::uint64_t evicted = 0;
  std::uint64_t leaked_blocks = 0;      // blocks still in use once every sequence left (0 unless a bug)
  double tokens_per_second = 0.0;
  double seconds = 0.0;
};

// Every run of `request`, in order. Everything is checked before any work:
// throws ParameterError for a bad policy, budget, parameter or size (a chunk
// larger than the capacity, a prefix longer than the tokens), InputError for
// a text too short for the sequences (it names the bytes needed).
std::vector<ServeRow> serve_bench(const std::shared_ptr<const Model>& model, std::span<const std::uint8_t> text,
                                  const ServeBenchRequest& request);

// The row's fields in output order (the tool's JSON and CSV, the bindings).
std::span<const FieldInfo> serve_row_schema();
void for_each_field(const ServeRow& row, RowVisitor& visitor);
// The command's document (kvevict/eval/json.h): {"command": "serve-bench",
// "model", "rows": [row objects]}.
std::string serve_json(const std::vector<ServeRow>& rows, const JsonSource& source, int indent = 2);

}  // namespace kvevict
