#include "kvevict/model/evaluation/tasks.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <omp.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/prefill.h"
#include "kvevict/model/eviction/compress.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/core/registry.h"
#include "eval/parallel_jobs.h"

namespace kvevict {

namespace {

constexpr std::string_view kDigits = "0123456789";
constexpr std::string_view kLower = "abcdefghijklmnopqrstuvwxyz";
constexpr std::string_view kUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyz0123456789";

std::string rand_text(Rng& rng, std::string_view alphabet, std::uint32_t n) {
  std::string out;
  for (std::uint32_t i = 0; i < n; ++i) out += alphabet[rng.next_int(static_cast<std::uint32_t>(alphabet.size()))];
  return out;
}

std::uint32_t between(Rng& rng, std::uint32_t lo, std::uint32_t hi) { return lo + rng.next_int(hi - lo + 1); }

// A number of lo ... hi digits without a leading zero.
std::string number(Rng& rng, std::uint32_t lo, std::uint32_t hi) {
  const std::uint32_t n = between(rng, lo, hi);
  return rand_text(rng, kDigits.substr(1), 1) + rand_text(rng, kDigits, n - 1);
}

template <typename Make>
std::vector<std::string> distinct(std::uint32_t count, Make make) {
  std::vector<std::string> out;
  while (out.size() < count) {
    std::string v = make();
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
  }
  return out;
}

// Puts each needle (then a space) at fraction depths[i] of the filler: at
// the start of the next word when one starts within kNeedleShift bytes (so
// words stay whole), else exactly there, inside a word. Either way the
// needle sits 0 ... kNeedleShift bytes past its depth in the filler.
// Returns each needle's offset in the result.
std::vector<std::uint32_t> insert_needles(std::string& text, const std::string& filler,
                                          const std::vector<std::string>& needles,
                                          const std::vector<double>& depths) {
  std::vector<std::size_t> cuts;
  for (const double d : depths) {
    cuts.push_back(needle_cut(filler, d));
  }
  std::vector<std::size_t> order(needles.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cuts[a] < cuts[b]; });
  std::vector<std::uint32_t> offsets(needles.size());
  std::size_t last = 0;
  for (const std::size_t i : order) {
    text += filler.substr(last, cuts[i] - last);
    offsets[i] = static_cast<std::uint32_t>(text.size());
    text += needles[i] + " ";
    last = cuts[i];
  }
  text += filler.substr(last);
  return offsets;
}

std::size_t argmax(std::span<const float> logits) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // ties: the lowest byte
  }
  return best;
}

}  // namespace

namespace {

void check_depth(std::string_view task, double depth) {
  if (!(depth >= 0.0 && depth <= 1.0)) {
    throw ParameterError(fmt::format("task {}: depth {} is outside 0 ... 1", task, depth));
  }
}

}  // namespace

std::size_t needle_cut(std::string_view filler, double depth) {
  const auto at = static_cast<std::size_t>(std::nearbyint(depth * static_cast<double>(filler.size())));
  const std::size_t next = filler.find(' ', at);
  return next == std::string_view::npos || next - at >= kNeedleShift ? at : next + 1;
}


Rng task_sample_rng(std::uint32_t seed, std::string_view task, std::uint32_t length, double depth,
                    std::uint32_t sample) {
  const auto index = static_cast<std::uint32_t>(task_index(task));
  if (length >= (1U << 24)) throw InputError(fmt::format("task {}: length {} must be below 2^24 bytes", task, length));
  check_depth(task, depth);
  // Packed without loss: task index and length share a word (length < 2^24),
  // and depths at least 2^-30 apart round to different multiples of 2^-31.
  const auto depth_code = static_cast<std::uint32_t>(std::llround(depth * 2147483648.0));
  return Rng::from_key({seed, (index << 24) | length, depth_code, sample});
}

TaskSample make_task(std::string_view task, std::uint32_t length, double depth, Rng& rng,
                     std::span<const std::uint8_t> filler) {
  check_depth(task, depth);
  std::vector<std::string> needles;
  std::vector<double> depths;
  std::size_t asked = 0;  // the needle placed at `depth` (the row's depth)
  std::string question, answer, closing = ".\n";
  if (task == "passkey") {
    const std::string key = number(rng, 5, 7);
    needles = {"The pass key is " + key + ". Remember it. " + key + " is the pass key."};
    depths = {depth};
    question = "\nWhat is the pass key? The pass key is ";
    answer = key;
  } else if (task == "multikey") {
    const std::uint32_t k = between(rng, 2, 4);
    const auto keys = distinct(k, [&] { return rand_text(rng, kLower, 6); });
    const auto values = distinct(k, [&] { return number(rng, 6, 7); });
    for (std::uint32_t i = 0; i < k; ++i) {
      needles.push_back("One of the special magic numbers for " + keys[i] + " is: " + values[i] + ".");
    }
    depths = {depth};
    for (std::uint32_t i = 1; i < k; ++i) depths.push_back(rng.next_float());
    question = "\nWhat is the special magic number for " + keys[0] + "? The special magic number for " + keys[0] +
               " is: ";
    answer = values[0];
  } else if (task == "multivalue") {
    const std::uint32_t k = between(rng, 2, 3);
    const std::string key = rand_text(rng, kLower, 6);
    const auto values = distinct(k, [&] { return number(rng, 6, 7); });
    for (const std::string& v : values) needles.push_back("One of the special magic numbers for " + key + " is: " + v + ".");
    depths = {depth};
    for (std::uint32_t i = 1; i < k; ++i) depths.push_back(rng.next_float());
    std::sort(depths.begin(), depths.end());  // the values appear in the order listed
    asked = static_cast<std::size_t>(std::find(depths.begin(), depths.end(), depth) - depths.begin());
    question = "\nWhat are all the special magic numbers for " + key + "? The special magic numbers for " + key +
               " are: ";
    for (std::uint32_t i = 0; i < k; ++i) answer += (i > 0 ? ", " : "") + values[i];
  } else if (task == "vartrack") {
    const std::uint32_t hops = between(rng, 1, 3);
    const auto names = distinct(hops + 3, [&] { return rand_text(rng, kUpper, 5); });
    const auto values = distinct(2, [&] { return number(rng, 5, 5); });
    needles.push_back("VAR " + names[0] + " = " + values[0] + ".");
    for (std::uint32_t i = 0; i < hops; ++i) needles.push_back("VAR " + names[i + 1] + " = VAR " + names[i] + ".");
    needles.push_back("VAR " + names[hops + 1] + " = " + values[1] + ".");
    needles.push_back("VAR " + names[hops + 2] + " = VAR " + names[hops + 1] + ".");
    // The chain starts at the depth asked for (the row's label); its hops
    // fall between there and the end.
    std::vector<double> chain{depth};
    for (std::uint32_t i = 0; i < hops; ++i) chain.push_back(depth + (1.0 - depth) * rng.next_float());
    std::sort(chain.begin(), chain.end());
    std::vector<double> decoy{rng.next_float(), rng.next_float()};
    std::sort(decoy.begin(), decoy.end());
    depths = chain;
    depths.insert(depths.end(), decoy.begin(), decoy.end());
    question = "\nWhich variables hold the value " + values[0] + "? They are: ";
    for (std::uint32_t i = 0; i <= hops; ++i) answer += (i > 0 ? " " : "") + names[i];
  } else if (task == "copy") {
    const std::string code = rand_text(rng, kAlnum, between(rng, 16, 48));
    needles = {"Code: <<" + code + ">>"};
    depths = {depth};
    question = "\nRepeat the code: <<";
    answer = code;
    closing = ">>\n";
  } else {
    throw InputError(fmt::format("unknown task '{}' (known: {})", task, fmt::join(task_names(), ", ")));
  }
  std::size_t fixed = question.size() + answer.size() + closing.size();
  for (const std::string& n : needles) fixed += n.size() + 1;
  if (fixed + 16 > length) {
    throw InputError(fmt::format("task {}: {} bytes cannot hold its needles and question (it needs at least {})",
                                 task, length, fixed + 16));
  }
  const std::size_t room = length - fixed;
  if (filler.size() < room + 1) {
    throw InputError(fmt::format("task {}: the filler text has {} bytes, a {}-byte sample needs more than {}", task,
                                 filler.size(), length, room));
  }
  const std::size_t start = rng.next_int(static_cast<std::uint32_t>(filler.size() - room));
  const std::string fill(filler.begin() + static_cast<std::ptrdiff_t>(start),
                         filler.begin() + static_cast<std::ptrdiff_t>(start + room));
  std::string text;
  const std::vector<std::uint32_t> offsets = insert_needles(text, fill, needles, depths);
  TaskSample s;
  s.task = std::string(task);
  s.question = static_cast<std::uint32_t>(text.size());
  text += question;
  s.prompt.assign(text.begin(), text.end());
  s.answer = answer;
  s.depth = depth;
  s.needle = offsets[asked];
  return s;
}

namespace {

// A sample as a model with its own tokenizer reads it: the prompt's tokens
// (BOS first when the vocabulary adds it), and the tokens read before the
// question starts (the prefill moment's cut).
struct PromptTokens {
  std::vector<Token> tokens;
  std::uint32_t question = 0;
};

PromptTokens prompt_tokens(const Model& model, const TaskSample& sample) {
  PromptTokens p;
  p.tokens = sequence_tokens(model, sample.prompt);
  // The last token that ends at or before the question's first byte (a
  // SentencePiece dummy prefix is no byte of the prompt: text_bytes_of).
  std::size_t bytes = 0;
  for (const std::uint32_t b : text_bytes_of(model.vocabulary(), p.tokens)) {
    bytes += b;
    if (bytes > sample.question) break;
    ++p.question;
  }
  return p;
}

}  // namespace

std::uint32_t task_tokens(const Model& model, const TaskSample& sample) {
  if (model.vocabulary().kind() == Vocabulary::Kind::kBytes) return static_cast<std::uint32_t>(sample.prompt.size());
  return static_cast<std::uint32_t>(prompt_tokens(model, sample).tokens.size());
}

namespace {

// The prompt a model reads for a sample: its bytes for kvevict-tiny, its
// tokens for a model with a tokenizer. Refused (InputError) when the prompt
// and one token an answer byte would pass the model's context: every answer
// token stands for at least one byte (a token of none, such as EOS, ends the
// answer wrong), so the answer's bytes bound its tokens.
PromptTokens read_prompt(const Model& model, const TaskSample& sample) {
  const bool bytes = model.vocabulary().kind() == Vocabulary::Kind::kBytes;
  PromptTokens prompt;
  if (bytes) {
    prompt.tokens.assign(sample.prompt.begin(), sample.prompt.end());
    prompt.question = sample.question;
  } else {
    prompt = prompt_tokens(model, sample);
  }
  const std::size_t needed = prompt.tokens.size() + sample.answer.size();
  if (needed > model.config().context) {
    throw InputError(fmt::format("task {}: {} {} are more than the model's context of {}", sample.task, needed,
                                 bytes ? "bytes" : "tokens (the prompt's, and at most one an answer byte)",
                                 model.config().context));
  }
  return prompt;
}

// One configuration answering one sample: its decoder, its policies (decode
// moment) or its compressor (prefill moments), and where its greedy answer
// stands. The caller feeds the prompt (step or step_together), calling
// after_prompt_step after each token, then asks next() for each answer
// token to feed until it says the answer is settled. Alone or stepped
// together with others, the calls are the same, so the answers are too.
class TaskRun {
 public:
  TaskRun(const std::shared_ptr<const Model>& model, const TaskSample& sample, const PromptTokens& prompt,
          const RunSpec* spec, Moment moment, std::uint32_t window, std::uint32_t chunk, const KvFormat& kv,
          int threads, const PagedOptions& granularity)
      : model_(model),
        sample_(sample),
        decoder_(model, DecoderOptions{.capacity = static_cast<std::uint32_t>(prompt.tokens.size() + sample.answer.size()),
                                       .kv = kv,
                                       .threads = threads}) {
    const ModelConfig& cfg = model->config();
    if (spec != nullptr && moment == Moment::decode && granularity.active()) {
      // A budget shared by a layer's or the sequence's caches (DecoderPolicies).
      shared_ = DecoderPolicies(*spec, cfg, granularity);
      shared_.attach(decoder_);
    } else if (spec != nullptr && moment == Moment::decode) {
      const PolicyInfo& info = find_policy(spec->policy);
      for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
        policies_.push_back(info.make(head_params(*spec, cfg, h / cfg.kv_heads)));
        decoder_.set_policy(h, policies_.back().get(), spec->budget);
      }
    }
    if (spec != nullptr && (moment == Moment::prefill || moment == Moment::prefill_query)) {
      const auto after = static_cast<std::uint32_t>(moment == Moment::prefill ? prompt.question : prompt.tokens.size());
      compressor_.emplace(cfg, *spec, after, window, chunk);
    }
  }

  Decoder& decoder() noexcept { return decoder_; }

  void after_prompt_step(std::uint32_t i) {
    if (compressor_) compressor_->after_step(decoder_, i);
  }
  // The first prompt token at or after i whose after_prompt_step reads the
  // decoder (PrefillCompressor::next_read): a pass of several tokens ends there.
  std::uint32_t next_read(std::uint32_t i) const noexcept {
    return compressor_ ? compressor_->next_read(i) : PrefillCompressor::kNone;
  }

  // The next answer token to feed, given the logits after the last one fed;
  // none once the answer is settled (right() then says how).
  std::optional<Token> next(std::span<const float> logits) {
    const Vocabulary& vocab = model_->vocabulary();
    const std::string& answer = sample_.answer;
    if (said_.size() >= answer.size()) {  // an empty answer: nothing to say
      right_ = true;
      return std::nullopt;
    }
    const auto guess = static_cast<Token>(argmax(logits));
    if (vocab.kind() == Vocabulary::Kind::kBytes) {
      // Byte by byte: each greedy byte must be the answer's next.
      if (guess != static_cast<unsigned char>(answer[said_.size()])) return std::nullopt;
      said_ += static_cast<char>(guess);
    } else {
      // Greedy tokens until their bytes cover the answer: right when those
      // bytes begin with it (the last token may run past its end).
      const std::string piece = guess < vocab.size() ? vocab.piece_bytes(guess) : std::string();
      said_ += piece;
      const std::size_t common = std::min(said_.size(), answer.size());
      if (piece.empty() || said_.compare(0, common, answer, 0, common) != 0) return std::nullopt;
    }
    if (said_.size() >= answer.size()) {
      right_ = true;
      return std::nullopt;
    }
    return guess;
  }

  bool right() const noexcept { return right_; }

 private:
  std::shared_ptr<const Model> model_;
  const TaskSample& sample_;
  Decoder decoder_;
  std::vector<std::unique_ptr<Policy>> policies_;
  DecoderPolicies shared_;
  std::optional<PrefillCompressor> compressor_;
  std::string said_;
  bool right_ = false;
};

// Progress counts a sample's `length` tokens per configuration: its prompt's
// as they are read, the rest (the length the prompt did not fill) once it is
// answered, so the total is known before any sample is made.
void count_prompt_rest(detail::ProgressCounter* count, std::uint32_t length, std::size_t prompt, std::size_t runs) {
  if (count != nullptr && length > prompt) count->add((length - prompt) * runs);
}

bool answer_counted(const std::shared_ptr<const Model>& model, const TaskSample& sample, const RunSpec* spec,
                    Moment moment, std::uint32_t window, std::uint64_t* evicted, std::uint32_t chunk,
                    const KvFormat& kv, const PagedOptions& granularity, detail::ProgressCounter* count,
                    std::uint32_t length) {
  const PromptTokens prompt = read_prompt(*model, sample);
  TaskRun run(model, sample, prompt, spec, moment, window, chunk, kv, DecoderOptions{}.threads, granularity);
  std::span<const float> logits;
  for (std::size_t i = 0; i < prompt.tokens.size(); ++i) {
    logits = run.decoder().step(prompt.tokens[i]);
    run.after_prompt_step(static_cast<std::uint32_t>(i));
    if (count != nullptr) count->add(1);
  }
  while (const std::optional<Token> t = run.next(logits)) logits = run.decoder().step(*t);
  if (evicted != nullptr) *evicted += run.decoder().evicted();
  count_prompt_rest(count, length, prompt.tokens.size(), 1);
  return run.right();
}

std::vector<TaskAnswer> answer_together_counted(const std::shared_ptr<const Model>& model, const TaskSample& sample,
                                                std::span<const TaskConfig> configs, std::uint32_t window,
                                                std::uint32_t chunk, const KvFormat& kv, int threads,
                                                const PagedOptions& granularity, detail::ProgressCounter* count,
                                                std::uint32_t length) {
  const PromptTokens prompt = read_prompt(*model, sample);
  std::vector<std::unique_ptr<TaskRun>> runs;
  std::vector<Decoder*> batch;
  for (const TaskConfig& c : configs) {
    runs.push_back(
        std::make_unique<TaskRun>(model, sample, prompt, c.spec, c.moment, window, chunk, kv, threads, granularity));
    batch.push_back(&runs.back()->decoder());
  }
  std::vector<TaskAnswer> answers(configs.size());
  if (runs.empty()) return answers;
  // The prompt, several tokens a pass (Decoder::prefill_together), each pass
  // ending where a compressor reads the decoders. Only each run's last row
  // of logits is read (the answer's first guess): kLast skips the output
  // head on the rest, the same bits.
  std::vector<Token> tokens;
  const auto prompt_length = static_cast<std::uint32_t>(prompt.tokens.size());
  for (std::uint32_t i = 0; i < prompt_length;) {
    std::uint32_t end = std::min(prompt_length, i + Decoder::together_pass_tokens(runs.size()));
    for (const auto& run : runs) {
      const std::uint32_t read = run->next_read(i);
      if (read != PrefillCompressor::kNone) end = std::min(end, read + 1);
    }
    tokens.assign(prompt.tokens.begin() + i, prompt.tokens.begin() + end);
    Decoder::prefill_together(batch, tokens, PromptLogits::kLast);
    for (const auto& run : runs) run->after_prompt_step(end - 1);
    if (count != nullptr) count->add(runs.size() * tokens.size());
    i = end;
  }
  // The answers: each run feeds its own greedy tokens; a run whose answer is
  // settled leaves the batch.
  std::vector<std::size_t> going(runs.size());
  for (std::size_t k = 0; k < going.size(); ++k) going[k] = k;
  while (!going.empty()) {
    batch.clear();
    tokens.clear();
    std::vector<std::size_t> still;
    for (const std::size_t k : going) {
      if (const std::optional<Token> t = runs[k]->next(runs[k]->decoder().last_logits())) {
        still.push_back(k);
        batch.push_back(&runs[k]->decoder());
        tokens.push_back(*t);
      }
    }
    if (!batch.empty()) Decoder::step_together(batch, tokens);
    going = std::move(still);
  }
  for (std::size_t k = 0; k < runs.size(); ++k) {
    answers[k].right = runs[k]->right();
    answers[k].evicted = runs[k]->decoder().evicted();
  }
  count_prompt_rest(count, length, prompt.tokens.size(), runs.size());
  return answers;
}

}  // namespace

bool answer_task(const std::shared_ptr<const Model>& model, const TaskSample& sample, const RunSpec* spec,
                 Moment moment, std::uint32_t window, std::uint64_t* evicted, std::uint32_t chunk,
                 const KvFormat& kv, const PagedOptions& granularity) {
  return answer_counted(model, sample, spec, moment, window, evicted, chunk, kv, granularity, nullptr, 0);
}

std::vector<TaskAnswer> answer_task_together(const std::shared_ptr<const Model>& model, const TaskSample& sample,
                                             std::span<const TaskConfig> configs, std::uint32_t window,
                                             std::uint32_t chunk, const KvFormat& kv, int threads,
                                             const PagedOptions& granularity) {
  return answer_together_counted(model, sample, configs, window, chunk, kv, threads, granularity, nullptr, 0);
}

namespace {

// Every rule of a request that needs no work, one error each.
void check_task_request(const Model& model, const TaskRequest& request, const ModelRunOptions& options) {
  const ModelConfig& cfg = model.config();
  if (request.tasks.empty()) throw InputError("tasks: no task given");
  for (const std::string& t : request.tasks) {
    task_index(t);
  }
  if (request.lengths.empty()) throw InputError("tasks: no length given");
  for (const std::uint32_t len : request.lengths) {
    if (len > cfg.context) {
      throw InputError(fmt::format("tasks: length {} is longer than the model's context of {} {}", len, cfg.context,
                                   model.vocabulary().kind() == Vocabulary::Kind::kBytes ? "bytes" : "tokens"));
    }
  }
  if (request.depths < 1) throw InputError("tasks: depths must be at least 1");
  if (request.depths > kMaxTaskDepths) {
    throw InputError(fmt::format("tasks: depths ({}) must be at most {}", request.depths, kMaxTaskDepths));
  }
  if (request.samples < 1) throw InputError("tasks: samples must be at least 1");
  if (request.window < 1) throw InputError("tasks: the observation window must be at least 1 byte");
  check_format(options.kv, cfg.head_dim());
  check_paged(options.paged);
  if (options.window != 0) throw ContractError("tasks: a sample's length is its own (lengths): no window");
  if (options.paged.blocks()) throw ParameterError("tasks: the decoder runs on the contiguous store: no block options");
  if (options.paged.active()) {
    for (const Moment m : request.moments) {
      if (m != Moment::decode) {
        throw ParameterError(fmt::format("tasks: --granularity {} applies to the decode moment; the {} moment "
                                         "compresses each cache on its own (use --moments decode)",
                                         granularity_name(options.paged.granularity()), moment_name(m)));
      }
    }
  }
  const std::uint32_t shortest = *std::min_element(request.lengths.begin(), request.lengths.end());
  for (const std::int64_t b : request.budgets) {
    if (b < 1) throw InputError(fmt::format("tasks: budget {} must be at least 1", b));
    if (b > shortest) {
      throw InputError(fmt::format("tasks: budget {} is above the context length {}: nothing could be evicted", b,
                                   shortest));
    }
  }
}

// The samples the grid makes: tasks x lengths x depths x samples. The
// running product stays below 2^17 before each factor (each below 2^32)
// multiplies it, so it cannot wrap.
std::uint64_t task_sample_count(const TaskRequest& request) {
  std::uint64_t sample_count = 1;
  for (const std::uint64_t factor : {std::uint64_t{request.tasks.size()}, std::uint64_t{request.lengths.size()},
                                     std::uint64_t{request.depths}, std::uint64_t{request.samples}}) {
    sample_count *= factor;
    if (sample_count > kMaxTaskSamples) {
      throw InputError(fmt::format(
          "tasks: {} tasks x {} lengths x {} depths x {} samples is more than the {} samples one run may make "
          "(each is built before any work)",
          request.tasks.size(), request.lengths.size(), request.depths, request.samples, kMaxTaskSamples));
    }
  }
  return sample_count;
}

// One configuration a sample is answered with: a policy at a budget, at a moment.
struct TaskConfigSpec {
  RunSpec spec;
  Moment moment;
};

// Policy x budget x moment, each built with every layer's parameters before any work.
std::vector<TaskConfigSpec> task_configs(const ModelConfig& cfg, const TaskRequest& request) {
  std::vector<TaskConfigSpec> configs;
  CompareRequest compare;
  compare.policies = request.policies;
  compare.budgets = request.budgets;
  compare.overrides = request.overrides;
  if (!request.budgets.empty()) {
    for (const RunSpec& spec : compare_specs(compare)) {
      for (std::uint32_t l = 0; l < cfg.layers; ++l) find_policy(spec.policy).make(head_params(spec, cfg, l));
      for (const Moment m : request.moments) configs.push_back({spec, m});
    }
  }
  return configs;
}

struct TaskCell {
  std::size_t task, length, depth;
};

// Every sample, cell by cell, each from its own generator: a cell's samples
// do not depend on which other cells were asked for. A model with its own
// tokenizer counts lengths in tokens: each sample is made at the bytes its
// length is expected to take (the filler's bytes per token), then cut
// shorter until its prompt's tokens and one token an answer byte fit.
std::vector<TaskSample> make_task_samples(const Model& model, std::span<const std::uint8_t> filler,
                                          const TaskRequest& request, std::uint64_t sample_count,
                                          std::vector<TaskCell>& cells) {
  std::vector<TaskSample> samples;
  samples.reserve(static_cast<std::size_t>(sample_count));
  const bool by_tokens = model.vocabulary().kind() != Vocabulary::Kind::kBytes;
  double bytes_per_token = 1.0;
  if (by_tokens) {
    const std::string_view text(reinterpret_cast<const char*>(filler.data()), filler.size());
    const std::size_t n = model.vocabulary().encode(text, false).size();
    if (n == 0) throw InputError("tasks: the filler text makes no tokens");
    bytes_per_token = static_cast<double>(filler.size()) / static_cast<double>(n);
  }
  auto make_sample = [&](const std::string& task, std::uint32_t length, double depth, Rng& rng) {
    if (!by_tokens) return make_task(task, length, depth, rng, filler);
    auto bytes = static_cast<std::uint32_t>(std::floor(length * bytes_per_token));
    for (int attempt = 0; attempt < 12; ++attempt) {
      Rng tried = rng;
      TaskSample s = make_task(task, bytes, depth, tried, filler);
      const std::uint64_t used = task_tokens(model, s) + s.answer.size();
      if (used <= length) {
        rng = tried;
        return s;
      }
      bytes = static_cast<std::uint32_t>(std::floor(bytes * (static_cast<double>(length) / static_cast<double>(used)) * 0.98));
    }
    throw InputError(fmt::format("task {}: no sample of {} tokens could be made (the tokenizer takes more tokens "
                                 "than the filler's average suggests)",
                                 task, length));
  };
  for (std::size_t t = 0; t < request.tasks.size(); ++t) {
    for (std::size_t l = 0; l < request.lengths.size(); ++l) {
      for (std::uint32_t d = 0; d < request.depths; ++d) {
        cells.push_back({t, l, d});
        const double depth = (d + 0.5) / request.depths;
        for (std::uint32_t i = 0; i < request.samples; ++i) {
          Rng rng = task_sample_rng(request.seed, request.tasks[t], request.lengths[l], depth, i);
          samples.push_back(make_sample(request.tasks[t], request.lengths[l], depth, rng));
        }
      }
    }
  }
  return samples;
}

// A prefill moment compresses each sample's first `n` bytes (the context,
// or the whole prompt) with min(window, n) rows, and only when n is above
// the budget; the longest such n decides whether any sample's window
// cannot fit (a shorter one uses no more rows), so it is checked here,
// on every layer's parameters, before any work.
void check_prefill_windows(const Model& model, const std::vector<TaskSample>& samples,
                           const std::vector<TaskConfigSpec>& configs, const TaskRequest& request) {
  const ModelConfig& cfg = model.config();
  const bool by_tokens = model.vocabulary().kind() != Vocabulary::Kind::kBytes;
  std::size_t longest_context = 0, longest_prompt = 0;
  for (const TaskSample& sample : samples) {
    if (by_tokens) {
      const PromptTokens p = prompt_tokens(model, sample);
      longest_context = std::max<std::size_t>(longest_context, p.question);
      longest_prompt = std::max(longest_prompt, p.tokens.size());
      continue;
    }
    longest_context = std::max<std::size_t>(longest_context, sample.question);
    longest_prompt = std::max(longest_prompt, sample.prompt.size());
  }
  for (const TaskConfigSpec& c : configs) {
    if (c.moment != Moment::prefill && c.moment != Moment::prefill_query) continue;
    const std::size_t longest = c.moment == Moment::prefill ? longest_context : longest_prompt;
    if (static_cast<std::int64_t>(longest) <= c.spec.budget) continue;  // nothing is compressed
    for (std::uint32_t l = 0; l < cfg.layers; ++l) {
      ParamMap params = head_params(c.spec, cfg, l);
      std::erase_if(params, [](const auto& kv) { return kv.first == "budget"; });
      check_prefill(c.spec.policy, params, c.spec.budget,
                    std::min<std::size_t>({request.window, longest, request.chunk == 0 ? longest : request.chunk}));
    }
  }
}

// Every sample answered under every configuration (`all`: the full cache,
// then each one); right[s x all + c] and evicted[...] filled in. Samples run
// in rounds -- sample i of every cell, then sample i + 1 -- so that with a
// deadline (ModelRunOptions) the answers given are whole rounds: returns how
// many. Progress counts each sample's length in tokens (`lengths`) once a
// configuration.
std::uint32_t answer_all(const std::shared_ptr<const Model>& model, const std::vector<TaskSample>& samples,
                         const std::vector<std::uint32_t>& lengths, std::span<const TaskConfig> all,
                         const TaskRequest& request, detail::ProgressCounter& count, const ModelRunOptions& options,
                         std::vector<std::uint8_t>& right, std::vector<std::uint64_t>& evicted) {
  const std::size_t per_sample = all.size();
  const std::size_t cells = samples.size() / request.samples;
  // The k-th sample answered: round k / cells, of cell k % cells.
  const auto in_rounds = [&](std::size_t k) { return (k % cells) * request.samples + k / cells; };
  std::size_t answered = 0;  // samples every configuration answered: the first ones in rounds
  if (options.together && model->uses_kernels() && per_sample > 1) {
    // Each sample's configurations in as few groups as keep every core busy,
    // each group stepped together on one core: a weight is read once a token
    // a group, not once a configuration. (kvevict-tiny's Eigen products take
    // one vector at a time: it answers a job a configuration.)
    const auto cores = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
    const std::size_t groups = std::clamp<std::size_t>((cores + samples.size() - 1) / samples.size(), 1, per_sample);
    const std::size_t started =
        detail::paced_jobs(groups * samples.size(), options.deadline, groups * cells, [&](std::size_t job) {
      const std::size_t g = job % groups, s = in_rounds(job / groups);
      const std::size_t first = per_sample * g / groups, end = per_sample * (g + 1) / groups;
      const std::vector<TaskAnswer> got =
          answer_together_counted(model, samples[s], all.subspan(first, end - first), request.window, request.chunk,
                                  options.kv, 1, options.paged, &count, lengths[s]);
      for (std::size_t c = first; c < end; ++c) {
        right[s * per_sample + c] = got[c - first].right ? 1 : 0;
        evicted[s * per_sample + c] = got[c - first].evicted;
      }
    });
    answered = started / groups;
  } else {
    const std::size_t started =
        detail::paced_jobs(right.size(), options.deadline, per_sample * cells, [&](std::size_t job) {
      const std::size_t s = in_rounds(job / per_sample), c = job % per_sample;
      const std::size_t at = s * per_sample + c;
      right[at] = answer_counted(model, samples[s], all[c].spec, all[c].moment, request.window, &evicted[at],
                                 request.chunk, options.kv, options.paged, &count, lengths[s])
                      ? 1
                      : 0;
    });
    answered = started / per_sample;
  }
  const auto rounds = static_cast<std::uint32_t>(answered / cells);
  if (rounds < request.samples) count.finish();
  return rounds;
}

// One row per cell and configuration: the cell's samples' answers summed.
std::vector<TaskRow> task_rows_of(const Model& model, const std::vector<TaskCell>& cells,
                                  const std::vector<TaskConfigSpec>& configs, const TaskRequest& request,
                                  const ModelRunOptions& options, const std::vector<std::uint8_t>& right,
                                  const std::vector<std::uint64_t>& evicted, std::uint32_t rounds) {
  const std::size_t per_sample = 1 + configs.size();
  std::vector<TaskRow> rows;
  for (std::size_t cell = 0; cell < cells.size(); ++cell) {
    for (std::size_t c = 0; c < per_sample; ++c) {
      TaskRow row;
      row.task = request.tasks[cells[cell].task];
      row.length = request.lengths[cells[cell].length];
      row.depth = (cells[cell].depth + 0.5) / request.depths;
      if (c > 0) {
        row.policy = configs[c - 1].spec.policy;
        row.budget = configs[c - 1].spec.budget;
        row.moment = configs[c - 1].moment;
      }
      row.samples = rounds;  // each cell's first `rounds` samples (all, without a deadline)
      for (std::uint32_t i = 0; i < rounds; ++i) {
        const std::size_t job = (cell * request.samples + i) * per_sample + c;
        row.correct += right[job];
        row.evicted += evicted[job];
      }
      row.accuracy = static_cast<double>(row.correct) / row.samples;
      row.kv_precision = std::string(precision_name(options.kv.precision));
      row.kv_residual = options.kv.residual_window();
      if (c > 0 && options.paged.granularity() != Granularity::kHead) {
        row.granularity = std::string(granularity_name(options.paged.granularity()));
      }
      // What a position really costs: a cache that never holds the residual
      // window's R rows (a sample shorter than R, or a decode-time budget B
      // holding B + 1 at most) keeps them all at fp32.
      const std::uint64_t most_held =
          row.moment == Moment::decode ? std::min<std::uint64_t>(static_cast<std::uint64_t>(row.budget) + 1, row.length)
                                       : row.length;
      row.bytes_per_position = held_bytes_per_position(options.kv, model.config().head_dim(), most_held);
      std::tie(row.low, row.high) = wilson_interval(row.correct, row.samples);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace

std::vector<TaskRow> run_tasks(const std::shared_ptr<const Model>& model, std::span<const std::uint8_t> filler,
                               const TaskRequest& request, const ModelRunOptions& options) {
  check_task_request(*model, request, options);
  const std::uint64_t sample_count = task_sample_count(request);
  // The configurations: the full cache, then policy x budget x moment.
  const std::vector<TaskConfigSpec> configs = task_configs(model->config(), request);
  // A shared budget's every policy built too, before any work (a sequence
  // refuses PyramidKV; a layer's budget x heads is checked).
  if (options.paged.active()) {
    for (const TaskConfigSpec& c : configs) (void)DecoderPolicies(c.spec, model->config(), options.paged);
  }
  const std::uint64_t job_count = sample_count * (1 + configs.size());
  if (job_count > kMaxTaskJobs) {
    throw InputError(fmt::format("tasks: {} samples x {} configurations (the full cache and {} policy x budget x "
                                 "moment) is more than the {} answers one run may give",
                                 sample_count, 1 + configs.size(), configs.size(), kMaxTaskJobs));
  }
  // Progress in tokens: each sample's length once a configuration.
  const std::size_t per_sample = 1 + configs.size();
  std::uint64_t length_sum = 0;
  for (const std::uint32_t length : request.lengths) length_sum += length;
  detail::ProgressCounter count(options.progress,
                                length_sum * request.tasks.size() * request.depths * request.samples * per_sample);
  // Every sample is made before any work, and answered once per configuration.
  std::vector<TaskCell> cells;
  const std::vector<TaskSample> samples = make_task_samples(*model, filler, request, sample_count, cells);
  check_prefill_windows(*model, samples, configs, request);
  count.start();  // after the last check: a refusal stays one line
  std::vector<std::uint32_t> lengths;  // each sample's, in tokens
  for (const TaskCell& cell : cells) lengths.insert(lengths.end(), request.samples, request.lengths[cell.length]);
  std::vector<std::uint8_t> right(samples.size() * per_sample, 0);
  std::vector<std::uint64_t> evicted(samples.size() * per_sample, 0);
  std::vector<TaskConfig> all;  // the full cache, then each configuration
  all.push_back({});
  for (const TaskConfigSpec& c : configs) all.push_back({&c.spec, c.moment});
  const std::uint32_t rounds = answer_all(model, samples, lengths, all, request, count, options, right, evicted);
  return task_rows_of(*model, cells, configs, request, options, right, evicted, rounds);
}

}  // namespace kvevict
