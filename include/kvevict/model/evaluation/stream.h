// Streaming past the context (docs/streaming.md): one long text read as a
// single sequence, token after token, by a decoder whose caches a policy
// holds at its budget -- StreamingLLM's setting. The stream is never cut into
// windows, so a run goes as far past the model's trained context as its
// policy lets it; the full cache stops at the context. Each predicted token
// is scored as perplexity does (perplexity.h), and the log-likelihood is
// reported by segment of the stream, so a collapse shows where it starts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/evaluation/perplexity.h"

namespace kvevict {

struct StreamRequest {
  std::vector<RunSpec> specs;  // policy x budget; each runs at every `positions`
  std::vector<PositionMode> positions{PositionMode::kOriginal, PositionMode::kCache};
  bool full_cache = true;      // the full cache too, as far as the context
  // Tokens of the stream, BOS included where the model adds one (0: the
  // whole text). More than the text makes is refused.
  std::uint32_t tokens = 0;
  // Tokens a segment of the report (0: the model's context).
  std::uint32_t segment = 0;
  // StreamingLLM's own baseline, "sliding window with re-computation": each
  // token predicted by a cache rebuilt from scratch over the `recompute_window`
  // tokens before it (positions 0 ... window-1), over the stream's first
  // `recompute_tokens` tokens. Costs window steps a token. 0: not run.
  std::uint32_t recompute_window = 0;
  std::uint32_t recompute_tokens = 0;
};

// One segment of a run: the predictions of the tokens at stream positions
// [begin, end) (position 0, the first token, is never predicted).
struct StreamSegment {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t predictions = 0;
  std::uint64_t bytes = 0;  // the bytes the predicted tokens stand for
  double nll = 0.0;         // summed negative log-likelihood, nats
  double bits_per_byte() const noexcept;
  double perplexity() const noexcept;
};

struct StreamRow {
  std::string policy;  // empty: the full cache; "recompute": the recomputed window
  std::int64_t budget = 0;  // positions a cache holds (the window for "recompute"; 0: full cache)
  ParamMap params;          // every effective parameter
  PositionMode positions = PositionMode::kOriginal;
  std::vector<StreamSegment> segments;  // in stream order, up to where the run stopped
  std::uint64_t tokens = 0;             // tokens fed
  std::uint64_t predictions = 0;
  std::uint64_t bytes = 0;
  double nll = 0.0;
  double bits_per_byte = 0.0;           // over every prediction the run made
  // Original positions past the context the model was trained on: angles
  // it never saw (allowed so the collapse can be shown).
  bool past_trained_context = false;
  std::uint64_t peak_positions = 0;     // the most positions any one cache held
  std::uint64_t evicted = 0;            // positions removed, all caches
  std::string kv_precision = "fp32";
  std::string granularity;  // "sequence" when every cache held the same positions (empty: head)
  std::string tokenizer;
  double seconds = 0.0;
};

// The full cache (when asked; its positions are always original), then each
// spec at each position mode, then the recomputed window. Every policy is
// built, and every request checked, before any work: a budget must leave
// room below the context (budget + 1 <= context), and a run with `original`
// positions past the trained context is allowed (past_trained_context says so).
// Runs go in parallel, one per job; options.progress counts the stream's tokens once a run.
// On a model on the weight kernels (Model::uses_kernels) with
// options.together, the runs that read the stream step together instead, in
// one group a core (Decoder::step_together: each weight read once a token a
// group), the rows of one run at a time to the bit (tested); a row's seconds
// are then its group's time shared among the group's runs.
// options.kv sets the stores' precision; max_windows, paged and prefill are
// refused (a stream has no windows and runs token by token).
std::vector<StreamRow> stream_perplexity(const Model& model, std::span<const std::uint8_t> text,
                                         const StreamRequest& request, const ModelRunOptions& options = {});

// Policies for a stream: "name" or "name:key=value[:key=value...]" items,
// comma-separated, each at every budget, `overrides` ("policy.key" or "key",
// as compare takes them) under each item's own. "default" is the set
// docs/streaming.md measures: sliding-window, streaming-llm:sinks=1,
// streaming-llm:sinks=4, h2o, tova, scissorhands, snapkv.
std::vector<RunSpec> stream_specs(std::string_view policies, std::span<const std::int64_t> budgets,
                                  const ParamMap& overrides = {});
inline constexpr std::string_view kDefaultStreamPolicies =
    "sliding-window,streaming-llm:sinks=1,streaming-llm:sinks=4,h2o,tova,scissorhands,snapkv";

// The stream as the model reads it: BOS first where the vocabulary adds one,
// then the text's tokens, with the bytes each stands for (0 for BOS, never
// predicted) -- cut to `wanted` tokens (0: all; more than the text makes is
// refused, InputError). Every engine that streams reads it so.
struct StreamTokens {
  std::vector<Token> tokens;
  std::vector<std::uint32_t> bytes;
  std::string tokenizer;
};
StreamTokens stream_tokens(const Model& model, std::span<const std::uint8_t> text, std::uint32_t wanted);

// Adds the prediction of the token at stream position t (nll nats, the
// token standing for `bytes` bytes) to the row and to its segment, segments
// of `segment` tokens opening as the stream reaches them. Every engine that
// streams (kvevict-llama too) scores through it, so their rows compare
// segment by segment.
void add_stream_prediction(StreamRow& row, std::uint64_t t, std::uint32_t segment, double nll, std::uint32_t bytes);

// A row's name as the tables print it: "full cache", "recompute", the
// policy, or the policy with the parameters its item set ("streaming-llm
// sinks=4").
std::string stream_label(const StreamRow& row);

// Bits per byte over the segments [first, last) of a row: the log-likelihood
// and bytes summed over them; negative when the row stopped before `last`.
double stream_span_bits_per_byte(const StreamRow& row, std::size_t first, std::size_t last);

// The attention sink (docs/streaming.md): on the full cache over the first
// `tokens` tokens (at most the context), the share of each step's attention
// the first position and the first four draw, by layer (mean over the
// layer's caches and the steps from 16 on), beside the share they would draw
// spread evenly over the positions held (1 or 4 of t + 1).
struct SinkShare {
  std::uint32_t layer = 0;
  double first = 0.0;
  double first_four = 0.0;
  double even_first = 0.0;
  double even_first_four = 0.0;
};
std::vector<SinkShare> sink_shares(const Model& model, std::span<const std::uint8_t> text, std::uint32_t tokens = 0);

// The command's document (kvevict/eval/json.h), every segment with its row:
// {"command", "model", "rows": [{"policy", "label", "budget", "params",
// "positions", "tokens", "predictions", "bytes", "bitsPerByte",
// "pastTrainedContext", "peakPositions", "evicted", "kvPrecision",
// "granularity"?, "tokenizer", "seconds", "segments": [{"begin", "end",
// "predictions", "bytes", "bitsPerByte", "perplexity"}]}]}: kvevict stream,
// kvevict llama stream, the C API and the bindings print this one form.
std::string stream_json(const std::vector<StreamRow>& rows, const JsonSource& source);
// The sink shares the same way (kvevict stream --sinks): "rows": [{"layer",
// "first", "firstFour", "evenFirst", "evenFirstFour"}].
std::string sinks_json(const std::vector<SinkShare>& sinks, const JsonSource& source);

// The fields of those rows, in output order (`kvevict schema`).
std::span<const FieldInfo> stream_row_schema();
std::span<const FieldInfo> sink_row_schema();

}  // namespace kvevict
