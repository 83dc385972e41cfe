// kvevict-llama stream: one long text read by llama.cpp as a single sequence,
// token after token, past the model's context -- StreamingLLM's setting, as
// `kvevict stream` runs it in kvevict's decoder, with the same rows and
// formats (kvevict/model/evaluation/stream.h), so the two compare segment by
// segment:
//   * the full cache, as far as the context;
//   * each policy at each budget, holding the sequence at the budget with
//     llama_memory_seq_rm, its keys at their original positions or at their
//     index in the cache (the survivors shifted with llama_memory_seq_add,
//     which llama.cpp applies by re-rotating the keys: its K-shift);
//   * with --context-shift KEEP, llama.cpp's own answer to a full context,
//     as llama-completion and llama-server do it: when the next token would
//     not fit, drop half of the positions after the first KEEP and shift the
//     rest down.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <numbers>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../kvevict/output.h"
#include "commands.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/paged.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/decoder/model_text.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/evaluation/stream.h"

namespace kvevict::llama_tool {

namespace {

// One run of the stream: the full cache (no spec, no shift), a policy at a
// position mode, or llama.cpp's context shift keeping `keep` at `budget`.
struct Run {
  const RunSpec* spec = nullptr;
  PositionMode positions = PositionMode::kOriginal;
  std::int64_t keep = -1;  // >= 0: the context shift
  std::int64_t budget = 0;
  bool full() const noexcept { return spec == nullptr && keep < 0; }
};

struct Setting {
  std::uint32_t context = 0;          // the full cache's length
  std::uint32_t trained_context = 0;  // past it, original positions are angles never trained on
  std::uint32_t segment = 0;
};

// llama.cpp's context shift (llama-completion, llama-server): before a
// token that would not fit -- `held` + 1 past the budget + 1 positions a
// policy's cache holds with its new token -- the first `keep` stay, half of
// the rest go, and the survivors after them move down by as many. Returns
// the positions dropped.
std::int64_t shift_context(llama_context* ctx, std::int64_t& held, std::int64_t keep, std::int64_t budget) {
  if (held + 1 <= budget + 1) return 0;
  const std::int64_t discard = (held - keep) / 2;
  llama_memory_t memory = llama_get_memory(ctx);
  const auto first = static_cast<llama_pos>(keep), past = static_cast<llama_pos>(keep + discard);
  if (!llama_memory_seq_rm(memory, 0, first, past)) {
    throw ContractError(fmt::format("llama: llama_memory_seq_rm refused positions {} ... {}", first, past - 1));
  }
  llama_memory_seq_add(memory, 0, past, static_cast<llama_pos>(held), -static_cast<llama_pos>(discard));
  held -= discard;
  return discard;
}

StreamRow run_stream(llama_model* lm, const Model& model, const StreamTokens& s, const Run& run, const StreamArgs& a,
                     const Setting& at) {
  const LlamaShape shape = llama_shape(lm);
  const std::uint64_t caches = std::uint64_t{shape.layers} * shape.kv_heads;
  const auto cells = static_cast<std::uint32_t>(run.full() ? at.context : run.budget + 1);
  LlamaPolicySlot hook;
  const Context context = make_context(lm, cells, a.engine, run.spec != nullptr ? &hook : nullptr);
  llama_context* ctx = context.get();
  const bool shifts = run.keep >= 0 || (run.spec != nullptr && run.positions == PositionMode::kCache);
  if (shifts && !llama_memory_can_shift(llama_get_memory(ctx))) {
    throw ParameterError("llama.cpp cannot shift this model's cache (llama_memory_can_shift is false): cache "
                         "positions and the context shift need it");
  }
  std::optional<LlamaPolicy> policy;
  StreamRow row;
  row.positions = run.positions;
  row.kv_precision = a.engine.kv;
  row.tokenizer = s.tokenizer;
  row.budget = run.full() ? 0 : run.budget;
  if (run.spec != nullptr) {
    policy.emplace(shape, policy_options(*run.spec, llama_n_ctx(ctx), run.positions == PositionMode::kCache));
    hook.policy = &*policy;
    row.policy = run.spec->policy;
    row.params = find_policy(row.policy).effective(head_params(*run.spec, model.config(), 0));
    row.granularity = "sequence";
  } else if (run.keep >= 0) {
    row.policy = "context-shift";
    set_param(row.params, "keep", run.keep);
    row.granularity = "sequence";
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(lm));
  const auto n = static_cast<std::uint64_t>(s.tokens.size());
  const std::uint64_t fed = run.full() ? std::min<std::uint64_t>(n, at.context) : n;
  llama_batch batch = llama_batch_init(1, 0, 1);
  const auto started = std::chrono::steady_clock::now();
  std::int64_t held = 0;  // positions the sequence holds before the token
  try {
    for (std::uint64_t t = 0; t + 1 < n && t < fed; ++t) {
      auto pos = static_cast<llama_pos>(t);
      if (run.keep >= 0) {
        row.evicted += static_cast<std::uint64_t>(shift_context(ctx, held, run.keep, run.budget)) * caches;
        pos = static_cast<llama_pos>(held);
      } else if (policy) {
        pos = policy->next_position(0);
      }
      decode_one(ctx, batch, s.tokens[t], pos);
      ++held;
      row.peak_positions = std::max<std::uint64_t>(row.peak_positions, static_cast<std::uint64_t>(held));
      if (policy) {
        const std::int32_t seq = 0;
        policy->after_decode(ctx, std::span<const std::int32_t>(&seq, 1), std::span<const std::int32_t>(&pos, 1));
        row.evicted += policy->victims(0).size() * caches;  // every cache loses each victim
        held = static_cast<std::int64_t>(policy->held(0).size());
      }
      if (t + 1 < fed) add_stream_prediction(row, t + 1, at.segment, next_token_nll(ctx, vocab, s.tokens[t + 1]), s.bytes[t + 1]);
    }
  } catch (...) {
    llama_batch_free(batch);
    throw;
  }
  llama_batch_free(batch);
  row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  row.tokens = fed;
  row.bits_per_byte = row.bytes == 0 ? 0.0 : row.nll / std::numbers::ln2 / static_cast<double>(row.bytes);
  row.past_trained_context = run.positions == PositionMode::kOriginal && row.tokens > at.trained_context;
  return row;
}

}  // namespace

int stream(const StreamArgs& a) {
  const std::shared_ptr<const Model> model = Model::load(a.engine.model);  // kvevict's tokenizer
  const ModelConfig& cfg = model->config();
  Setting at;
  at.trained_context = cfg.trained_context != 0 ? cfg.trained_context : cfg.context;
  at.context = a.context != 0 ? a.context : std::min<std::uint32_t>(at.trained_context, ModelOptions::kDefaultContextCap);
  if (at.context < 2 || at.context > at.trained_context) {
    throw ParameterError(fmt::format("--context ({}) must be 2 ... {}, the context the model was trained on",
                                     at.context, at.trained_context));
  }
  at.segment = a.segment != 0 ? a.segment : at.context;

  const std::vector<std::int64_t> budgets = parse_integer_list(a.budgets, "--budget");
  std::vector<RunSpec> specs;
  if (!a.policy.empty() && a.policy != "none") specs = stream_specs(a.policy, budgets, parse_assignments(a.sets));
  // kvevict stream's rules, at the context this stream runs at.
  ModelConfig at_context = cfg;
  at_context.context = at.context;
  PagedOptions sequence;
  sequence.set_granularity(Granularity::kSequence);
  for (const RunSpec& spec : specs) {
    check_flash(spec.policy, a.engine.flash);
    (void)DecoderPolicies(spec, at_context, sequence);
  }
  std::vector<PositionMode> modes;
  for (const std::string& p : split_list(a.positions, "--positions")) modes.push_back(parse_position_mode(p));
  std::vector<std::int64_t> keeps;
  if (!a.context_shift.empty()) keeps = parse_integer_list(a.context_shift, "--context-shift");
  for (const std::int64_t keep : keeps) {
    for (const std::int64_t budget : budgets) {
      if (keep < 0 || keep >= budget) {
        throw ParameterError(fmt::format("--context-shift ({}) must be 0 ... {}: the positions kept below the budget "
                                         "of {}, with room to drop half of the rest",
                                         keep, budget - 1, budget));
      }
    }
  }
  std::vector<Run> runs;
  if (!a.no_full_cache) runs.push_back({});
  for (const RunSpec& spec : specs) {
    for (const PositionMode mode : modes) runs.push_back({&spec, mode, -1, spec.budget});
  }
  for (const std::int64_t keep : keeps) {
    for (const std::int64_t budget : budgets) runs.push_back({nullptr, PositionMode::kCache, keep, budget});
  }
  if (runs.empty()) throw ParameterError("stream: nothing to run (no policy, no full cache, no context shift)");
  const StreamTokens s = stream_tokens(*model, read_text(a.text), a.tokens);
  if (s.tokens.size() < 2) throw InputError(fmt::format("{}: too short to predict a token", a.text));

  std::vector<StreamRow> rows;
  {
    const LlamaModel loaded(a.engine.model);
    // Every policy built (and its parameters checked) by the adapter too, before any work.
    for (const RunSpec& spec : specs) LlamaPolicy probe(llama_shape(loaded.get()), policy_options(spec, spec.budget + 1));
    for (const Run& run : runs) rows.push_back(run_stream(loaded.get(), *model, s, run, a, at));
  }
  if (std::any_of(rows.begin(), rows.end(), [](const StreamRow& r) { return r.past_trained_context; })) {
    std::fprintf(stderr,
                 "stream: note: runs with original positions went past the %u positions the model was trained on, "
                 "to rotary angles it never saw\n",
                 at.trained_context);
  }
  cli::print_stream(std::cout, rows, a.format, {"llama stream", a.engine.model});
  return 0;
}

}  // namespace kvevict::llama_tool
