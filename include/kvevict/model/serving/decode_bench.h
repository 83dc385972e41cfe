// Where a decode step's time goes on a real model (`kvevict bench --model`):
// tokens per second with the full cache and with each policy, each one's
// split between the matrices, the activation, attention and the policies
// (Decoder::set_profile); against the floor of reading the weights once a
// token; a prompt's prefill (Decoder::prefill); and every run stepped
// together (Decoder::step_together), each at every thread count asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"

namespace kvevict {

struct DecodeBenchRequest {
  std::vector<RunSpec> runs;  // each decodes the text with every cache evicting through it
  bool full_cache = true;     // and a run with the full cache first
  // Tokens prefilled (Decoder::prefill, in chunks of prefill_chunk) before
  // the timed ones, so a pass times steps at a cache of this size; > 0 also
  // times the prefill itself (a "prefill" row a thread count).
  std::uint32_t prompt = 0;
  std::uint32_t prefill_chunk = 256;
  // The prompt's logits (Decoder::prefill): every token's, as perplexity
  // needs them, or the last's only, as a server does (llama.cpp's default).
  PromptLogits prompt_logits = PromptLogits::kEvery;
  std::uint32_t tokens = 1024;  // tokens decoded a pass after the prompt (prompt + tokens at most the text and the context)
  int rounds = 5;               // passes a run; each round runs every run once, in turn
  std::vector<int> threads = {0};  // the rows again at each count (0: every core, default_threads())
  // and a "together" row: every run stepped as one batch; with a prompt, a
  // "prefill together" row too: every run's prompt fed as one batch
  bool together = false;
  bool profile = true;          // a profiled pass a round (the shares); off: zeros
  // Called once the request is checked, before any timing, with the tokens
  // a pass decodes (the tool's progress line).
  std::function<void(std::uint32_t tokens)> on_start;
};

struct DecodeBenchRow {
  // "decode" (a run alone), "prefill" (the prompt with the full cache),
  // "together" (every run stepped as one batch; policy "all runs") or
  // "prefill together" (every run's prompt fed as one batch, several tokens
  // a pass: Decoder::prefill_together; policy "all runs").
  std::string mode = "decode";
  std::string policy;        // "full cache" for the full cache
  std::int64_t budget = 0;   // 0 for the full cache and the batch
  int threads = 1;           // the products' threads
  std::uint32_t runs = 1;    // decoders a pass steps
  std::uint64_t prompt = 0;  // tokens prefilled before the timed ones (untimed, but for a prefill row)
  std::uint64_t tokens = 0;  // tokens a pass times: the prompt for a prefill row, else the decoded ones
  // Wall time of the unprofiled passes: the median round, and the range. A
  // "together" row counts every run's tokens (runs x tokens a pass).
  double tokens_per_second = 0.0;
  double tokens_per_second_min = 0.0;
  double tokens_per_second_max = 0.0;
  // The floor: reading the weights once a token (Model::weight_bytes_per_token)
  // at the read bandwidth of this many threads, measured in the same run.
  std::uint64_t weight_bytes_per_token = 0;
  double read_bandwidth_gb_s = 0.0;
  double floor_tokens_per_second = 0.0;
  double of_floor = 0.0;  // tokens_per_second / floor_tokens_per_second (1: memory speed)
  // prefill: over the full cache's decode at these threads; together: the
  // runs one at a time over the batch (their summed median times over its
  // median time); prefill together: the prompts stepped together a token a
  // pass (step_together) over the passes; 0 for a decode row.
  double speedup = 0.0;
  // Shares of a step's time, from a profiled pass a round (they sum to 1 with
  // `other`: residual adds, copies and bookkeeping). Decode rows only.
  double projections = 0.0;
  double activation = 0.0;
  double attention = 0.0;
  double policies = 0.0;
  double other = 0.0;
};

// Throws InputError for an empty text or one too short for prompt + tokens,
// ParameterError for a bad request or run (as perplexity would), before any
// timing.
std::vector<DecodeBenchRow> bench_decoder(std::shared_ptr<const Model> model, std::span<const std::uint8_t> text,
                                          const DecodeBenchRequest& request);

// The rows as JSON, the one description of a row: the bindings return this
// array, and `kvevict bench --model --format json` prints it as the rows of
// its envelope (decode_bench_document, kvevict/model/evaluation/command_schema.h).
// An array (indented by 2, no trailing newline) of
// {"mode", "policy", "budget", "threads", "runs", "prompt", "tokens",
// "tokensPerSecond", "tokensPerSecondSpread": {"min", "median", "max"},
// "weightBytesPerToken", "readBandwidthGBps", "floorTokensPerSecond",
// "ofFloor", "speedup" (0 for a decode row), "shares": {"projections",
// "activation", "attention", "policies", "other"}}.
std::string decode_bench_json(const std::vector<DecodeBenchRow>& rows);

}  // namespace kvevict
