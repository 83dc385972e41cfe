#include "kvevict/model/evaluation/choose.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eval/envelope.h"
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

namespace {

// The timed plan's estimates from the probe's rate (run-tokens a second, every
// core busy): a position costs more the more a cache holds, which the probe's
// first positions do not show, hence the margin.
constexpr std::uint32_t kProbeWindow = 64;
constexpr double kGrowth = 1.3;

// The longest of `longest`, halved (on 64s) while `fits(length)` fails, down
// to `shortest`.
std::uint32_t fitted_length(std::uint32_t longest, std::uint32_t shortest,
                            const std::function<bool(std::uint32_t)>& fits) {
  std::uint32_t length = longest;
  while (length > shortest && !fits(length)) length = std::max(shortest, length / 2 / 64 * 64);
  return length;
}

// The plan from the time: the probe (the first kProbeWindow positions of the
// text through every run), then windows and a passkey length that fit their
// shares of what is left. The runs themselves stop at the deadlines
// (ModelRunOptions::deadline), so the plan's counts are estimates.
void timed_plan(const Model& model, std::span<const std::uint8_t> text, const std::vector<RunSpec>& specs,
                const ChooseRequest& request, const TokenizedText& tokens, ModelRunOptions options,
                ChoosePlan& plan, double& rate) {
  const ModelConfig& cfg = model.config();
  const auto probe = Clock::now();
  options.window = std::min(kProbeWindow, cfg.context);
  options.max_windows = 1;
  (void)perplexity(model, text, specs, options);
  plan.probe_seconds = seconds_since(probe);
  const double runs = static_cast<double>(specs.size() + 1);
  rate = runs * (options.window - 1) / std::max(plan.probe_seconds, 1e-3);
  const auto cost = [&](std::uint32_t positions) { return runs * positions * kGrowth / rate; };
  const double left = std::max(0.0, request.minutes * 60.0 - plan.probe_seconds);
  const double window_time = kWindowShare * left, sample_time = kSampleShare * left;
  // Windows: the context, or shorter where two would not fit (at least twice
  // the budget, so that every window evicts).
  const auto shortest = static_cast<std::uint32_t>(std::min<std::int64_t>(cfg.context, 2 * request.budget + 2));
  if (request.windows == 0) {
    plan.context = fitted_length(cfg.context, shortest, [&](std::uint32_t l) { return 2 * cost(l) <= window_time; });
    plan.windows_available = static_cast<std::uint32_t>(text_windows(tokens, plan.context).size());
    plan.window_seconds = cost(plan.context);
    plan.windows = static_cast<std::uint32_t>(std::clamp(std::floor(window_time / plan.window_seconds), 2.0,
                                                         static_cast<double>(plan.windows_available)));
  }
  if (request.samples == 0) {
    const std::uint32_t longest = plan.length;
    plan.length = fitted_length(longest, std::min(longest, shortest),
                                [&](std::uint32_t l) { return plan.depths * cost(l) <= sample_time; });
    plan.sample_seconds = cost(plan.length);
    plan.samples = static_cast<std::uint32_t>(std::clamp(
        std::floor(sample_time / (plan.depths * plan.sample_seconds)), 1.0, static_cast<double>(kMaxSamples)));
  }
}

// The passkey samples' length: 1,024 positions, or less where the context is
// shorter, and always longer than the budget (or nothing is evicted).
std::uint32_t passkey_length(const ModelConfig& cfg, std::int64_t budget) {
  std::uint32_t length = std::min<std::uint32_t>(1024, cfg.context - std::min<std::uint32_t>(cfg.context / 4, 64));
  if (budget + 1 > std::int64_t{length}) {
    length = static_cast<std::uint32_t>(std::min<std::int64_t>(cfg.context - 16, 2 * budget));
  }
  if (budget >= std::int64_t{length}) {
    throw ParameterError(fmt::format("choose: budget ({}) leaves no room for a passkey sample that evicts within the "
                                     "context of {}",
                                     budget, cfg.context));
  }
  return length;
}

// The rows from the runs' results, ranked, and the recommendation.
void fill_rows(ChooseResult& result, const std::vector<RunSpec>& specs, const std::vector<PerplexityRow>& ppl,
               const std::vector<TaskRow>& answers, const std::vector<DecodeBenchRow>& decode,
               const ChooseRequest& request, const ModelConfig& cfg) {
  std::uint32_t full_samples = 0;
  for (const TaskRow& t : answers) {
    if (t.policy.empty()) {
      result.full_cache_accuracy += static_cast<double>(t.correct);
      full_samples += t.samples;
    }
  }
  result.full_cache_accuracy /= std::max<double>(full_samples, 1.0);
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
}

// The commands that would narrow the intervals: four times the windows (at
// the windows' length) and the samples, for the first three.
void narrowing_commands(ChooseResult& result, const ChooseRequest& request, const ModelConfig& cfg,
                        const std::string& model_label, const std::string& text_label) {
  const ChoosePlan& plan = result.plan;
  std::string names;
  for (std::size_t i = 0; i < result.rows.size() && i < 3; ++i) names += (i == 0 ? "" : ",") + result.rows[i].policy;
  const std::string granularity = request.granularity.sequence_budget ? " --granularity sequence" : "";
  const std::string context = plan.context < cfg.context ? fmt::format(" --context {}", plan.context) : "";
  const std::uint32_t more = std::min<std::uint32_t>(result.windows * 4, plan.windows_available);
  result.narrow.push_back(fmt::format("kvevict perplexity --model {} --text {} --policy {} --budget {} --max-windows {}{}{}",
                                      model_label, text_label, names, request.budget,
                                      more == plan.windows_available ? 0 : more, context, granularity));
  result.narrow.push_back(fmt::format("kvevict tasks --model {} --text {} --tasks passkey --lengths {} --depths {} "
                                      "--samples {} --policies {} --budgets {}{}",
                                      model_label, text_label, plan.length, plan.depths,
                                      std::max<std::uint32_t>(result.samples, 1) * 4, names, request.budget,
                                      granularity));
}

// The windows perplexity read: those whose predictions add up to the rows'.
std::uint32_t windows_read(const TokenizedText& tokens, std::uint32_t window, std::uint64_t predictions) {
  std::uint64_t seen = 0;
  std::uint32_t n = 0;
  for (const TextWindow& w : text_windows(tokens, window)) {
    if (seen >= predictions) break;
    seen += w.length - 1;
    ++n;
  }
  return n;
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
  plan.length = passkey_length(cfg, request.budget);
  ModelRunOptions options;
  options.paged = request.granularity;
  options.progress = request.progress;  // each stage (probe, runs) counts its tokens from 0
  if (request.windows != 0) plan.windows = std::clamp<std::uint32_t>(request.windows, 2, plan.windows_available);
  if (request.samples != 0) plan.samples = std::min(request.samples, kMaxSamples);
  double rate = 0.0;  // run-tokens a second, from the probe
  if (request.windows == 0 || request.samples == 0) timed_plan(*model, text, specs, request, tokens, options, plan, rate);
  if (plan.windows_available < 2) {
    throw InputError(fmt::format("choose: the text makes {} window(s) of {} positions; it needs at least 2 (for an "
                                 "interval paired by window)",
                                 plan.windows_available, plan.context));
  }
  plan.decode_tokens = kDecodeTokens;
  const double decode_seconds =
      rate > 0 ? static_cast<double>(specs.size() + 1) * (request.budget + kDecodeTokens) * kGrowth / rate : 0.0;
  plan.planned_seconds = plan.probe_seconds + plan.windows * plan.window_seconds +
                         plan.depths * plan.samples * plan.sample_seconds + decode_seconds;
  if (on_plan) on_plan(plan);

  // The runs: a fixed plan as planned; a timed one until its deadlines (the
  // windows' share of the time after the probe, then the passkey's up to what
  // the decode speed needs), so that time one stage leaves goes to the next.
  const double left = request.minutes * 60.0 - plan.probe_seconds;
  if (request.windows == 0) {
    options.window = plan.context;
    options.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(kWindowShare * left));
  } else {
    options.max_windows = plan.windows;
  }
  const std::vector<PerplexityRow> ppl = perplexity(*model, text, specs, options);
  result.windows = windows_read(tokens, plan.context, ppl.front().predictions);
  TaskRequest tasks;
  tasks.tasks = {"passkey"};
  tasks.lengths = {plan.length};
  tasks.budgets = {request.budget};
  for (const RunSpec& s : specs) tasks.policies.push_back(s.policy);
  tasks.moments = {Moment::decode};
  tasks.depths = plan.depths;
  tasks.samples = request.samples == 0 ? kMaxSamples : plan.samples;
  // The passkey samples are their own length (tasks refuse a window) and
  // their own deadline.
  options.window = 0;
  options.deadline.reset();
  if (request.samples == 0) {
    options.deadline = started + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(request.minutes * 60.0 - decode_seconds));
  }
  const std::vector<TaskRow> answers = run_tasks(model, text, tasks, options);
  result.samples = answers.empty() ? 0 : answers.front().samples;
  DecodeBenchRequest speed;
  speed.runs = specs;
  speed.prompt = static_cast<std::uint32_t>(request.budget);
  speed.tokens = plan.decode_tokens;
  speed.rounds = 1;
  speed.profile = false;
  std::vector<DecodeBenchRow> decode;
  if (!request.granularity.sequence_budget) decode = bench_decoder(model, text, speed);
  fill_rows(result, specs, ppl, answers, decode, request, cfg);
  narrowing_commands(result, request, cfg, model_label, text_label);
  result.seconds = seconds_since(started);
  return result;
}

namespace {

constexpr FieldInfo kChooseInfos[] = {
    {"rank", FieldType::kInteger, "", "1: fewest extra bits per byte", "", {}},
    {"policy", FieldType::kString, "", "registry name of the policy", "", {}},
    {"budget", FieldType::kInteger, "positions", "positions each cache keeps", "", {}},
    {"extraBitsPerByte", FieldType::kNumber, "bits per byte", "bits per byte over the full cache's, same windows", "",
     {}},
    {"extraLow", FieldType::kNumber, "bits per byte", "low end of its 95 % interval, paired by window; null from one "
     "window", "", {}},
    {"extraHigh", FieldType::kNumber, "bits per byte", "high end of the same interval; null from one window", "", {}},
    {"passkeyCorrect", FieldType::kInteger, "samples", "passkeys answered exactly, every depth", "", {}},
    {"passkeySamples", FieldType::kInteger, "samples", "passkeys asked, every depth", "", {}},
    {"passkeyAccuracy", FieldType::kNumber, "share (0..1)", "passkeyCorrect / passkeySamples", "", {}},
    {"tokensPerSecond", FieldType::kNumber, "tokens per second", "decode at a cache of the budget (0: not timed)", "",
     {}},
    {"kvBytes", FieldType::kInteger, "bytes", "one sequence's KV at the budget: every cache, keys and values", "", {}},
};
constexpr FieldInfo kPlanInfos[] = {
    {"windows", FieldType::kInteger, "windows", "perplexity windows planned", "", {}},
    {"windowsAvailable", FieldType::kInteger, "windows", "windows the text holds", "", {}},
    {"context", FieldType::kInteger, "positions", "positions a window", "", {}},
    {"passkeyLength", FieldType::kInteger, "tokens", "the passkey prompt's length", "", {}},
    {"depths", FieldType::kInteger, "depths", "needle depths", "", {}},
    {"samples", FieldType::kInteger, "samples", "passkey samples planned at each depth", "", {}},
    {"decodeTokens", FieldType::kInteger, "tokens", "tokens the decode speed is timed over", "", {}},
    {"probeSeconds", FieldType::kNumber, "seconds", "the probe the plan came from (0: fixed by flags)", "", {}},
    {"windowSeconds", FieldType::kNumber, "seconds", "a window with every run, estimated", "", {}},
    {"sampleSeconds", FieldType::kNumber, "seconds", "a sample, estimated", "", {}},
    {"plannedSeconds", FieldType::kNumber, "seconds", "the estimate, probes included", "", {}},
};
constexpr FieldInfo kFullCacheInfos[] = {
    {"passkeyAccuracy", FieldType::kNumber, "share (0..1)", "passkey with the full cache", "", {}},
    {"tokensPerSecond", FieldType::kNumber, "tokens per second", "decode with the full cache", "", {}},
    {"kvBytes", FieldType::kInteger, "bytes", "a window's KV at the context", "", {}},
};
constexpr FieldInfo kChooseExtraInfos[] = {
    {"plan", FieldType::kObject, "", "what the time budget bought, planned before the runs", "", kPlanInfos},
    {"fullCache", FieldType::kObject, "", "the full cache's figures, the reference", "", kFullCacheInfos},
    {"recommendation", FieldType::kString, "", "one line: which policy, and why", "", {}},
    {"narrow", FieldType::kArray, "", "commands (strings) that would narrow the intervals", "", {}},
    {"windows", FieldType::kInteger, "windows", "perplexity windows read", "", {}},
    {"samples", FieldType::kInteger, "samples", "passkey samples a depth answered", "", {}},
    {"seconds", FieldType::kNumber, "seconds", "the whole run, probes included", "", {}},
};

}  // namespace

std::span<const FieldInfo> choose_row_schema() { return kChooseInfos; }
std::span<const FieldInfo> choose_extra_schema() { return kChooseExtraInfos; }

std::string choose_json(const ChooseResult& r, const JsonSource& source) {
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
  nlohmann::ordered_json out = detail::envelope(source, std::move(rows));
  const ChoosePlan& p = r.plan;
  out["plan"] = {{"windows", p.windows},           {"windowsAvailable", p.windows_available},
                 {"context", p.context},           {"passkeyLength", p.length},
                 {"depths", p.depths},             {"samples", p.samples},
                 {"decodeTokens", p.decode_tokens}, {"probeSeconds", p.probe_seconds},
                 {"windowSeconds", p.window_seconds}, {"sampleSeconds", p.sample_seconds},
                 {"plannedSeconds", p.planned_seconds}};
  out["fullCache"] = {{"passkeyAccuracy", r.full_cache_accuracy},
                      {"tokensPerSecond", r.full_cache_tokens_per_second},
                      {"kvBytes", r.full_cache_kv_bytes}};
  out["recommendation"] = r.recommendation;
  out["narrow"] = r.narrow;
  out["windows"] = r.windows;
  out["samples"] = r.samples;
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
