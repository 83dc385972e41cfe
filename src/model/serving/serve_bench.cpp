#include "kvevict/model/serving/serve_bench.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "kvevict/core/block_evictor.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/json.h"
#include "kvevict/model/serving/batch.h"
#include "kvevict/model/eviction/compress.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/decoder/model_text.h"

namespace kvevict {

std::vector<ServeRun> serve_runs(const std::vector<std::uint32_t>& sequences, const std::vector<std::string>& policies,
                                 std::int64_t budget, const std::vector<std::string>& modes,
                                 const std::vector<bool>& sharing, const std::vector<std::uint32_t>& chunks) {
  for (const std::string& m : modes) {
    if (m != "token" && m != "block") {
      throw ParameterError(fmt::format("serve-bench: mode '{}' is not token or block", m));
    }
  }
  const bool decode = std::find(chunks.begin(), chunks.end(), 0U) != chunks.end();
  if (!decode && std::find(policies.begin(), policies.end(), "none") != policies.end()) {
    throw ParameterError("serve-bench: --chunk compresses a prompt and needs a policy: the full cache runs with "
                         "--chunk 0 only");
  }
  std::vector<ServeRun> runs;
  for (const std::uint32_t n : sequences) {
    for (const std::string& policy : policies) {
      const bool full = policy == "none";
      for (const bool share : sharing) {
        for (const std::uint32_t chunk : chunks) {
          if (full && chunk != 0) continue;  // nothing to compress
          for (const std::string& mode : modes) {
            if ((full || chunk != 0) && mode != modes.front()) continue;  // one run: the mode changes nothing
            ServeRun r;
            if (!full) r.policy = std::string(find_policy(policy).name);
            r.budget = full ? 0 : budget;
            r.blocks = !full && chunk == 0 && mode == "block";
            r.share_prefix = share;
            r.sequences = n;
            r.chunk = chunk;
            runs.push_back(r);
          }
        }
      }
    }
  }
  return runs;
}

std::vector<std::string> serve_policy_names(std::string_view list) {
  std::vector<std::string> out;
  for (const std::string& item : split_list(list, "serve-bench: policies")) {
    if (item == "none") {
      out.push_back(item);
    } else {
      for (std::string& name : parse_policy_list(item)) out.push_back(std::move(name));
    }
  }
  return out;
}

namespace {

struct Checked {
  std::uint32_t tokens = 0;
  std::uint32_t prompt = 0;
  std::uint32_t prefix = 0;
};

// The run's pool: as given, or every cache of every sequence at `tokens` positions.
std::uint64_t pool_blocks_of(const ServeBenchRequest& request, const ServeRun& run, const ModelConfig& cfg,
                             std::uint32_t tokens) {
  if (request.pool_blocks != 0) return request.pool_blocks;
  const std::uint32_t bs = request.block_size;
  return std::uint64_t{run.sequences} * cfg.head_count() * ((tokens + bs - 1) / bs);
}

// Everything about a run that can be wrong, before any work.
std::optional<RunSpec> spec_of(const ServeRun& run, const ServeBenchRequest& request, const ModelConfig& cfg,
                               const Checked& sizes) {
  if (run.sequences < 1) throw ParameterError("serve-bench: a run needs at least 1 sequence");
  if (run.policy.empty()) {
    if (run.chunk != 0) throw ParameterError("serve-bench: --chunk compresses a prompt and needs a policy");
    if (sizes.tokens > cfg.context) {
      throw ParameterError(fmt::format("serve-bench: --tokens {} is over the model's context of {} positions: the "
                                       "full cache (policy none) stops there; only runs that evict go past it",
                                       sizes.tokens, cfg.context));
    }
    return std::nullopt;
  }
  CompareRequest one;
  one.policies = {run.policy};
  one.budgets = {run.budget};
  one.overrides = request.overrides;
  RunSpec spec = compare_specs(one).front();
  if (sizes.tokens > cfg.context && run.chunk != 0) {
    throw ParameterError(fmt::format("serve-bench: --tokens {} is over the model's context of {} positions: a "
                                     "chunked run's prompt is read whole before it is compressed",
                                     sizes.tokens, cfg.context));
  }
  if (run.chunk > sizes.tokens) {
    throw ParameterError(fmt::format("serve-bench: a chunk of {} positions is larger than the capacity of {} (the "
                                     "tokens each sequence reads)",
                                     run.chunk, sizes.tokens));
  }
  PagedOptions paged;
  if (run.blocks) paged.block_size = request.block_size;
  if (request.granularity != Granularity::kHead && (run.blocks || run.chunk != 0)) {
    throw ParameterError(fmt::format("serve-bench: --granularity {} shares a budget between caches while decoding, "
                                     "by position: not for {} runs (give --modes token and --chunk 0)",
                                     granularity_name(request.granularity), run.blocks ? "block" : "chunked"));
  }
  paged.set_granularity(request.granularity);
  if (run.chunk != 0) {
    if (run.blocks) throw ParameterError("serve-bench: block mode evicts while decoding; a chunked run compresses");
    for (std::uint32_t l = 0; l < cfg.layers; ++l) {
      ParamMap params = head_params(spec, cfg, l);
      std::erase_if(params, [](const auto& kv) { return kv.first == "budget"; });
      check_prefill(spec.policy, params, spec.budget, std::min(request.window, std::min(run.chunk, sizes.prompt)));
    }
  } else {
    DecoderPolicies(spec, cfg, paged);  // builds and checks every policy
  }
  return spec;
}

ServeRow run_one(const std::shared_ptr<const Model>& model, std::span<const Token> text,
                 const ServeBenchRequest& request, const ServeRun& run, const std::optional<RunSpec>& spec,
                 const Checked& sizes, std::uint64_t& ticks_done, std::uint64_t ticks_total) {
  const ModelConfig& cfg = model->config();
  const std::uint32_t bs = request.block_size;
  BatchOptions options;
  options.capacity = std::min(sizes.tokens, cfg.context);
  options.block_size = bs;
  options.pool_blocks = pool_blocks_of(request, run, cfg, options.capacity);
  options.positions = request.positions;
  options.share_prefix = run.share_prefix;
  Batch batch(model, options);
  PagedOptions paged;
  if (run.blocks) paged.block_size = bs;
  paged.set_granularity(request.granularity);
  std::vector<SequenceId> ids;
  std::vector<std::optional<PrefillCompressor>> compressors(run.sequences);
  for (std::uint32_t i = 0; i < run.sequences; ++i) {
    const bool evict_while_decoding = spec && run.chunk == 0;
    ids.push_back(batch.join(evict_while_decoding ? &*spec : nullptr, paged));
    if (spec && run.chunk != 0) compressors[i].emplace(cfg, *spec, sizes.prompt, request.window, run.chunk);
  }
  ServeRow row;
  row.run = run;
  if (spec && request.granularity != Granularity::kHead) row.granularity = granularity_name(request.granularity);
  row.shared_prefix = sizes.prefix;
  row.tokens = sizes.tokens;
  row.prompt = run.chunk != 0 ? sizes.prompt : 0;
  row.block_size = bs;
  row.pool_blocks = options.pool_blocks;
  const std::uint32_t own = sizes.tokens - sizes.prefix;  // bytes of its own per sequence
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t t = 0; t < sizes.tokens; ++t) {
    std::uint64_t held = 0;
    for (std::uint32_t i = 0; i < run.sequences; ++i) {
      const Token token =
          t < sizes.prefix ? text[t] : text[sizes.prefix + std::size_t{i} * own + (t - sizes.prefix)];
      batch.step(ids[i], token);
      Decoder& d = batch.decoder(ids[i]);
      held += d.store().positions_held;  // before a compression: the chunk's peak
      if (compressors[i]) compressors[i]->after_step(d, t);
    }
    // Each sequence counted at its fullest this tick (after its step, before
    // its compression): at least what they all held at any one moment.
    row.peak_positions = std::max(row.peak_positions, held);
    if (request.progress) request.progress(static_cast<std::uint32_t>(++ticks_done), static_cast<std::uint32_t>(ticks_total));
  }
  row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.tokens_per_second = static_cast<double>(std::uint64_t{run.sequences} * sizes.tokens) / row.seconds;
  for (const SequenceId id : ids) {
    const Decoder& d = batch.decoder(id);
    row.positions_held += d.store().positions_held;
    row.peak_cache_positions = std::max(row.peak_cache_positions, d.store().peak_cache);
    row.evicted += d.evicted();
  }
  const PoolStats& pool = batch.pool().stats();
  row.peak_blocks = pool.peak_in_use;
  row.blocks_saved = pool.peak_saved;
  row.shared_blocks = pool.shared;
  row.copied_blocks = pool.copies;
  for (const SequenceId id : ids) batch.leave(id);
  row.leaked_blocks = batch.pool().stats().in_use;
  return row;
}

}  // namespace

std::vector<ServeRow> serve_bench(const std::shared_ptr<const Model>& model, std::span<const std::uint8_t> text,
                                  const ServeBenchRequest& request) {
  if (!model) throw ContractError("serve-bench: no model");
  const ModelConfig& cfg = model->config();
  if (request.runs.empty()) throw ParameterError("serve-bench: no runs");
  if (request.block_size < 1) throw ParameterError("serve-bench: --block-size (0) must be at least 1");
  Checked sizes;
  sizes.tokens = request.tokens == 0 ? cfg.context : request.tokens;
  sizes.prefix = request.shared_prefix;
  if (sizes.prefix > sizes.tokens) {
    throw ParameterError(fmt::format("serve-bench: --shared-prefix {} is longer than the {} tokens each sequence reads",
                                     sizes.prefix, sizes.tokens));
  }
  sizes.prompt = request.prompt == 0 ? sizes.tokens : request.prompt;
  if (sizes.prompt > sizes.tokens) {
    throw ParameterError(fmt::format("serve-bench: --prompt {} is longer than the {} tokens each sequence reads",
                                     sizes.prompt, sizes.tokens));
  }
  if (request.window < 1) throw ParameterError("serve-bench: --window (0) must be at least 1");
  std::vector<std::optional<RunSpec>> specs;
  std::uint32_t most = 0;
  std::uint64_t ticks = 0;
  for (const ServeRun& run : request.runs) {
    specs.push_back(spec_of(run, request, cfg, sizes));
    most = std::max(most, run.sequences);
    ticks += sizes.tokens;
    const std::uint32_t bs = request.block_size;
    const std::uint64_t pool = pool_blocks_of(request, run, cfg, std::min(sizes.tokens, cfg.context));
    if (pool < cfg.head_count()) {
      throw ParameterError(fmt::format("serve-bench: a pool of {} blocks cannot hold one sequence, which needs {} (one "
                                       "per cache)",
                                       pool, cfg.head_count()));
    }
    if (pool * bs * cfg.head_dim() > (1ULL << 30)) {
      throw ParameterError(fmt::format("serve-bench: a pool of {} blocks of {} positions is too large", pool, bs));
    }
  }
  const std::uint64_t needed = sizes.prefix + std::uint64_t{most} * (sizes.tokens - sizes.prefix);
  const std::vector<Token> tokens = sequence_tokens(*model, text);
  if (tokens.size() < needed) {
    const char* unit = model->vocabulary().kind() == Vocabulary::Kind::kBytes ? "bytes" : "tokens";
    throw InputError(fmt::format("serve-bench: the text has {} {}; {} sequences of {} {} sharing {} need {}",
                                 tokens.size(), unit, most, sizes.tokens, unit, sizes.prefix, needed));
  }
  if (ticks > 0xFFFFFFFFULL) throw ParameterError("serve-bench: too many runs to count progress");
  std::vector<ServeRow> rows;
  std::uint64_t done = 0;
  for (std::size_t i = 0; i < request.runs.size(); ++i) {
    rows.push_back(run_one(model, tokens, request, request.runs[i], specs[i], sizes, done, ticks));
  }
  return rows;
}

// ---- the row's one description --------------------------------------------------

namespace {

using Row = ServeRow;

void integer(RowVisitor& v, const FieldInfo& f, std::uint64_t x) { v.integer(f, static_cast<std::int64_t>(x)); }

constexpr RowField<Row> kFields[] = {
    {{"policy", FieldType::kString, "", "registry name of the policy; null for the full cache", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.run.policy.empty()) {
         v.null(f);
       } else {
         v.string(f, r.run.policy);
       }
     }},
    {{"budget", FieldType::kInteger, "positions", "positions each cache keeps; null for the full cache", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.run.policy.empty()) {
         v.null(f);
       } else {
         v.integer(f, r.run.budget);
       }
     }},
    {{"mode", FieldType::kString, "",
      "token: the policy evicts positions while decoding; block: whole blocks (BlockEvictor); chunked: the prompt is "
      "compressed after each chunk; full: no eviction",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       v.string(f, r.run.policy.empty() ? "full" : r.run.chunk != 0 ? "chunked" : r.run.blocks ? "block" : "token");
     }},
    {{"granularity", FieldType::kString, "",
      "which caches of a sequence shared its budget: layer (a layer's KV heads) or sequence (every cache holds the "
      "same positions, as llama.cpp's cells)",
      "--granularity layer or sequence given (a policy's rows)", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (!r.granularity.empty()) v.string(f, r.granularity);
     }},
    {{"prefixSharing", FieldType::kString, "", "on: equal full blocks are held once (reference counts); off", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.string(f, r.run.share_prefix ? "on" : "off"); }},
    {{"sequences", FieldType::kInteger, "sequences", "sequences decoding together over the pool", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, r.run.sequences); }},
    {{"sharedPrefix", FieldType::kInteger, "tokens", "tokens every sequence starts with (bytes for kvevict-tiny)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, r.shared_prefix); }},
    {{"tokens", FieldType::kInteger, "tokens", "tokens each sequence reads, its capacity (bytes for kvevict-tiny)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, r.tokens); }},
    {{"chunk", FieldType::kInteger, "tokens", "chunked: tokens per chunk (= prompt: one-shot compression)",
      "chunked", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.run.chunk != 0) v.integer(f, r.run.chunk);
     }},
    {{"prompt", FieldType::kInteger, "tokens", "chunked: tokens of each sequence read as the prompt", "chunked", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.run.chunk != 0) v.integer(f, r.prompt);
     }},
    {{"blockSize", FieldType::kInteger, "positions", "positions per pool block", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, r.block_size); }},
    {{"poolBlocks", FieldType::kInteger, "blocks", "blocks in the pool", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.pool_blocks); }},
    {{"peakBlocks", FieldType::kInteger, "blocks", "pool blocks in use at once, the most (measured)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.peak_blocks); }},
    {{"blocksSavedBySharing", FieldType::kInteger, "blocks",
      "block references held beyond the blocks in use (one block held by k sequences saves k - 1), the most at once",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.blocks_saved); }},
    {{"sharedBlocks", FieldType::kInteger, "blocks", "times a sequence took a published equal block instead of its own",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.shared_blocks); }},
    {{"copiedBlocks", FieldType::kInteger, "blocks", "shared blocks copied before a sequence changed them", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.copied_blocks); }},
    {{"peakPositions", FieldType::kInteger, "positions",
      "positions held by every cache of every sequence at once, the most (each sequence counted at its fullest "
      "in each tick)",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.peak_positions); }},
    {{"peakCachePositions", FieldType::kInteger, "positions", "the most positions any one cache held at once", "",
      {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.peak_cache_positions); }},
    {{"positionsHeld", FieldType::kInteger, "positions", "positions held at the end, every cache of every sequence",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.positions_held); }},
    {{"evicted", FieldType::kInteger, "positions", "positions removed, every cache of every sequence", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.evicted); }},
    {{"leakedBlocks", FieldType::kInteger, "blocks", "blocks still in use after every sequence left (0)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { integer(v, f, r.leaked_blocks); }},
    {{"tokensPerSecond", FieldType::kNumber, "tokens per second",
      "steps of every sequence over the run's wall time (varies run to run)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.tokens_per_second); }},
    {{"seconds", FieldType::kNumber, "seconds", "the run's wall time (varies run to run)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.seconds); }},
};
constexpr auto kInfos = field_infos(kFields);

}  // namespace

std::span<const FieldInfo> serve_row_schema() { return kInfos; }

void for_each_field(const ServeRow& row, RowVisitor& visitor) {
  for (std::size_t i = 0; i < kInfos.size(); ++i) kFields[i].emit(row, kInfos[i], visitor);
}

std::string serve_json(const std::vector<ServeRow>& rows, const JsonSource& source, int indent) {
  return envelope_json(source,
                       objects_json(
                           rows.size(), [&](std::size_t i, RowVisitor& visitor) { for_each_field(rows[i], visitor); },
                           -1),
                       {}, indent);
}

}  // namespace kvevict
