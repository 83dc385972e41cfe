// kvevict-llama -- a kvevict policy keeping llama.cpp's KV cache
// (docs/llama-cpp.md). Parsing and printing; the adapter is the library's
// (kvevict/llama/llama_policy.h).
//
//   kvevict-llama perplexity --model F.gguf --text T [--policy P --budget B]
//
// perplexity: the text cut into windows of the context as `kvevict
// perplexity` cuts them (kvevict's tokenizer, BOS first where the vocabulary
// adds one), each window fed to llama.cpp one token a decode -- once with
// the full cache, once with the policy holding every sequence at the budget
// (llama_memory_seq_rm) -- and scored as kvevict scores it: bits per byte of
// the predicted tokens, and the policy's extra bits against the full cache.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ggml-backend.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/intervals.h"
#include "kvevict/llama/llama_policy.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/decoder/model_text.h"
#include "llama.h"

namespace {

using namespace kvevict;

struct Args {
  std::string model, text, policy, format = "table", kv = "fp32";
  std::int64_t budget = 256;
  std::vector<std::string> sets;
  std::uint32_t context = 0, max_windows = 0;
  int threads = 1;
  bool flash = false;
  bool timing = false;
};

// llama.cpp's log, kept quiet; its first error line since the call began
// (the most specific: "invalid magic characters", not the "failed to load
// model" that follows it) is passed on when it refuses.
std::string last_error;
void log_quietly(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR && last_error.empty()) {
    last_error = text;
    while (!last_error.empty() && (last_error.back() == '\n' || last_error.back() == ' ')) last_error.pop_back();
  }
}

struct Window {
  std::size_t begin = 0;
  std::uint32_t length = 0;
  bool bos = false;
};

// As kvevict perplexity: BOS and context - 1 tokens a window, or context tokens.
std::vector<Window> windows_of(const TokenizedText& t, std::uint32_t context, std::uint32_t max_windows) {
  std::vector<Window> out;
  const std::size_t n = t.tokens.size();
  const std::size_t step = t.bos ? context - 1 : context;
  for (std::size_t at = 0; t.bos ? at < n : at + 1 < n; at += step) {
    out.push_back({at, static_cast<std::uint32_t>((t.bos ? 1 : 0) + std::min(step, n - at)), t.bos.has_value()});
    if (max_windows != 0 && out.size() == max_windows) break;
  }
  return out;
}

struct Row {
  std::string policy;  // empty: the full cache
  std::int64_t budget = 0;
  double nll = 0.0;  // nats, summed
  std::uint64_t predictions = 0, bytes = 0, evicted = 0;
  double seconds = 0.0, policy_seconds = 0.0, copy_seconds = 0.0;
  std::vector<double> window_nll, window_bytes;  // nats and bytes of each window, for the paired interval
};

ggml_type cache_type(const std::string& kv) {
  if (kv == "fp32") return GGML_TYPE_F32;
  if (kv == "fp16") return GGML_TYPE_F16;
  throw ParameterError(fmt::format("--kv-precision ({}) must be fp32 or fp16: llama.cpp's F32 or F16 cache "
                                   "(kvevict's int8 and int4 stores are not llama.cpp's quantized caches)",
                                   kv));
}

Row run(llama_model* lm, const TokenizedText& text, const std::vector<Window>& windows, const Args& a,
        const std::optional<RunSpec>& spec) {
  // One context a run: the full cache's has no callback at all.
  LlamaPolicySlot hook;  // the policy comes once llama.cpp says how many cells the context has
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = a.context;
  cp.n_batch = 1;
  cp.n_ubatch = 1;
  cp.n_seq_max = 1;
  cp.n_threads = a.threads;
  cp.n_threads_batch = a.threads;
  cp.flash_attn_type = a.flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cache_type(a.kv);
  cp.type_v = cp.type_k;
  cp.no_perf = true;
  if (spec) {
    cp.cb_eval = &LlamaPolicySlot::observe;
    cp.cb_eval_user_data = &hook;
  }
  last_error.clear();
  llama_context* ctx = llama_init_from_model(lm, cp);
  if (ctx == nullptr) throw InputError("llama.cpp cannot make a context for the model: " + last_error);
  std::optional<LlamaPolicy> policy;
  if (spec) {
    policy.emplace(llama_shape(lm), LlamaPolicyOptions{.policy = spec->policy, .params = spec->params,
                                                       .budget = spec->budget, .context = llama_n_ctx(ctx)});
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
  for (const Window& w : windows) {
    llama_memory_clear(llama_get_memory(ctx), true);
    if (policy) policy->reset(0);
    double window_nll = 0.0;
    std::uint64_t window_bytes = 0;
    // The window's last token predicts nothing: it is not fed (as kvevict perplexity).
    for (std::uint32_t i = 0; i + 1 < w.length; ++i) {
      const Token token = w.bos ? (i == 0 ? *text.bos : text.tokens[w.begin + i - 1]) : text.tokens[w.begin + i];
      batch.n_tokens = 1;
      batch.token[0] = static_cast<llama_token>(token);
      batch.pos[0] = static_cast<llama_pos>(i);
      batch.n_seq_id[0] = 1;
      batch.seq_id[0][0] = 0;
      batch.logits[0] = 1;
      last_error.clear();
      if (const int rc = llama_decode(ctx, batch); rc != 0) {
        throw InputError(fmt::format("llama_decode returned {} at position {}: {}", rc, i, last_error));
      }
      if (policy) {
        const std::int32_t seq = 0, pos = static_cast<std::int32_t>(i);
        policy->after_decode(ctx, std::span<const std::int32_t>(&seq, 1), std::span<const std::int32_t>(&pos, 1));
        // Every cache loses each victim: counted as kvevict counts them.
        row.evicted += policy->victims(0).size() * caches;
      }
      const Token next = w.bos ? text.tokens[w.begin + i] : text.tokens[w.begin + i + 1];
      const float* logits = llama_get_logits_ith(ctx, 0);
      double top = -INFINITY;
      for (int v = 0; v < vocab; ++v) top = std::max(top, static_cast<double>(logits[v]));
      double sum = 0.0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - top);
      window_nll += std::log(sum) + top - static_cast<double>(logits[next]);
      window_bytes += w.bos ? text.bytes[w.begin + i] : text.bytes[w.begin + i + 1];
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
  llama_free(ctx);
  return row;
}

double bits_per_byte(const Row& r) {
  return r.bytes == 0 ? 0.0 : r.nll / std::numbers::ln2 / static_cast<double>(r.bytes);
}

int perplexity(const Args& a) {
  const std::shared_ptr<const Model> model = Model::load(a.model);  // kvevict's tokenizer and windows
  Args args = a;
  if (args.context == 0) args.context = std::min<std::uint32_t>(model->config().context, 4096);
  if (args.context < 2) throw ParameterError(fmt::format("--context ({}) must be at least 2", args.context));
  std::vector<RunSpec> specs;
  ParamMap params;
  {
    for (const std::string& s : a.sets) {
      const auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0) throw ParameterError(fmt::format("--set '{}' is not KEY=VALUE", s));
      std::size_t used = 0;
      std::int64_t value = 0;
      try {
        value = std::stoll(s.substr(eq + 1), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != s.size() - eq - 1) {
        throw ParameterError(fmt::format("--set '{}': the value is not a whole number", s));
      }
      set_param(params, s.substr(0, eq), value);
    }
  }
  for (std::size_t at = 0; !a.policy.empty() && at <= a.policy.size();) {
    const std::size_t comma = std::min(a.policy.find(',', at), a.policy.size());
    const PolicyInfo& info = find_policy(a.policy.substr(at, comma - at));
    if ((info.signals & kSignalAttention) != 0 && a.flash) {
      throw ParameterError(fmt::format("{} reads the attention weights, which llama.cpp's graph shows only with flash "
                                       "attention off (kq_soft_max): leave out --flash-attn",
                                       info.name));
    }
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
  const std::vector<Window> windows = windows_of(text, args.context, a.max_windows);
  if (windows.empty()) throw InputError(fmt::format("{}: too short to predict a token", a.text));

  llama_log_set(&log_quietly, nullptr);
  ggml_backend_load_all_from_path(KVEVICT_LLAMA_CPP_BINS);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  last_error.clear();
  llama_model* lm = llama_model_load_from_file(a.model.c_str(), mp);
  if (lm == nullptr) throw InputError(fmt::format("llama.cpp cannot load {}: {}", a.model, last_error));
  // Every policy built (and its parameters checked) before any work.
  for (const RunSpec& spec : specs) {
    LlamaPolicy probe(llama_shape(lm), LlamaPolicyOptions{.policy = spec.policy, .params = spec.params,
                                                          .budget = spec.budget, .context = args.context});
  }
  std::vector<Row> rows{run(lm, text, windows, args, std::nullopt)};
  for (const RunSpec& spec : specs) rows.push_back(run(lm, text, windows, args, spec));
  llama_model_free(lm);
  llama_backend_free();

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
      j["kvPrecision"] = a.kv;
      j["seconds"] = r.seconds;
      j["policySeconds"] = r.policy_seconds;
      j["callbackCopySeconds"] = r.copy_seconds;
      out.push_back(j);
    }
    std::cout << out.dump(2) << "\n";
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("kvevict-llama: a kvevict policy keeping llama.cpp's KV cache, one set of positions for every layer "
               "and KV head of a sequence (docs/llama-cpp.md)");
  app.require_subcommand(1);
  Args a;
  auto* ppl = app.add_subcommand("perplexity", "Bits per byte of a text read by llama.cpp, with the full cache and "
                                               "with a policy holding the sequence at a budget");
  ppl->add_option("--model", a.model, "a GGUF file llama.cpp loads")->required();
  ppl->add_option("--text", a.text, "the text to score (kvevict's tokenizer and windows, as kvevict perplexity)")
      ->required();
  ppl->add_option("--policy", a.policy, "policy names, comma-separated (default: the full cache only)");
  ppl->add_option("--budget", a.budget, "positions the sequence holds")->capture_default_str();
  ppl->add_option("--set", a.sets, "KEY=VALUE, for every policy that has KEY (repeatable)");
  ppl->add_option("--context", a.context, "positions a window (default: the model's context, at most 4096)");
  ppl->add_option("--max-windows", a.max_windows, "use only the first N windows (0 = all)");
  ppl->add_option("--threads", a.threads, "llama.cpp's threads")->check(CLI::Range(1, 1024))->capture_default_str();
  ppl->add_option("--kv-precision", a.kv, "llama.cpp's cache: fp32 (F32) or fp16 (F16, llama.cpp's default)")
      ->capture_default_str();
  ppl->add_flag("--flash-attn", a.flash, "flash attention on (the attention-weight policies then cannot run)");
  ppl->add_flag("--timing", a.timing,
                "markdown: add decode tokens/s and the shares of each run's time the policy and the eval callback's "
                "copies took");
  ppl->add_option("--format", a.format, "table, markdown or json")
      ->check(CLI::IsMember({"table", "markdown", "json"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "kvevict-llama: error: " << e.what() << " (kvevict-llama --help)\n";
    return 2;
  }
  try {
    return perplexity(a);
  } catch (const std::exception& e) {
    std::cerr << "kvevict-llama: error: " << e.what() << "\n";
    return 1;
  }
}
