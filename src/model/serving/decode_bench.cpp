#include "kvevict/model/serving/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/bench.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/kernels/matmul.h"
#include "kvevict/model/decoder/model_text.h"

namespace kvevict {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One run's decoder and policies, with the prompt prefilled in chunks.
struct Run {
  std::unique_ptr<Decoder> decoder;
  DecoderPolicies policies;
};

Run prepared(const std::shared_ptr<const Model>& model, const RunSpec* spec, std::span<const Token> prompt,
             std::uint32_t capacity, std::uint32_t chunk, PromptLogits logits, int threads, double* prefill_seconds) {
  DecoderOptions options;
  options.capacity = capacity;
  options.prefill_chunk = chunk;
  options.threads = threads;
  Run run;
  run.decoder = std::make_unique<Decoder>(model, options);
  if (spec != nullptr) run.policies = DecoderPolicies(*spec, model->config(), {});
  run.policies.attach(*run.decoder);
  const auto started = Clock::now();
  for (std::size_t at = 0; at < prompt.size(); at += chunk) {
    (void)run.decoder->prefill(prompt.subspan(at, std::min<std::size_t>(chunk, prompt.size() - at)), logits);
  }
  if (prefill_seconds != nullptr) *prefill_seconds = seconds_since(started);
  return run;
}

struct Median {
  double median, min, max;
};
Median median_of(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds.front(), seconds.back()};
}

// One run timed at one thread count: its decode passes and profile.
struct Case {
  const RunSpec* spec;
  std::vector<double> seconds;
  DecodeProfile profile;
};
// Every run at one thread count, and the passes timed over all of them.
struct AtThreads {
  int threads;
  double bandwidth_gb_s;
  std::vector<Case> cases;
  std::vector<double> prefill_seconds;
  std::vector<double> together_seconds;
  // The prompt fed to every run together: a token a pass (step_together)
  // and passes of several (prefill_together).
  std::vector<double> prompt_stepped_seconds;
  std::vector<double> prompt_passed_seconds;
};

// Every run's prompt fed together, a token a pass (step_together) and
// Decoder::together_pass_tokens a pass (prefill_together), from empty caches:
// the evaluations' way to read a window or a task's prompt. Only the lead of
// a pass needs a chunk (at most the request's).
void time_prompts_together(const std::shared_ptr<const Model>& model, AtThreads& at, std::span<const Token> prompt,
                           std::uint32_t capacity, std::uint32_t most_chunk, float& sink) {
  const std::uint32_t pass = std::min(Decoder::together_pass_tokens(at.cases.size()), most_chunk);
  std::vector<Run> stepped, passed;
  std::vector<Decoder*> one_a_pass, several_a_pass;
  for (const Case& c : at.cases) {
    const std::uint32_t chunk = stepped.empty() ? pass : 1;
    stepped.push_back(prepared(model, c.spec, {}, capacity, 1, PromptLogits::kEvery, at.threads, nullptr));
    passed.push_back(prepared(model, c.spec, {}, capacity, chunk, PromptLogits::kEvery, at.threads, nullptr));
    one_a_pass.push_back(stepped.back().decoder.get());
    several_a_pass.push_back(passed.back().decoder.get());
  }
  std::vector<Token> same(at.cases.size());
  auto started = Clock::now();
  for (const Token t : prompt) {
    std::fill(same.begin(), same.end(), t);
    Decoder::step_together(one_a_pass, same);
  }
  at.prompt_stepped_seconds.push_back(seconds_since(started));
  sink += one_a_pass.front()->last_logits().front();
  started = Clock::now();
  for (std::size_t i = 0; i < prompt.size(); i += pass) {
    (void)Decoder::prefill_together(several_a_pass, prompt.subspan(i, std::min<std::size_t>(pass, prompt.size() - i)));
  }
  at.prompt_passed_seconds.push_back(seconds_since(started));
  sink += several_a_pass.front()->last_logits().front();
}

void check_request(std::span<const std::uint8_t> text, const DecodeBenchRequest& request) {
  if (text.empty()) throw InputError("bench --model: the text is empty");
  if (request.rounds < 1 || request.rounds > 1000) {
    throw ParameterError(fmt::format("bench --model: rounds ({}) must be in 1 ... 1000", request.rounds));
  }
  if (request.threads.empty()) throw ParameterError("bench --model: no thread counts given");
  for (const int t : request.threads) {
    if (t < 0 || t > 1024) throw ParameterError(fmt::format("bench --model: threads ({}) must be in 0 ... 1024 (0: every core)", t));
  }
  if (request.prefill_chunk < 1 || request.prefill_chunk > 4096) {
    throw ParameterError(fmt::format("bench --model: the prefill chunk ({}) must be in 1 ... 4096", request.prefill_chunk));
  }
  if (request.tokens == 0) throw ParameterError("bench --model: no tokens to decode (--tokens 0)");
  if (!request.full_cache && request.runs.empty()) throw ParameterError("bench --model: no runs (no policy, no full cache)");
}

}  // namespace

std::vector<DecodeBenchRow> bench_decoder(std::shared_ptr<const Model> model, std::span<const std::uint8_t> text,
                                          const DecodeBenchRequest& request) {
  check_request(text, request);
  const std::vector<Token> tokens_of_text = sequence_tokens(*model, text);
  const std::size_t available = std::min<std::size_t>(tokens_of_text.size(), model->config().context);
  if (request.prompt >= available) {
    throw InputError(fmt::format("bench --model: a prompt of {} tokens leaves none to decode: the text makes {} tokens "
                                 "and the model runs {} positions",
                                 request.prompt, tokens_of_text.size(), model->config().context));
  }
  const auto tokens = static_cast<std::uint32_t>(std::min<std::size_t>(request.tokens, available - request.prompt));
  const std::uint32_t capacity = request.prompt + tokens;
  const std::span<const Token> prompt(tokens_of_text.data(), request.prompt);
  const std::span<const Token> decoded(tokens_of_text.data() + request.prompt, tokens);
  // Every run's policies are built once up front, so a bad parameter fails
  // before any timing.
  for (const RunSpec& spec : request.runs) (void)DecoderPolicies(spec, model->config(), {});
  if (request.on_start) request.on_start(tokens);

  std::vector<AtThreads> counts;
  for (const int asked : request.threads) {
    const int t = asked == 0 ? default_threads() : asked;
    AtThreads at{t, measure_parallel_read_bandwidth(std::size_t{512} << 20, 3, t), {}, {}, {}, {}, {}};
    if (request.full_cache) at.cases.push_back({nullptr, {}, {}});
    for (const RunSpec& spec : request.runs) at.cases.push_back({&spec, {}, {}});
    counts.push_back(std::move(at));
  }
  float sink = 0.0F;
  // Rounds alternate the runs, so a neighbour's load hits them alike; each
  // round times an unprofiled pass (the speed) and profiles another (the split).
  for (int round = 0; round < request.rounds; ++round) {
    for (AtThreads& at : counts) {
      for (Case& c : at.cases) {
        double prefill = 0.0;
        Run run = prepared(model, c.spec, prompt, capacity, request.prefill_chunk, request.prompt_logits, at.threads, &prefill);
        if (c.spec == nullptr && !prompt.empty()) at.prefill_seconds.push_back(prefill);
        const auto started = Clock::now();
        for (const Token t : decoded) sink += run.decoder->step(t).front();
        c.seconds.push_back(seconds_since(started));
        if (request.profile) {
          Run profiled = prepared(model, c.spec, prompt, capacity, request.prefill_chunk, request.prompt_logits, at.threads, nullptr);
          profiled.decoder->set_profile(&c.profile);
          for (const Token t : decoded) sink += profiled.decoder->step(t).front();
        }
      }
      if (request.together) {
        std::vector<Run> runs;
        std::vector<Decoder*> batch;
        for (const Case& c : at.cases) {
          runs.push_back(prepared(model, c.spec, prompt, capacity, request.prefill_chunk, request.prompt_logits, at.threads, nullptr));
          batch.push_back(runs.back().decoder.get());
        }
        std::vector<Token> same(batch.size());
        const auto started = Clock::now();
        for (const Token t : decoded) {
          std::fill(same.begin(), same.end(), t);
          Decoder::step_together(batch, same);
          sink += batch.front()->last_logits().front();
        }
        at.together_seconds.push_back(seconds_since(started));
        if (!prompt.empty()) time_prompts_together(model, at, prompt, capacity, request.prefill_chunk, sink);
      }
    }
  }
  volatile float keep = sink;
  (void)keep;

  const std::uint64_t weight_bytes = model->weight_bytes_per_token();
  std::vector<DecodeBenchRow> rows;
  for (const AtThreads& at : counts) {
    const double floor = at.bandwidth_gb_s * 1e9 / static_cast<double>(weight_bytes);
    auto row_of = [&](std::string mode, std::string policy, std::int64_t budget, std::uint32_t runs,
                      std::uint64_t timed, const std::vector<double>& seconds) {
      DecodeBenchRow row;
      row.mode = std::move(mode);
      row.policy = std::move(policy);
      row.budget = budget;
      row.threads = at.threads;
      row.runs = runs;
      row.prompt = request.prompt;
      row.tokens = timed;
      const Median m = median_of(seconds);
      const double counted = static_cast<double>(timed) * runs;
      row.tokens_per_second = counted / m.median;
      row.tokens_per_second_min = counted / m.max;
      row.tokens_per_second_max = counted / m.min;
      row.weight_bytes_per_token = weight_bytes;
      row.read_bandwidth_gb_s = at.bandwidth_gb_s;
      row.floor_tokens_per_second = floor;
      row.of_floor = row.tokens_per_second / floor;
      return row;
    };
    const std::size_t first = rows.size();
    for (const Case& c : at.cases) {
      DecodeBenchRow row = c.spec == nullptr ? row_of("decode", "full cache", 0, 1, tokens, c.seconds)
                                             : row_of("decode", std::string(find_policy(c.spec->policy).name),
                                                      c.spec->budget, 1, tokens, c.seconds);
      const DecodeProfile& p = c.profile;
      if (p.total > 0.0) {
        row.projections = p.projections / p.total;
        row.activation = p.activation / p.total;
        row.attention = p.attention / p.total;
        row.policies = p.policies / p.total;
        row.other = std::max(0.0, 1.0 - row.projections - row.activation - row.attention - row.policies);
      }
      rows.push_back(row);
    }
    if (!at.prefill_seconds.empty()) {
      DecodeBenchRow row = row_of("prefill", "full cache", 0, 1, request.prompt, at.prefill_seconds);
      row.speedup = row.tokens_per_second / rows[first].tokens_per_second;  // the full cache's decode
      rows.insert(rows.begin() + static_cast<std::ptrdiff_t>(first), row);
    }
    if (request.together) {
      const auto n = static_cast<std::uint32_t>(at.cases.size());
      DecodeBenchRow row = row_of("together", "all runs", 0, n, tokens, at.together_seconds);
      double alone = 0.0;
      for (const Case& c : at.cases) alone += median_of(c.seconds).median;
      row.speedup = alone / median_of(at.together_seconds).median;
      rows.push_back(row);
      if (!at.prompt_passed_seconds.empty()) {
        DecodeBenchRow fed = row_of("prefill together", "all runs", 0, n, request.prompt, at.prompt_passed_seconds);
        fed.speedup = median_of(at.prompt_stepped_seconds).median / median_of(at.prompt_passed_seconds).median;
        rows.push_back(fed);
      }
    }
  }
  return rows;
}

std::string decode_bench_json(const std::vector<DecodeBenchRow>& rows) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::array();
  for (const DecodeBenchRow& r : rows) {
    doc.push_back({{"mode", r.mode}, {"policy", r.policy}, {"budget", r.budget}, {"threads", r.threads},
                   {"runs", r.runs}, {"prompt", r.prompt}, {"tokens", r.tokens},
                   {"tokensPerSecond", r.tokens_per_second},
                   {"tokensPerSecondSpread", {{"min", r.tokens_per_second_min}, {"median", r.tokens_per_second},
                                              {"max", r.tokens_per_second_max}}},
                   {"weightBytesPerToken", r.weight_bytes_per_token},
                   {"readBandwidthGBps", r.read_bandwidth_gb_s},
                   {"floorTokensPerSecond", r.floor_tokens_per_second},
                   {"ofFloor", r.of_floor},
                   {"speedup", r.speedup},
                   {"shares", {{"projections", r.projections}, {"activation", r.activation},
                               {"attention", r.attention}, {"policies", r.policies}, {"other", r.other}}}});
  }
  return doc.dump(2);
}

}  // namespace kvevict
