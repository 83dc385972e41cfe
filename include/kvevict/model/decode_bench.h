// Where a decode step's time goes on a real model (`kvevict bench --model`):
// tokens per second with the full cache and with each policy, and each one's
// split between the matrices, the activation, attention and the policies
// (Decoder::set_profile).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/model/model.h"

namespace kvevict {

struct DecodeBenchRequest {
  std::vector<RunSpec> runs;  // each decodes the text with every cache evicting through it
  bool full_cache = true;     // and a run with the full cache first
  std::uint32_t tokens = 1024;  // tokens decoded a pass, from the text's start (at most the text and the context)
  int rounds = 5;               // passes a run; each round runs every run once, in turn
};

struct DecodeBenchRow {
  std::string policy;  // "full cache" for the full cache
  std::int64_t budget = 0;  // 0 for the full cache
  std::uint64_t tokens = 0;  // a pass's
  // Thread CPU time of the unprofiled passes: the median round, and the range.
  double tokens_per_second = 0.0;
  double tokens_per_second_min = 0.0;
  double tokens_per_second_max = 0.0;
  // Shares of a step's time, from a profiled pass a round (they sum to 1 with
  // `other`: residual adds, copies and bookkeeping).
  double projections = 0.0;
  double activation = 0.0;
  double attention = 0.0;
  double policies = 0.0;
  double other = 0.0;
};

// Throws InputError for an empty text, ParameterError for a bad run (as
// perplexity would).
std::vector<DecodeBenchRow> bench_decoder(std::shared_ptr<const Model> model, std::span<const std::uint8_t> text,
                                          const DecodeBenchRequest& request);

// The rows as JSON, the one description `kvevict bench --model --format json`
// and the bindings print: an array (indented by 2, no trailing newline) of
// {"policy", "budget", "tokens", "tokensPerSecond", "tokensPerSecondSpread":
// {"min", "median", "max"}, "shares": {"projections", "activation",
// "attention", "policies", "other"}}.
std::string decode_bench_json(const std::vector<DecodeBenchRow>& rows);

}  // namespace kvevict
