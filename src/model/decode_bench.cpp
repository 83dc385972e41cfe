#include "kvevict/model/decode_bench.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/bench.h"
#include "kvevict/model/decoder_policies.h"
#include "kvevict/model/perplexity.h"

namespace kvevict {

namespace {

// One pass: a fresh decoder (and fresh policies) over the first `tokens`
// bytes; returns its thread CPU seconds.
double decode_pass(const std::shared_ptr<const Model>& model, std::span<const Token> text,
                   std::uint32_t tokens, const RunSpec* spec, DecodeProfile* profile) {
  Decoder decoder(model, tokens);
  DecoderPolicies policies = spec == nullptr ? DecoderPolicies() : DecoderPolicies(*spec, model->config(), {});
  policies.attach(decoder);
  decoder.set_profile(profile);
  const double started = thread_cpu_seconds();
  float sink = 0.0F;
  for (std::uint32_t i = 0; i < tokens; ++i) sink += decoder.step(text[i]).front();
  const double spent = thread_cpu_seconds() - started;
  volatile float keep = sink;
  (void)keep;
  return spent;
}

}  // namespace

std::vector<DecodeBenchRow> bench_decoder(std::shared_ptr<const Model> model, std::span<const std::uint8_t> text,
                                          const DecodeBenchRequest& request) {
  if (text.empty()) throw InputError("bench --model: the text is empty");
  const std::vector<Token> tokens_of_text = sequence_tokens(*model, text);
  if (request.rounds < 1) throw ParameterError(fmt::format("bench --model: rounds ({}) must be at least 1", request.rounds));
  const auto tokens = static_cast<std::uint32_t>(
      std::min<std::size_t>({request.tokens, tokens_of_text.size(), model->config().context}));
  if (tokens == 0) throw ParameterError("bench --model: no tokens to decode (--tokens 0)");
  // Every run's policies are built once up front, so a bad parameter fails
  // before any timing.
  for (const RunSpec& spec : request.runs) (void)DecoderPolicies(spec, model->config(), {});

  struct Case {
    const RunSpec* spec;
    std::vector<double> seconds;
    DecodeProfile profile;
  };
  std::vector<Case> cases;
  if (request.full_cache) cases.push_back({nullptr, {}, {}});
  for (const RunSpec& spec : request.runs) cases.push_back({&spec, {}, {}});
  // Rounds alternate the runs, so a neighbour's load hits them alike; each
  // round times an unprofiled pass (the speed) and profiles another (the split).
  for (int round = 0; round < request.rounds; ++round) {
    for (Case& c : cases) {
      c.seconds.push_back(decode_pass(model, tokens_of_text, tokens, c.spec, nullptr));
      (void)decode_pass(model, tokens_of_text, tokens, c.spec, &c.profile);
    }
  }
  std::vector<DecodeBenchRow> rows;
  for (Case& c : cases) {
    DecodeBenchRow row;
    row.policy = c.spec == nullptr ? "full cache" : std::string(find_policy(c.spec->policy).name);
    row.budget = c.spec == nullptr ? 0 : c.spec->budget;
    row.tokens = tokens;
    std::vector<double> s = c.seconds;
    std::sort(s.begin(), s.end());
    row.tokens_per_second = tokens / s[s.size() / 2];
    row.tokens_per_second_min = tokens / s.back();
    row.tokens_per_second_max = tokens / s.front();
    const DecodeProfile& p = c.profile;
    const double total = p.total > 0.0 ? p.total : 1.0;
    row.projections = p.projections / total;
    row.activation = p.activation / total;
    row.attention = p.attention / total;
    row.policies = p.policies / total;
    row.other = std::max(0.0, 1.0 - row.projections - row.activation - row.attention - row.policies);
    rows.push_back(row);
  }
  return rows;
}

std::string decode_bench_json(const std::vector<DecodeBenchRow>& rows) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::array();
  for (const DecodeBenchRow& r : rows) {
    doc.push_back({{"policy", r.policy}, {"budget", r.budget}, {"tokens", r.tokens},
                   {"tokensPerSecond", r.tokens_per_second},
                   {"tokensPerSecondSpread", {{"min", r.tokens_per_second_min}, {"median", r.tokens_per_second},
                                              {"max", r.tokens_per_second_max}}},
                   {"shares", {{"projections", r.projections}, {"activation", r.activation},
                               {"attention", r.attention}, {"policies", r.policies}, {"other", r.other}}}});
  }
  return doc.dump(2);
}

}  // namespace kvevict
