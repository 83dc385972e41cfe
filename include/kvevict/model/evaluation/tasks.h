// Retrieval tasks through the real model: what a policy costs when the answer
// sits in one distant place. A task sample is natural filler text with one or
// more needles in it, then a question whose answer only a needle holds; the
// model answers by greedy decoding and is scored by exact match. The formats
// are model/tasks.py's (the model was trained on them) and docs/tasks.md's.
//
// Three moments of compression, as the field evaluates them:
//   decode         every cache evicts token by token from the first byte on
//                  (what `compare --model` measures);
//   prefill        the context is read with the full cache, then compressed
//                  once to the budget before the question is seen
//                  (query-agnostic), and the question and answer run
//                  without further eviction;
//   prefill-query  the same, compressed after the question has been read
//                  (query-aware: SnapKV's observation window covers it).
//                  As in a real prefill, the prompt's last step -- which
//                  predicts the answer's first byte -- runs with the full
//                  cache, and the compression follows it: the first answer
//                  byte is read from the uncompressed cache, the rest from
//                  the compressed one. (Perplexity's prefill mode leaves that
//                  byte out of its score instead: ModelRunOptions::prefill.)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/core/params.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/eval/rng.h"
#include "kvevict/eval/task_rows.h"

namespace kvevict {

// task_names() (passkey, multikey, multivalue, vartrack, copy) is declared
// in eval/task_rows.h, where the task-row reader checks names against it.

struct TaskSample {
  std::string task;
  std::vector<std::uint8_t> prompt;  // filler with the needles, then the question
  std::string answer;                // what greedy decoding must produce next
  double depth = 0.0;                // where the asked needle was put, 0 (start) ... 1 (end)
  std::uint32_t needle = 0;          // its byte offset in the prompt (multivalue: the value put at `depth`)
  std::uint32_t question = 0;        // where the question starts (the context ends)
};

// How far past its depth a needle may sit: a needle asked for at depth d of
// an F-byte filler starts at a filler offset in [round(d*F), round(d*F) +
// kNeedleShift] -- at the next word's start when one is that near, else
// exactly at round(d*F), inside a word. Every task's needles follow it.
inline constexpr std::size_t kNeedleShift = 25;

// Where in `filler` a needle at `depth` goes (the rule above).
std::size_t needle_cut(std::string_view filler, double depth);

// The generator of sample `sample` of a task x length x depth cell: its own
// stream for every (seed, task, length, depth, sample) with length below
// 2^24 and depths at least 2^-30 apart (any grid kvevict tasks accepts), and
// the same stream whichever other cells a request asks for.
Rng task_sample_rng(std::uint32_t seed, std::string_view task, std::uint32_t length, double depth,
                    std::uint32_t sample);

// The largest grid kvevict tasks builds: samples are all made before any
// work (about `length` bytes each), and each is answered once per
// configuration.
inline constexpr std::uint64_t kMaxTaskSamples = 100'000;
inline constexpr std::uint64_t kMaxTaskDepths = 1'000;
inline constexpr std::uint64_t kMaxTaskJobs = 10'000'000;

// One sample of exactly `length` bytes (prompt, answer and the closing bytes
// the trainer saw after it), filler cut at random from `filler`. Throws
// InputError for an unknown task, a length too short to hold it, or filler
// shorter than the sample, and ParameterError for a depth outside [0, 1].
TaskSample make_task(std::string_view task, std::uint32_t length, double depth, Rng& rng,
                     std::span<const std::uint8_t> filler);

struct TaskRequest {
  std::vector<std::string> tasks{"passkey"};
  std::vector<std::uint32_t> lengths{1024};  // sample lengths in bytes (at most the model's context)
  std::uint32_t depths = 5;                  // needle depths (i + 0.5) / depths, i = 0 ... depths-1
  std::uint32_t samples = 20;                // per task x length x depth
  std::uint32_t seed = 1;
  std::vector<std::string> policies;         // empty: every registered policy
  std::vector<std::int64_t> budgets{128};
  ParamMap overrides;                        // "policy.param" or "param", as compare takes them
  std::vector<Moment> moments{Moment::decode};
  // Prefill moments: attention rows of the last `window` prompt bytes that
  // the compression scores from (SnapKV's observation window).
  std::uint32_t window = 32;
  // Prefill moments: read the compressed bytes in chunks of `chunk`,
  // compressing after each (docs/serving.md); 0: once, after them all.
  std::uint32_t chunk = 0;
};

// Greedy exact match of one sample with the given policy (null spec: the
// full cache). `evicted` receives the positions removed.
// `kv`: the precision the decoder stores keys and values at; `granularity`
// (paged.h): which caches share the budget at the decode moment.
bool answer_task(const std::shared_ptr<const Model>& model, const TaskSample& sample, const RunSpec* spec,
                 Moment moment, std::uint32_t window, std::uint64_t* evicted = nullptr, std::uint32_t chunk = 0,
                 const KvFormat& kv = {}, const PagedOptions& granularity = {});

// One configuration of a sample's answers: a policy (null: the full cache)
// at a moment of compression.
struct TaskConfig {
  const RunSpec* spec = nullptr;
  Moment moment = Moment::full;
};
struct TaskAnswer {
  bool right = false;
  std::uint64_t evicted = 0;  // positions removed
};

// answer_task for every configuration at once, stepped together
// (Decoder::step_together): the prompt's tokens are the same for all, so
// each weight is read once a token for every configuration; then each feeds
// its own greedy answer, leaving the batch once its answer is settled. The
// answers are each configuration's answer_task, to the bit (tested).
// `threads`: the products' (DecoderOptions::threads).
std::vector<TaskAnswer> answer_task_together(const std::shared_ptr<const Model>& model, const TaskSample& sample,
                                             std::span<const TaskConfig> configs, std::uint32_t window,
                                             std::uint32_t chunk = 0, const KvFormat& kv = {}, int threads = 0,
                                             const PagedOptions& granularity = {});

// Every task x length x depth: the full cache, then each policy x budget x
// moment, in that order. Every request is checked -- each policy built with
// each layer's parameters, the grid against kMaxTaskSamples, kMaxTaskDepths
// and kMaxTaskJobs, and (once every sample is generated) each prefill
// moment's window against each layer's budget wherever a sample is longer
// than the budget -- before any work; work runs on every core. On a model on
// the weight kernels (Model::uses_kernels) with options.together, each
// sample's configurations are answered stepped together
// (answer_task_together), the answers of one at a time to the bit.
// options.progress counts each sample's length in tokens once a
// configuration: its prompt's tokens as they are read, the rest once it is
// answered.
//
// The positions a sample's prompt takes on `model`: its bytes for
// kvevict-tiny, its tokens (BOS included) for a model with a tokenizer.
std::uint32_t task_tokens(const Model& model, const TaskSample& sample);

std::vector<TaskRow> run_tasks(const std::shared_ptr<const Model>& model, std::span<const std::uint8_t> filler,
                               const TaskRequest& request, const ModelRunOptions& options = {});

}  // namespace kvevict
