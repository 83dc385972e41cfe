#include "kvevict/model/evaluation/stream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numbers>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/kv/kv_precision.h"
#include "eval/envelope.h"
#include "eval/parallel_jobs.h"
#include "model/evaluation/scoring.h"

namespace kvevict {

double StreamSegment::bits_per_byte() const noexcept {
  return bytes == 0 ? 0.0 : nll / static_cast<double>(bytes) / std::numbers::ln2;
}

double StreamSegment::perplexity() const noexcept {
  return predictions == 0 ? 0.0 : std::exp(nll / static_cast<double>(predictions));
}

StreamTokens stream_tokens(const Model& model, std::span<const std::uint8_t> text, std::uint32_t wanted) {
  const TokenizedText t = tokenize_text(model, text);
  StreamTokens s;
  s.tokenizer = t.tokenizer;
  if (t.bos) {
    s.tokens.push_back(*t.bos);
    s.bytes.push_back(0);
  }
  s.tokens.insert(s.tokens.end(), t.tokens.begin(), t.tokens.end());
  s.bytes.insert(s.bytes.end(), t.bytes.begin(), t.bytes.end());
  if (wanted != 0) {
    if (wanted > s.tokens.size()) {
      throw InputError(fmt::format("the stream asks for {} tokens, but the text makes {} (BOS included where the "
                                   "model adds it): give a longer text or fewer tokens",
                                   wanted, s.tokens.size()));
    }
    s.tokens.resize(wanted);
    s.bytes.resize(wanted);
  }
  return s;
}

namespace {

// One run of the stream: which cache, and where its keys sit.
struct StreamRun {
  const RunSpec* spec = nullptr;  // null: the full cache
  PositionMode positions = PositionMode::kOriginal;
  bool recompute = false;
  PagedOptions granularity{};  // which caches share a budget (head or sequence)
};


// One run's decoder, its policies and its row as it fills. The full cache
// reads as far as the context holds it (`fed` tokens) and predicts within
// it, positions 1 ... fed-1; a policy's cache reads the whole stream.
struct StreamState {
  StreamState(const std::shared_ptr<const Model>& model, const StreamTokens& s, const StreamRun& run,
              const KvFormat& kv, int threads)
      : decoder(model, options(model->config(), s, run, kv, threads)) {
    row.positions = run.positions;
    row.kv_precision = std::string(precision_name(kv.precision));
    row.tokenizer = s.tokenizer;
    const auto n = static_cast<std::uint64_t>(s.tokens.size());
    fed = run.spec == nullptr ? options(model->config(), s, run, kv, threads).capacity : n;
    if (run.spec != nullptr) {
      policies = DecoderPolicies(*run.spec, model->config(), run.granularity);
      policies.attach(decoder);
    }
  }
  static DecoderOptions options(const ModelConfig& cfg, const StreamTokens& s, const StreamRun& run,
                                const KvFormat& kv, int threads) {
    DecoderOptions o;
    o.kv = kv;
    o.positions = run.positions;
    o.threads = threads;
    o.capacity = run.spec == nullptr ? static_cast<std::uint32_t>(std::min<std::uint64_t>(s.tokens.size(), cfg.context))
                                     : static_cast<std::uint32_t>(run.spec->budget + 1);
    return o;
  }
  // Whether token t is still to be fed.
  bool feeds(std::uint64_t t, std::uint64_t n) const noexcept { return t + 1 < n && t < fed; }
  // After token t is fed, its logits: its prediction of token t + 1, when
  // within what it reads.
  void scored(const StreamTokens& s, std::uint64_t t, std::uint32_t segment, std::span<const float> logits) {
    if (t + 1 < fed) {
      add_stream_prediction(row, t + 1, segment, detail::negative_log_likelihood(logits, s.tokens[t + 1]),
                            s.bytes[t + 1]);
    }
  }
  StreamRow finish(const StreamRun& run, std::uint64_t n, std::uint32_t trained_context) {
    row.tokens = std::min(fed, n);
    row.evicted = decoder.evicted();
    row.peak_positions = decoder.store().peak_cache;
    row.past_trained_context = run.positions == PositionMode::kOriginal && row.tokens > trained_context;
    return std::move(row);
  }

  Decoder decoder;
  DecoderPolicies policies;
  StreamRow row;
  std::uint64_t fed = 0;
};

// Progress counts the stream's tokens once a run: each as it is read, and a
// run that stops early (the full cache at the context) the rest at its end.
StreamRow run_stream(const std::shared_ptr<const Model>& model, const StreamTokens& s, const StreamRun& run,
                     std::uint32_t segment, const KvFormat& kv, detail::ProgressCounter& count) {
  StreamState state(model, s, run, kv, DecoderOptions{}.threads);
  const auto n = static_cast<std::uint64_t>(s.tokens.size());
  std::uint64_t t = 0;
  for (; state.feeds(t, n); ++t) {
    state.scored(s, t, segment, state.decoder.step(s.tokens[t]));
    count.add(1);
  }
  count.add(n - t);
  return state.finish(run, n, model->config().trained_context);
}

// The same for several runs, fed together (Decoder::prefill_together): one
// read of each weight for a pass of tokens of them all, the rows of each run
// alone to the bit; a run leaves the batch where it stops reading (the full
// cache at the context), where a pass ends. On the calling thread (one core
// a group).
std::vector<StreamRow> run_streams_together(const std::shared_ptr<const Model>& model, const StreamTokens& s,
                                            std::span<const StreamRun* const> runs, std::uint32_t segment,
                                            const KvFormat& kv, detail::ProgressCounter& count) {
  std::vector<std::unique_ptr<StreamState>> states;
  for (const StreamRun* run : runs) states.push_back(std::make_unique<StreamState>(model, s, *run, kv, 1));
  const auto n = static_cast<std::uint64_t>(s.tokens.size());
  const std::size_t vocab = model->config().vocab;
  std::vector<Decoder*> batch;
  std::vector<StreamState*> feeding;
  std::vector<Token> tokens;
  std::uint64_t t = 0;
  while (true) {
    batch.clear();
    feeding.clear();
    // The pass: up to Decoder::together_pass_tokens, ending where the first
    // of its runs stops reading.
    std::uint64_t end = n - 1;
    for (const auto& state : states) {
      if (!state->feeds(t, n)) continue;
      batch.push_back(&state->decoder);
      feeding.push_back(state.get());
      end = std::min(end, state->fed);
    }
    if (batch.empty()) break;
    end = std::min<std::uint64_t>(end, t + Decoder::together_pass_tokens(batch.size()));
    tokens.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(t), s.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    const std::span<const float> logits = Decoder::prefill_together(batch, tokens);
    for (std::size_t k = 0; k < feeding.size(); ++k) {
      for (std::uint64_t j = t; j < end; ++j) {
        feeding[k]->scored(s, j, segment, logits.subspan((k * tokens.size() + (j - t)) * vocab, vocab));
      }
    }
    count.add(states.size() * tokens.size());  // a run that stopped reading counts the tokens too
    t = end;
  }
  count.add((n - std::min(t, n)) * states.size());  // all stopped before the end: the rest
  std::vector<StreamRow> rows;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    rows.push_back(states[k]->finish(*runs[k], n, model->config().trained_context));
  }
  return rows;
}

// StreamingLLM's "sliding window with re-computation": token t predicted by
// a cache rebuilt over the `window` tokens before it.
StreamRow run_recompute(const std::shared_ptr<const Model>& model, const StreamTokens& s, std::uint32_t window,
                        std::uint32_t tokens, std::uint32_t segment, const KvFormat& kv,
                        detail::ProgressCounter& count) {
  StreamRow row;
  row.policy = "recompute";
  row.budget = window;
  row.positions = PositionMode::kCache;
  row.kv_precision = std::string(precision_name(kv.precision));
  row.tokenizer = s.tokenizer;
  DecoderOptions options;
  options.kv = kv;
  options.capacity = window;
  Decoder decoder(model, options);
  const std::uint64_t n = std::min<std::uint64_t>(tokens, s.tokens.size());
  for (std::uint64_t t = 1; t < n; ++t) {
    decoder.reset();
    const std::uint64_t first = t > window ? t - window : 0;
    std::span<const float> logits;
    for (std::uint64_t i = first; i < t; ++i) logits = decoder.step(s.tokens[i]);
    add_stream_prediction(row, t, segment, detail::negative_log_likelihood(logits, s.tokens[t]), s.bytes[t]);
    count.add(1);
  }
  count.add(s.tokens.size() - (n > 0 ? n - 1 : 0));  // the stream's tokens it does not predict
  row.tokens = n;
  row.peak_positions = std::min<std::uint64_t>(window, n);
  return row;
}

}  // namespace

std::vector<StreamRow> stream_perplexity(const Model& model, std::span<const std::uint8_t> text,
                                         const StreamRequest& request, const ModelRunOptions& options) {
  const ModelConfig& cfg = model.config();
  if (options.max_windows != 0) throw ParameterError("a stream has no windows: --max-windows does not apply");
  if (options.window != 0 || options.deadline) {
    throw ContractError("a stream has no windows to shorten or stop between: no window or deadline");
  }
  if (options.paged.blocks()) throw ParameterError("a stream runs on the contiguous store: no block options");
  if (options.paged.layer_budget) {
    // A layer's heads share budget x heads positions, so one head may hold
    // more than the budget: past the capacity a stream's caches are sized to.
    throw ParameterError("stream: --granularity layer lets one head hold more than the budget, past the budget + 1 "
                         "positions a stream's caches hold (use head or sequence)");
  }
  if (options.prefill != 0) throw ParameterError("a stream runs token by token: no --prefill");
  check_format(options.kv, cfg.head_dim());
  if (request.positions.empty()) throw ParameterError("stream: no position mode given (original, cache)");
  const std::uint32_t segment = request.segment == 0 ? cfg.context : request.segment;
  if (request.recompute_window > 0 && request.recompute_tokens < 2) {
    throw ParameterError("stream: the recomputed window needs at least 2 tokens of the stream to predict one");
  }
  if (request.recompute_window >= cfg.context) {
    throw ParameterError(fmt::format("stream: the recomputed window ({}) must be below the model's context of {}",
                                     request.recompute_window, cfg.context));
  }
  // Every policy built and every budget checked before any work.
  for (const RunSpec& spec : request.specs) DecoderPolicies(spec, cfg, options.paged);
  const StreamTokens s = stream_tokens(model, text, request.tokens);
  if (request.recompute_tokens > s.tokens.size()) {
    throw InputError(fmt::format("stream: the recomputed window asks for {} tokens of a stream of {}",
                                 request.recompute_tokens, s.tokens.size()));
  }

  std::vector<StreamRun> runs;
  if (request.full_cache) runs.push_back({});
  for (const RunSpec& spec : request.specs) {
    for (const PositionMode mode : request.positions) runs.push_back({&spec, mode, false, options.paged});
  }
  if (request.recompute_window > 0) runs.push_back({nullptr, PositionMode::kCache, true});
  if (runs.empty()) throw ParameterError("stream: nothing to run (no policy, no full cache, no recomputed window)");

  std::vector<StreamRow> rows(runs.size());
  const std::shared_ptr<const Model> shared = detail::shared_view(model);
  // Progress in tokens: the stream's once a run.
  detail::ProgressCounter count(options.progress, runs.size() * s.tokens.size());
  count.start();
  // The runs that read the stream token by token (not the recomputed window).
  std::vector<std::size_t> stepped;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (!runs[r].recompute) stepped.push_back(r);
  }
  if (options.together && model.uses_kernels() && stepped.size() > 1) {
    // The stepped runs in as many groups as cores, each stepped together on
    // one core (a weight read once a token a group); the recomputed window
    // is a job of its own. A group's time is shared among its runs.
    const auto cores = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
    const std::size_t groups = std::min(cores, stepped.size());
    const bool recompute = stepped.size() < runs.size();
    detail::parallel_jobs(groups + (recompute ? 1 : 0), {}, [&](std::size_t job) {
      const auto started = std::chrono::steady_clock::now();
      if (job < groups) {
        std::vector<std::size_t> mine;
        for (std::size_t k = stepped.size() * job / groups; k < stepped.size() * (job + 1) / groups; ++k) {
          mine.push_back(stepped[k]);
        }
        std::vector<const StreamRun*> group;
        for (const std::size_t r : mine) group.push_back(&runs[r]);
        std::vector<StreamRow> got = run_streams_together(shared, s, group, segment, options.kv, count);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        for (std::size_t k = 0; k < mine.size(); ++k) {
          rows[mine[k]] = std::move(got[k]);
          rows[mine[k]].seconds = took / static_cast<double>(mine.size());
        }
      } else {
        rows.back() =
            run_recompute(shared, s, request.recompute_window, request.recompute_tokens, segment, options.kv, count);
        rows.back().seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      }
    });
  } else {
    detail::parallel_jobs(runs.size(), {}, [&](std::size_t r) {
      const auto started = std::chrono::steady_clock::now();
      const StreamRun& run = runs[r];
      rows[r] = run.recompute ? run_recompute(shared, s, request.recompute_window, request.recompute_tokens, segment,
                                              options.kv, count)
                              : run_stream(shared, s, run, segment, options.kv, count);
      rows[r].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    });
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {
    StreamRow& row = rows[r];
    if (runs[r].spec != nullptr) {
      row.policy = runs[r].spec->policy;
      row.budget = runs[r].spec->budget;
      row.params = find_policy(row.policy).effective(head_params(*runs[r].spec, cfg, 0));
      if (options.paged.sequence_budget) row.granularity = "sequence";
    }
    row.bits_per_byte = row.bytes == 0 ? 0.0 : row.nll / static_cast<double>(row.bytes) / std::numbers::ln2;
  }
  return rows;
}

std::vector<RunSpec> stream_specs(std::string_view policies, std::span<const std::int64_t> budgets,
                                  const ParamMap& overrides) {
  if (policies == "default") policies = kDefaultStreamPolicies;
  if (budgets.empty()) throw ParameterError("stream: the budget list is empty");
  // Each item: a policy's name, then its own parameters after colons.
  struct Item {
    std::string name;
    ParamMap params;
  };
  std::vector<Item> items;
  std::vector<std::string> names;
  for (const std::string& text : split_list(policies, "--policy")) {
    const std::vector<std::string> parts = [&] {
      std::vector<std::string> out;
      std::size_t at = 0;
      while (true) {
        const std::size_t colon = text.find(':', at);
        out.push_back(text.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
        if (colon == std::string::npos) return out;
        at = colon + 1;
      }
    }();
    Item item{find_policy(parts[0]).name, {}};
    for (std::size_t i = 1; i < parts.size(); ++i) {
      const auto [key, value] = parse_assignment(parts[i]);
      if (key == "budget") throw ParameterError(fmt::format("--policy {}: set budgets with --budget", text));
      if (!find_policy(item.name).has_param(key)) {
        std::vector<std::string> known;
        for (const ParamInfo& p : find_policy(item.name).params) known.push_back(p.name);
        const std::string near = nearest_name(key, known);
        throw ParameterError(fmt::format("--policy {}: {} has no parameter '{}'{}", text, item.name, key,
                                         near.empty() ? "" : fmt::format(": did you mean '{}'?", near)));
      }
      set_param(item.params, key, value);
    }
    if (std::find(names.begin(), names.end(), item.name) == names.end()) names.push_back(item.name);
    items.push_back(std::move(item));
  }
  // The overrides resolved per policy as compare resolves them.
  CompareRequest request;
  request.policies = names;
  request.overrides = overrides;
  request.budgets = {budgets.front()};
  std::map<std::string, ParamMap> shared;
  for (RunSpec& spec : compare_specs(request)) shared[spec.policy] = std::move(spec.params);
  std::vector<RunSpec> specs;
  for (const Item& item : items) {
    ParamMap params = shared[item.name];
    for (const auto& [key, value] : item.params) set_param(params, key, value);
    for (const std::int64_t b : budgets) specs.push_back({item.name, params, b});
  }
  return specs;
}

void add_stream_prediction(StreamRow& row, std::uint64_t t, std::uint32_t segment, double nll, std::uint32_t bytes) {
  const std::size_t s = t / segment;
  while (row.segments.size() <= s) {
    const std::uint64_t begin = row.segments.size() * std::uint64_t{segment};
    row.segments.push_back({.begin = begin, .end = begin + segment});
  }
  StreamSegment& seg = row.segments[s];
  seg.nll += nll;
  seg.bytes += bytes;
  ++seg.predictions;
  row.nll += nll;
  row.bytes += bytes;
  ++row.predictions;
}

std::string stream_label(const StreamRow& row) {
  if (row.policy.empty()) return "full cache";
  if (row.policy == "recompute") return "recompute";
  std::string label = row.policy;
  // The parameters that tell two rows of one policy apart (context-shift:
  // llama.cpp's own, a row of kvevict-llama stream).
  const std::string_view distinct = row.policy == "streaming-llm" ? "sinks" : row.policy == "context-shift" ? "keep" : "";
  for (const auto& [key, value] : row.params) {
    if (!distinct.empty() && key == distinct) label += fmt::format(" {}={}", key, value);
  }
  return label;
}

double stream_span_bits_per_byte(const StreamRow& row, std::size_t first, std::size_t last) {
  if (last > row.segments.size()) return -1.0;
  double nll = 0.0;
  std::uint64_t bytes = 0;
  for (std::size_t s = first; s < last; ++s) {
    nll += row.segments[s].nll;
    bytes += row.segments[s].bytes;
  }
  return bytes == 0 ? -1.0 : nll / static_cast<double>(bytes) / std::numbers::ln2;
}

std::vector<SinkShare> sink_shares(const Model& model, std::span<const std::uint8_t> text, std::uint32_t tokens) {
  const ModelConfig& cfg = model.config();
  const StreamTokens s = stream_tokens(model, text, 0);
  const std::uint32_t n = static_cast<std::uint32_t>(
      std::min<std::uint64_t>({s.tokens.size(), cfg.context, tokens == 0 ? cfg.context : tokens}));
  constexpr std::uint32_t kFirstStep = 16;  // early steps hold few positions: every one draws a large share
  if (n <= kFirstStep) {
    throw InputError(fmt::format("sink shares need more than {} tokens; the text gives {}", kFirstStep, n));
  }
  Decoder decoder(detail::shared_view(model), n);
  std::vector<SinkShare> shares(cfg.layers);
  std::uint64_t steps = 0;
  for (std::uint32_t t = 0; t < n; ++t) {
    decoder.step(s.tokens[t]);
    if (t < kFirstStep) continue;
    ++steps;
    for (std::uint32_t l = 0; l < cfg.layers; ++l) {
      for (std::uint32_t kv = 0; kv < cfg.kv_heads; ++kv) {
        const std::uint32_t h = l * cfg.kv_heads + kv;
        const std::span<const Position> at = decoder.attended(h);
        const std::span<const float> w = decoder.attention(h);
        double first = 0.0, four = 0.0;
        for (std::size_t i = 0; i < at.size() && at[i] < 4; ++i) {
          four += w[i];
          if (at[i] == 0) first += w[i];
        }
        shares[l].first += first / cfg.kv_heads;
        shares[l].first_four += four / cfg.kv_heads;
      }
    }
    for (SinkShare& share : shares) {
      share.even_first += 1.0 / (t + 1);
      share.even_first_four += 4.0 / (t + 1);
    }
  }
  for (std::uint32_t l = 0; l < cfg.layers; ++l) {
    SinkShare& share = shares[l];
    share.layer = l;
    share.first /= static_cast<double>(steps);
    share.first_four /= static_cast<double>(steps);
    share.even_first /= static_cast<double>(steps);
    share.even_first_four /= static_cast<double>(steps);
  }
  return shares;
}

namespace {

constexpr FieldInfo kSegmentInfos[] = {
    {"begin", FieldType::kInteger, "tokens", "the segment's first position in the stream", "", {}},
    {"end", FieldType::kInteger, "tokens", "one past its last", "", {}},
    {"predictions", FieldType::kInteger, "tokens", "tokens predicted in it", "", {}},
    {"bytes", FieldType::kInteger, "bytes", "the bytes those tokens stand for", "", {}},
    {"bitsPerByte", FieldType::kNumber, "bits per byte", "the segment's negative log-likelihood over its bytes", "",
     {}},
    {"perplexity", FieldType::kNumber, "", "exp of its mean negative log-likelihood per token", "", {}},
};
constexpr FieldInfo kStreamInfos[] = {
    {"policy", FieldType::kString, "", "registry name of the policy, \"recompute\" for the recomputed window; null "
     "for the full cache", "", {}},
    {"label", FieldType::kString, "", "the policy with the parameters its item set (\"streaming-llm sinks=4\")", "",
     {}},
    {"budget", FieldType::kInteger, "positions", "positions a cache holds (the window for recompute; 0: full cache)",
     "", {}},
    {"params", FieldType::kObject, "", "every effective parameter of the policy, name -> integer", "", {}},
    {"positions", FieldType::kString, "", "original (each token's place in the stream) or cache (its slot)", "", {}},
    {"tokens", FieldType::kInteger, "tokens", "tokens fed", "", {}},
    {"predictions", FieldType::kInteger, "tokens", "tokens predicted", "", {}},
    {"bytes", FieldType::kInteger, "bytes", "the bytes the predicted tokens stand for", "", {}},
    {"bitsPerByte", FieldType::kNumber, "bits per byte", "over every prediction the run made", "", {}},
    {"pastTrainedContext", FieldType::kBoolean, "", "original positions went past the trained context", "", {}},
    {"peakPositions", FieldType::kInteger, "positions", "the most positions any one cache held", "", {}},
    {"evicted", FieldType::kInteger, "positions", "positions removed, all caches", "", {}},
    {"kvPrecision", FieldType::kString, "", "the precision keys and values were stored at", "", {}},
    {"granularity", FieldType::kString, "", "which caches shared the budget (sequence or layer)",
     "--granularity given", {}},
    {"tokenizer", FieldType::kString, "", "the model's tokenizer", "", {}},
    {"seconds", FieldType::kNumber, "seconds", "wall time of the run (varies run to run)", "", {}},
    {"segments", FieldType::kArray, "", "the stream in segments, in order, up to where the run stopped",
     "", kSegmentInfos},
};
constexpr FieldInfo kSinkInfos[] = {
    {"layer", FieldType::kInteger, "", "the layer", "", {}},
    {"first", FieldType::kNumber, "share of attention (0..1)", "the share the first position draws", "", {}},
    {"firstFour", FieldType::kNumber, "share of attention (0..1)", "the share the first four draw", "", {}},
    {"evenFirst", FieldType::kNumber, "share of attention (0..1)", "what the first would draw spread evenly", "", {}},
    {"evenFirstFour", FieldType::kNumber, "share of attention (0..1)", "what the first four would draw spread evenly",
     "", {}},
};

}  // namespace

std::span<const FieldInfo> stream_row_schema() { return kStreamInfos; }
std::span<const FieldInfo> sink_row_schema() { return kSinkInfos; }

std::string stream_json(const std::vector<StreamRow>& rows, const JsonSource& source) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const StreamRow& r : rows) {
    nlohmann::ordered_json row;
    row["policy"] = r.policy.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.policy);
    row["label"] = stream_label(r);
    row["budget"] = r.budget;
    nlohmann::ordered_json params = nlohmann::ordered_json::object();
    for (const auto& [key, value] : r.params) params[key] = value;
    row["params"] = params;
    row["positions"] = std::string(position_mode_name(r.positions));
    row["tokens"] = r.tokens;
    row["predictions"] = r.predictions;
    row["bytes"] = r.bytes;
    row["bitsPerByte"] = r.bits_per_byte;
    row["pastTrainedContext"] = r.past_trained_context;
    row["peakPositions"] = r.peak_positions;
    row["evicted"] = r.evicted;
    row["kvPrecision"] = r.kv_precision;
    if (!r.granularity.empty()) row["granularity"] = r.granularity;
    row["tokenizer"] = r.tokenizer;
    row["seconds"] = r.seconds;
    nlohmann::ordered_json segments = nlohmann::ordered_json::array();
    for (const StreamSegment& seg : r.segments) {
      segments.push_back({{"begin", seg.begin},
                          {"end", seg.end},
                          {"predictions", seg.predictions},
                          {"bytes", seg.bytes},
                          {"bitsPerByte", seg.bits_per_byte()},
                          {"perplexity", seg.perplexity()}});
    }
    row["segments"] = segments;
    list.push_back(std::move(row));
  }
  return detail::envelope(source, std::move(list)).dump(2);
}

std::string sinks_json(const std::vector<SinkShare>& sinks, const JsonSource& source) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const SinkShare& s : sinks) {
    list.push_back({{"layer", s.layer},
                    {"first", s.first},
                    {"firstFour", s.first_four},
                    {"evenFirst", s.even_first},
                    {"evenFirstFour", s.even_first_four}});
  }
  return detail::envelope(source, std::move(list)).dump(2);
}

}  // namespace kvevict
