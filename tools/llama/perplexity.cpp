// kvevict-llama perplexity: the text cut into windows of the context as
// `kvevict perplexity` cuts them (kvevict's tokenizer, BOS first where the
// vocabulary adds one; model_text.h's text_windows), each window fed to
// llama.cpp one token a decode -- once with the full cache, once with each
// policy holding the sequence at the budget (llama_memory_seq_rm) -- and
// scored as kvevict scores it: bits per byte of the predicted tokens, and
// each policy's extra bits against the full cache, paired by window.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/intervals.h"
#include "kvevict/eval/json.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/decoder/model_text.h"

namespace kvevict::llama_tool {

namespace {

struct Row {
  std::string policy;  // empty: the full cache
  std::int64_t budget = 0;
  double nll = 0.0;  // nats, summed
  std::uint64_t predictions = 0, bytes = 0, evicted = 0;
  double seconds = 0.0, policy_seconds = 0.0, copy_seconds = 0.0;
  std::vector<double> window_nll, window_bytes;  // nats and bytes of each window, for the paired interval
};

Row run(llama_model* lm, const TokenizedText& text, const std::vector<TextWindow>& windows, const PerplexityArgs& a,
        const std::optional<RunSpec>& spec) {
  // One context a run: the full cache's has no callback at all.
  LlamaPolicySlot hook;  // the policy comes once llama.cpp says how many cells the context has
  const Context context = make_context(lm, a.context, a.engine, spec ? &hook : nullptr);
  llama_context* ctx = context.get();
  std::optional<LlamaPolicy> policy;
  if (spec) {
    policy.emplace(llama_shape(lm), policy_options(*spec, llama_n_ctx(ctx)));
    hook.policy = &*policy;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(lm));
  const LlamaShape shape = llama_shape(lm);
  const std::uint64_t caches = std::uint64_t{shape.layers} * shape.kv_heads;
  llama_batch batch = llama_batch_init(1, 0, 1);
  Row row;
  if (spec) {
    row.policy = spec->policy;
    row.budget = spec->budget;
  }
  const auto started = std::chrono::steady_clock::now();
  for (const TextWindow& w : windows) {
    llama_memory_clear(llama_get_memory(ctx), true);
    if (policy) policy->reset(0);
    double window_nll = 0.0;
    std::uint64_t window_bytes = 0;
    // The window's last token predicts nothing: it is not fed (as kvevict perplexity).
    for (std::uint32_t i = 0; i + 1 < w.length; ++i) {
      const Token token = w.token_at(text, i);
      decode_one(ctx, batch, token, static_cast<llama_pos>(i));
      if (policy) {
        const std::int32_t seq = 0, pos = static_cast<std::int32_t>(i);
        policy->after_decode(ctx, std::span<const std::int32_t>(&seq, 1), std::span<const std::int32_t>(&pos, 1));
        // Every cache loses each victim: counted as kvevict counts them.
        row.evicted += policy->victims(0).size() * caches;
      }
      window_nll += next_token_nll(ctx, vocab, w.token_at(text, i + 1));
      window_bytes += w.bytes_at(text, i + 1);
      ++row.predictions;
    }
    row.nll += window_nll;
    row.bytes += window_bytes;
    row.window_nll.push_back(window_nll);
    row.window_bytes.push_back(static_cast<double>(window_bytes));
  }
  row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (policy) {
    row.policy_seconds = policy->policy_seconds();
    row.copy_seconds = policy->copy_seconds();
  }
  llama_batch_free(batch);
  return row;
}

double bits_per_byte(const Row& r) {
  return r.bytes == 0 ? 0.0 : r.nll / std::numbers::ln2 / static_cast<double>(r.bytes);
}

}  // namespace

int perplexity(const PerplexityArgs& a) {
  const std::shared_ptr<const Model> model = Model::load(a.engine.model);  // kvevict's tokenizer and windows
  PerplexityArgs args = a;
  if (args.context == 0) args.context = std::min<std::uint32_t>(model->config().context, 4096);
  if (args.context < 2) throw ParameterError(fmt::format("--context ({}) must be at least 2", args.context));
  std::vector<RunSpec> specs;
  const ParamMap params = parse_assignments(a.sets);
  for (std::size_t at = 0; !a.policy.empty() && at <= a.policy.size();) {
    const std::size_t comma = std::min(a.policy.find(',', at), a.policy.size());
    const PolicyInfo& info = find_policy(a.policy.substr(at, comma - at));
    check_flash(std::string(info.name), a.engine.flash);
    ParamMap own;
    for (const auto& [key, value] : params) {
      if (info.has_param(key)) set_param(own, key, value);
    }
    specs.push_back(RunSpec{std::string(info.name), own, a.budget});
    at = comma + 1;
  }
  for (const auto& [key, value] : params) {
    const bool used = std::any_of(specs.begin(), specs.end(), [&](const RunSpec& r) {
      return find_policy(r.policy).has_param(key);
    });
    if (!used) throw ParameterError(fmt::format("--set {}={}: no policy given has the parameter {}", key, value, key));
  }
  const TokenizedText text = tokenize_text(*model, read_text(a.text));
  const std::vector<TextWindow> windows = text_windows(text, args.context, a.max_windows);
  if (windows.empty()) throw InputError(fmt::format("{}: too short to predict a token", a.text));

  std::vector<Row> rows;
  {
    const LlamaModel loaded(a.engine.model);
    llama_model* lm = loaded.get();
    // Every policy built (and its parameters checked) before any work.
    for (const RunSpec& spec : specs) LlamaPolicy probe(llama_shape(lm), policy_options(spec, args.context));
    rows.push_back(run(lm, text, windows, args, std::nullopt));
    for (const RunSpec& spec : specs) rows.push_back(run(lm, text, windows, args, spec));
  }

  // What each policy costs beside the full cache, paired by window (as kvevict perplexity).
  const auto cost = [&](const Row& r) {
    std::vector<double> extra(windows.size());
    for (std::size_t i = 0; i < windows.size(); ++i) extra[i] = (r.window_nll[i] - rows.front().window_nll[i]) / std::numbers::ln2;
    return ratio_interval(extra, rows.front().window_bytes);
  };
  if (a.format == "json") {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json j;
      j["engine"] = "llama.cpp";
      j["policy"] = r.policy.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.policy);
      j["budget"] = r.budget;
      j["granularity"] = "sequence";
      j["bitsPerByte"] = bits_per_byte(r);
      j["extraBitsPerByte"] = r.policy.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(cost(r).mean);
      j["extraLow"] = r.policy.empty() || !cost(r).has_interval ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(cost(r).low);
      j["extraHigh"] = r.policy.empty() || !cost(r).has_interval ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(cost(r).high);
      j["perplexity"] = r.predictions == 0 ? 0.0 : std::exp(r.nll / static_cast<double>(r.predictions));
      j["predictions"] = r.predictions;
      j["predictedBytes"] = r.bytes;
      j["evicted"] = r.evicted;
      j["windows"] = windows.size();
      j["kvPrecision"] = a.engine.kv;
      j["seconds"] = r.seconds;
      j["policySeconds"] = r.policy_seconds;
      j["callbackCopySeconds"] = r.copy_seconds;
      out.push_back(j);
    }
    // The envelope every command prints (its rows: `kvevict schema`, "llama perplexity").
    std::cout << envelope_json({"llama perplexity", a.engine.model}, out.dump()) << "\n";
    return 0;
  }
  const auto interval = [&](const Row& r) {
    if (r.policy.empty()) return std::string("-");
    const RatioInterval c = cost(r);
    return c.has_interval ? fmt::format("{:+.4f} … {:+.4f}", c.low, c.high) : std::string("-");
  };
  // --timing: decode tokens/s, and the shares of the run's time the policy
  // (after_decode) and the eval callback's copies took.
  const auto timing = [&](const Row& r) {
    if (!a.timing) return std::string();
    const double tps = r.seconds > 0 ? static_cast<double>(r.predictions) / r.seconds : 0.0;
    if (r.policy.empty()) return fmt::format(" {:.1f} | - | - |", tps);
    return fmt::format(" {:.1f} | {:.1f} % | {:.2f} % |", tps, 100.0 * r.policy_seconds / r.seconds,
                       100.0 * r.copy_seconds / r.seconds);
  };
  if (a.format == "markdown") {
    std::cout << "| policy | budget | perplexity | bits per byte | extra bits per byte | 95 % interval (paired by window) "
                 "| evicted |"
              << (a.timing ? " tokens/s | policy time share | callback copy time share |" : "")
              << "\n|---|---:|---:|---:|---:|---:|---:|" << (a.timing ? "---:|---:|---:|" : "") << "\n";
    for (const Row& r : rows) {
      const double ppl = r.predictions == 0 ? 0.0 : std::exp(r.nll / static_cast<double>(r.predictions));
      std::cout << fmt::format("| {} | {} | {:.4f} | {:.4f} | {} | {} | {} |{}\n",
                               r.policy.empty() ? "full cache" : r.policy,
                               r.policy.empty() ? "-" : std::to_string(r.budget), ppl, bits_per_byte(r),
                               r.policy.empty() ? "-" : fmt::format("{:+.4f}", cost(r).mean), interval(r), r.evicted,
                               timing(r));
    }
    return 0;
  }
  std::cout << fmt::format("{:<16} {:>6} {:>11} {:>14} {:>20} {:>34} {:>8} {:>10}\n", "policy", "budget", "perplexity",
                           "bits per byte", "extra bits per byte", "95 % interval (paired by window)", "evicted",
                           "tokens/s");
  for (const Row& r : rows) {
    const double ppl = r.predictions == 0 ? 0.0 : std::exp(r.nll / static_cast<double>(r.predictions));
    std::cout << fmt::format("{:<16} {:>6} {:>11.4f} {:>14.4f} {:>20} {:>34} {:>8} {:>10.1f}\n",
                             r.policy.empty() ? "full cache" : r.policy, r.policy.empty() ? "-" : std::to_string(r.budget),
                             ppl, bits_per_byte(r), r.policy.empty() ? "-" : fmt::format("{:+.4f}", cost(r).mean),
                             interval(r), r.evicted,
                             r.seconds > 0 ? static_cast<double>(r.predictions) / r.seconds : 0.0);
  }
  return 0;
}

}  // namespace kvevict::llama_tool
