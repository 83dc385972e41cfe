#include "kvevict/model/evaluation/command_schema.h"

#include <algorithm>
#include <vector>

#include "kvevict/eval/task_rows.h"
#include "kvevict/model/evaluation/choose.h"
#include "kvevict/model/evaluation/perplexity_rows.h"
#include "kvevict/model/evaluation/stream.h"
#include "kvevict/model/serving/serve_bench.h"

namespace kvevict {

namespace {

constexpr FieldInfo kSpreadInfos[] = {
    {"min", FieldType::kNumber, "tokens per second", "the slowest timed pass", "", {}},
    {"median", FieldType::kNumber, "tokens per second", "the median pass (= tokensPerSecond)", "", {}},
    {"max", FieldType::kNumber, "tokens per second", "the fastest timed pass", "", {}},
};
constexpr FieldInfo kShareInfos[] = {
    {"projections", FieldType::kNumber, "share (0..1)", "the weight products and norms", "", {}},
    {"activation", FieldType::kNumber, "share (0..1)", "the feed-forward activation", "", {}},
    {"attention", FieldType::kNumber, "share (0..1)",
     "RoPE, storing the key and value, scores, softmax and the values' weighted sum", "", {}},
    {"policies", FieldType::kNumber, "share (0..1)", "the policies' steps, evictions and the store's removals", "",
     {}},
    {"other", FieldType::kNumber, "share (0..1)", "residual adds, copies and bookkeeping", "", {}},
};
// decode_bench_json's row (kvevict/model/serving/decode_bench.h).
constexpr FieldInfo kDecodeBenchInfos[] = {
    {"mode", FieldType::kString, "", "decode, prefill, together or prefill together", "", {}},
    {"policy", FieldType::kString, "", "the policy (\"full cache\" for the full cache)", "", {}},
    {"budget", FieldType::kInteger, "positions", "cache budget (0: the full cache and the batch)", "", {}},
    {"threads", FieldType::kInteger, "threads", "the products' threads", "", {}},
    {"runs", FieldType::kInteger, "decoders", "decoders a pass steps", "", {}},
    {"prompt", FieldType::kInteger, "tokens", "tokens prefilled before the timed ones", "", {}},
    {"tokens", FieldType::kInteger, "tokens", "tokens a pass times", "", {}},
    {"tokensPerSecond", FieldType::kNumber, "tokens per second", "the median of the timed passes (varies run to run)",
     "", {}},
    {"tokensPerSecondSpread", FieldType::kObject, "tokens per second", "over the timed passes", "", kSpreadInfos},
    {"weightBytesPerToken", FieldType::kInteger, "bytes", "the weights' bytes a token reads", "", {}},
    {"readBandwidthGBps", FieldType::kNumber, "GB/s", "read bandwidth of as many threads", "", {}},
    {"floorTokensPerSecond", FieldType::kNumber, "tokens per second",
     "weightBytesPerToken over the read bandwidth: memory speed", "", {}},
    {"ofFloor", FieldType::kNumber, "", "tokensPerSecond over floorTokensPerSecond (1: memory speed)", "", {}},
    {"speedup", FieldType::kNumber, "", "a prefill over the full cache's decode, a batch over its runs one at a time; "
     "0 for a decode row", "", {}},
    {"shares", FieldType::kObject, "", "shares of a step's time from profiled passes (decode rows; 0 otherwise)", "",
     kShareInfos},
};

// kvevict llama perplexity's row (tools/llama/perplexity.cpp): llama.cpp
// decoding, its cells kept by a kvevict policy.
constexpr FieldInfo kLlamaPerplexityInfos[] = {
    {"engine", FieldType::kString, "", "llama.cpp", "", {}},
    {"policy", FieldType::kString, "", "registry name of the policy; null for the full cache", "", {}},
    {"budget", FieldType::kInteger, "positions", "cells the sequence keeps (0: the full cache)", "", {}},
    {"granularity", FieldType::kString, "", "sequence: llama.cpp's cells hold every cache's positions together", "",
     {}},
    {"bitsPerByte", FieldType::kNumber, "bits per byte", "the predictions' negative log-likelihood over their bytes",
     "", {}},
    {"extraBitsPerByte", FieldType::kNumber, "bits per byte", "over the full cache's, same windows; null for it", "",
     {}},
    {"extraLow", FieldType::kNumber, "bits per byte", "low end of its 95 % interval, paired by window; null for the "
     "full cache or one window", "", {}},
    {"extraHigh", FieldType::kNumber, "bits per byte", "high end of the same interval; null where extraLow is", "", {}},
    {"perplexity", FieldType::kNumber, "", "exp of the mean negative log-likelihood per predicted token", "", {}},
    {"predictions", FieldType::kInteger, "tokens", "tokens predicted, every window", "", {}},
    {"predictedBytes", FieldType::kInteger, "bytes", "the bytes they stand for", "", {}},
    {"evicted", FieldType::kInteger, "positions", "cells removed", "", {}},
    {"windows", FieldType::kInteger, "windows", "windows read", "", {}},
    {"kvPrecision", FieldType::kString, "", "llama.cpp's KV cache type", "", {}},
    {"seconds", FieldType::kNumber, "seconds", "wall time of the row (varies run to run)", "", {}},
    {"policySeconds", FieldType::kNumber, "seconds", "of it, the policy's (after each decode)", "", {}},
    {"callbackCopySeconds", FieldType::kNumber, "seconds", "of it, the eval callback's copies of attention", "", {}},
};

std::vector<CommandSchema> all_commands() {
  const std::span<const CommandSchema> eval = eval_command_schemas();
  const auto from_eval = [&](std::string_view command, std::string_view variant) {
    return *std::find_if(eval.begin(), eval.end(), [&](const CommandSchema& c) {
      return c.command == command && c.variant == variant;
    });
  };
  const std::span<const FieldInfo> ppl = perplexity_row_schema();
  return {
      from_eval("list", ""),
      from_eval("run", ""),
      from_eval("compare", ""),
      {"compare", "--model", "path", ppl, {}},
      {"perplexity", "", "path", ppl, {}},
      {"stream", "", "path", stream_row_schema(), {}},
      {"stream", "--sinks", "path", sink_row_schema(), {}},
      {"serve-bench", "", "path", serve_row_schema(), {}},
      {"tasks", "", "path", task_row_schema(), {}},
      {"choose", "", "path", choose_row_schema(), choose_extra_schema()},
      from_eval("persistence", ""),
      from_eval("persistence", "--model"),
      from_eval("sweep", ""),
      {"sweep", "--model", "path", ppl, {}},
      from_eval("bench", ""),
      {"bench", "--model", "path", kDecodeBenchInfos, {}},
      from_eval("simd", ""),
      from_eval("schema", ""),
      {"llama perplexity", "", "path", kLlamaPerplexityInfos, {}},
      {"llama stream", "", "path", stream_row_schema(), {}},
  };
}

}  // namespace

std::span<const CommandSchema> command_schemas() {
  static const std::vector<CommandSchema> commands = all_commands();
  return commands;
}

std::string result_schema_json(int indent) { return schema_json(command_schemas(), indent); }

std::string decode_bench_document(const std::vector<DecodeBenchRow>& rows, const JsonSource& source, int indent) {
  return envelope_json(source, decode_bench_json(rows), {}, indent);
}

}  // namespace kvevict
