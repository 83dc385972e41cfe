#include "kvevict/model/evaluation/choose.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/decoder/model_text.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/evaluation/tasks.h"
#include "kvevict/model/serving/decode_bench.h"

namespace kvevict {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The shares of the time left after the probes: perplexity windows, passkey
// samples; decode speed takes the rest.
constexpr double kWindowShare = 0.6;
constexpr double kSampleShare = 0.3;
constexpr std::uint32_t kDecodeTokens = 64;
constexpr std::uint32_t kMaxSamples = 100;

std::vector<RunSpec> choose_specs(const ModelConfig& cfg, const ChooseRequest& request) {
  std::vector<std::string> names = request.policies;
  if (names.empty()) {
    for (const PolicyInfo* info : policies()) {
      const bool by_layer = info->has_param("layer") && info->has_param("numLayers");
      if (!(request.granularity.sequence_budget && by_layer)) names.emplace_back(info->name);
    }
  }
  std::vector<RunSpec> specs;
  for (const std::string& name : names) {
    specs.push_back(RunSpec{std::string(find_policy(name).name), {}, request.budget});
    (void)DecoderPolicies(specs.back(), cfg, request.granularity);  // every rule checked before any work
  }
  if (specs.empty()) throw ParameterError("choose: no policy to choose from");
  return specs;
}

std::string interval_text(const ChooseRow& r) {
  return r.has_interval ? fmt::format("[{:+.4f}, {:+.4f}]", r.extra_low, r.extra_high) : std::string("[no interval]");
}

std::string bytes_text(std::uint64_t b) {
  if (b >= (std::uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1 << 10));
}

std::string recommend(const ChooseResult& r, const ChooseRequest& request) {
  const ChooseRow& best = r.rows.front();
  std::vector<std::string> tied;
  for (std::size_t i = 1; i < r.rows.size(); ++i) {
    const ChooseRow& o = r.rows[i];
    if (!best.has_interval || !o.has_interval || o.extra_low <= best.extra_high) tied.push_back(o.policy);
  }
  std::string line = fmt::format(
      "{}: {:+.4f} bits/byte {}, passkey {:.2f} ({}/{}), {:.1f} tokens/s, {} of KV a sequence at {} positions", best.policy,
      best.extra_bits_per_byte, interval_text(best), best.accuracy, best.correct, best.samples, best.tokens_per_second,
      bytes_text(best.kv_bytes), request.budget);
  if (best.accuracy < r.full_cache_accuracy) {
    line += fmt::format(" (the full cache's passkey {:.2f})", r.full_cache_accuracy);
  }
  if (tied.empty()) return line + "; the fewest extra bits, its interval apart from every other's";
  std::string names;
  for (std::size_t i = 0; i < tied.size() && i < 4; ++i) names += (i == 0 ? "" : ", ") + tied[i];
  if (tied.size() > 4) names += fmt::format(" and {} more", tied.size() - 4);
  return line + fmt::format("; the fewest extra bits, but these windows do not set it apart from {}", names);
}

}  // namespace

ChooseResult choose(const std::shared_ptr<const Model>& model, std::span<const std::uint8_t> text,
                    const ChooseRequest& request, const std::function<void(const ChoosePlan&)>& on_plan,
                    const std::string& model_label, const std::string& text_label) {
  const auto started = Clock::now();
  const ModelConfig& cfg = model->config();
  if (!(request.minutes >= 0.1 && request.minutes <= 1440.0)) {
    throw ParameterError(fmt::format("choose: --minutes ({}) must be 0.1 ... 1440", request.minutes));
  }
  check_paged(request.granularity);
  if (request.granularity.blocks() || request.granularity.layer_budget) {
    throw ParameterError("choose: --granularity takes head or sequence");
  }
  const std::vector<RunSpec> specs = choose_specs(cfg, request);
  ChooseResult result;
  ChoosePlan& plan = result.plan;
  plan.context = cfg.context;
  const TokenizedText tokens = tokenize_text(*model, text);
  plan.windows_available = static_cast<std::uint32_t>(text_windows(tokens, cfg.context).size());
  if (plan.windows_available < 2) {
    throw InputError(fmt::format("choose: the text makes {} window(s) of {} positions; it needs at least 2 (for an "
                                 "interval paired by window)",
                                 plan.windows_available, cfg.context));
  }
  // The passkey samples: 1,024 positions, or less where the context is
  // shorter, and always longer than the budget (or nothing is evicted).
  plan.length = std::min<std::uint32_t>(1024, cfg.context - std::min<std::uint32_t>(cfg.context / 4, 64));
  if (request.budget + 1 > std::int64_t{plan.length}) {
    plan.length = static_cast<std::uint32_t>(std::min<std::int64_t>(cfg.context - 16, 2 * request.budget));
  }
  if (request.budget >= std::int64_t{plan.length}) {
    throw ParameterError(fmt::format("choose: budget ({}) leaves no room for a passkey sample that evicts within the "
                                     "context of {}",
                                     request.budget, cfg.context));
  }
  ModelRunOptions options;
  options.paged = request.granularity;
  options.progress = request.progress;  // each stage (probe, runs) counts its tokens from 0
  TaskRequest tasks;
  tasks.tasks = {"passkey"};
  tasks.lengths = {plan.length};
  tasks.budgets = {request.budget};
  for (const RunSpec& s : specs) tasks.policies.push_back(s.policy);
  tasks.moments = {Moment::decode};

  // The probes: one window, one sample, every run (not needed when the
  // plan is fixed).
  if (request.windows == 0 || request.samples == 0) {
    auto probe = Clock::now();
    options.max_windows = 1;
    (void)perplexity(*model, text, specs, options);
    plan.window_seconds = seconds_since(probe);
    probe = Clock::now();
    tasks.depths = 1;
    tasks.samples = 1;
    (void)run_tasks(model, text, tasks, options);
    plan.sample_seconds = seconds_since(probe);
  }
  plan.probe_seconds = seconds_since(started);

  const double left = std::max(0.0, request.minutes * 60.0 - plan.probe_seconds);
  if (plan.window_seconds > 0) {
    plan.windows = static_cast<std::uint32_t>(std::clamp(std::floor(kWindowShare * left / plan.window_seconds), 2.0,
                                                         static_cast<double>(plan.windows_available)));
  }
  if (plan.sample_seconds > 0) {
    plan.samples = static_cast<std::uint32_t>(std::clamp(
        std::floor(kSampleShare * left / (plan.depths * plan.sample_seconds)), 1.0, static_cast<double>(kMaxSamples)));
  }
  if (request.windows != 0) plan.windows = std::clamp<std::uint32_t>(request.windows, 2, plan.windows_available);
  if (request.samples != 0) plan.samples = std::min(request.samples, kMaxSamples);
  plan.decode_tokens = kDecodeTokens;
  plan.planned_seconds = plan.probe_seconds + plan.windows * plan.window_seconds +
                         plan.depths * plan.samples * plan.sample_seconds +
                         (1.0 - kWindowShare - kSampleShare) * left;
  if (on_plan) on_plan(plan);

  // The runs.
  options.max_windows = plan.windows;
  const std::vector<PerplexityRow> ppl = perplexity(*model, text, specs, options);
  tasks.depths = plan.depths;
  tasks.samples = plan.samples;
  const std::vector<TaskRow> answers = run_tasks(model, text, tasks, options);
  DecodeBenchRequest speed;
  speed.runs = specs;
  speed.prompt = static_cast<std::uint32_t>(request.budget);
  speed.tokens = plan.decode_tokens;
  speed.rounds = 1;
  speed.profile = false;
  std::vector<DecodeBenchRow> decode;
  if (!request.granularity.sequence_budget) decode = bench_decoder(model, text, speed);

  for (const TaskRow& t : answers) {
    if (t.policy.empty()) {
      result.full_cache_accuracy += static_cast<double>(t.correct);
    }
  }
  result.full_cache_accuracy /= static_cast<double>(plan.depths * plan.samples);
  for (const DecodeBenchRow& d : decode) {
    if (d.mode == "decode" && d.policy == "full cache") result.full_cache_tokens_per_second = d.tokens_per_second;
  }
  const double per_position = ppl.front().model_bytes_per_position;
  result.full_cache_kv_bytes = static_cast<std::uint64_t>(per_position * cfg.context);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const PerplexityRow& p = ppl[i + 1];
    ChooseRow row;
    row.policy = specs[i].policy;
    row.budget = request.budget;
    row.extra_bits_per_byte = p.extra_bits_per_byte;
    row.extra_low = p.extra_low;
    row.extra_high = p.extra_high;
    row.has_interval = p.has_extra_interval;
    for (const TaskRow& t : answers) {
      if (t.policy == row.policy) {
        row.correct += t.correct;
        row.samples += t.samples;
      }
    }
    row.accuracy = row.samples == 0 ? 0.0 : static_cast<double>(row.correct) / row.samples;
    for (const DecodeBenchRow& d : decode) {
      if (d.mode == "decode" && d.policy == row.policy) row.tokens_per_second = d.tokens_per_second;
    }
    row.kv_bytes = static_cast<std::uint64_t>(per_position * static_cast<double>(request.budget));
    result.rows.push_back(row);
  }
  std::stable_sort(result.rows.begin(), result.rows.end(), [](const ChooseRow& a, const ChooseRow& b) {
    if (a.extra_bits_per_byte != b.extra_bits_per_byte) return a.extra_bits_per_byte < b.extra_bits_per_byte;
    return a.accuracy > b.accuracy;
  });
  for (std::size_t i = 0; i < result.rows.size(); ++i) result.rows[i].rank = static_cast<int>(i + 1);
  result.recommendation = recommend(result, request);

  std::string names;
  for (std::size_t i = 0; i < result.rows.size() && i < 3; ++i) names += (i == 0 ? "" : ",") + result.rows[i].policy;
  const std::string granularity = request.granularity.sequence_budget ? " --granularity sequence" : "";
  const std::uint32_t more = std::min<std::uint32_t>(plan.windows * 4, plan.windows_available);
  result.narrow.push_back(fmt::format("kvevict perplexity --model {} --text {} --policy {} --budget {} --max-windows {}{}",
                                      model_label, text_label, names, request.budget,
                                      more == plan.windows_available ? 0 : more, granularity));
  result.narrow.push_back(fmt::format("kvevict tasks --model {} --text {} --tasks passkey --lengths {} --depths {} "
                                      "--samples {} --policies {} --budgets {}{}",
                                      model_label, text_label, plan.length, plan.depths, plan.samples * 4, names,
                                      request.budget, granularity));
  result.seconds = seconds_since(started);
  return result;
}

std::string choose_json(const ChooseResult& r) {
  nlohmann::ordered_json out;
  out["command"] = "choose";
  const ChoosePlan& p = r.plan;
  out["plan"] = {{"windows", p.windows},           {"windowsAvailable", p.windows_available},
                 {"context", p.context},           {"passkeyLength", p.length},
                 {"depths", p.depths},             {"samples", p.samples},
                 {"decodeTokens", p.decode_tokens}, {"probeSeconds", p.probe_seconds},
                 {"windowSeconds", p.window_seconds}, {"sampleSeconds", p.sample_seconds},
                 {"plannedSeconds", p.planned_seconds}};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ChooseRow& row : r.rows) {
    nlohmann::ordered_json j;
    j["rank"] = row.rank;
    j["policy"] = row.policy;
    j["budget"] = row.budget;
    j["extraBitsPerByte"] = row.extra_bits_per_byte;
    j["extraLow"] = row.has_interval ? nlohmann::ordered_json(row.extra_low) : nlohmann::ordered_json(nullptr);
    j["extraHigh"] = row.has_interval ? nlohmann::ordered_json(row.extra_high) : nlohmann::ordered_json(nullptr);
    j["passkeyCorrect"] = row.correct;
    j["passkeySamples"] = row.samples;
    j["passkeyAccuracy"] = row.accuracy;
    j["tokensPerSecond"] = row.tokens_per_second;
    j["kvBytes"] = row.kv_bytes;
    rows.push_back(j);
  }
  out["rows"] = rows;
  out["fullCache"] = {{"passkeyAccuracy", r.full_cache_accuracy},
                      {"tokensPerSecond", r.full_cache_tokens_per_second},
                      {"kvBytes", r.full_cache_kv_bytes}};
  out["recommendation"] = r.recommendation;
  out["narrow"] = r.narrow;
  out["seconds"] = r.seconds;
  return out.dump(2) + "\n";
}

std::string choose_markdown(const ChooseResult& r) {
  std::string out =
      "| rank | policy | budget | extra bits per byte | 95 % interval (paired by window) | passkey | decode tokens/s | "
      "KV a sequence |\n|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (const ChooseRow& row : r.rows) {
    out += fmt::format("| {} | {} | {} | {:+.4f} | {} | {:.2f} ({}/{}) | {} | {} |\n", row.rank, row.policy,
                       row.budget, row.extra_bits_per_byte,
                       row.has_interval ? fmt::format("{:+.4f} … {:+.4f}", row.extra_low, row.extra_high)
                                        : std::string("-"),
                       row.accuracy, row.correct, row.samples,
                       row.tokens_per_second > 0 ? fmt::format("{:.1f}", row.tokens_per_second) : std::string("-"),
                       bytes_text(row.kv_bytes));
  }
  return out;
}

}  // namespace kvevict
