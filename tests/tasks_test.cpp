// The retrieval tasks: the samples have the documented shape, the benchmark
// refuses bad requests clearly, the C++ decoder answers exactly as PyTorch
// does, compression that keeps everything changes nothing, and a sliding
// window that has lost the needle cannot answer (the benchmark can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/model/model.h"
#include "kvevict/model/perplexity.h"
#include "kvevict/model/tasks.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::model_dir;

using testing::committed_model;

const std::vector<std::uint8_t>& filler() {
  static const std::vector<std::uint8_t> text = read_text(model_dir() / "heldout-sample.txt");
  return text;
}

std::string prompt_text(const TaskSample& s) { return {s.prompt.begin(), s.prompt.end()}; }

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

template <typename Fn>
void expect_input_error(Fn fn, const std::string& phrase) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected: " << phrase;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(Tasks, PasskeySamplesHaveTheDocumentedShape) {
  for (const double depth : {0.05, 0.5, 0.95}) {
    Rng rng(7);
    const TaskSample s = make_task("passkey", 600, depth, rng, filler());
    const std::string p = prompt_text(s);
    // prompt + answer + ".\n" is the whole sample.
    EXPECT_EQ(s.prompt.size() + s.answer.size() + 2, 600U);
    EXPECT_TRUE(all_digits(s.answer)) << s.answer;
    EXPECT_GE(s.answer.size(), 5U);
    EXPECT_LE(s.answer.size(), 7U);
    EXPECT_NE(s.answer[0], '0');
    const std::string needle = "The pass key is " + s.answer + ". Remember it. " + s.answer + " is the pass key.";
    EXPECT_EQ(p.substr(s.needle, needle.size()), needle);
    EXPECT_EQ(p.substr(s.question), "\nWhat is the pass key? The pass key is ");
    // The needle sits where the depth says, moved at most 25 bytes on to
    // the next word's start.
    const double room = static_cast<double>(s.question) - static_cast<double>(needle.size() + 1);
    EXPECT_GE(s.needle, depth * room - 1.0) << depth;
    EXPECT_LE(s.needle, depth * room + 26.0) << depth;
    // The key appears nowhere but in the needle.
    EXPECT_EQ(p.find(s.answer), s.needle + 16);
    EXPECT_EQ(p.find(s.answer, s.needle + needle.size()), std::string::npos);
  }
}

TEST(Tasks, EveryTaskAsksForWhatOnlyItsNeedlesHold) {
  for (const std::string& task : task_names()) {
    Rng rng(11);
    const TaskSample s = make_task(task, 512, 0.3, rng, filler());
    const std::string p = prompt_text(s);
    const std::size_t closing = task == "copy" ? 3 : 2;
    EXPECT_EQ(s.prompt.size() + s.answer.size() + closing, 512U) << task;
    const std::string q = p.substr(s.question);
    if (task == "multikey") {
      // "... for KEY? The special magic number for KEY is: " and the needle
      // "One of the special magic numbers for KEY is: VALUE."
      const std::string key = q.substr(q.rfind("for ") + 4, 6);
      EXPECT_NE(p.find("One of the special magic numbers for " + key + " is: " + s.answer + "."), std::string::npos);
      EXPECT_TRUE(all_digits(s.answer));
    } else if (task == "multivalue") {
      const std::string key = q.substr(q.rfind("for ") + 4, 6);
      std::size_t at = 0;
      std::size_t from = 0;
      while (at != std::string::npos) {  // each listed value, in order of appearance
        const std::size_t comma = s.answer.find(", ", from);
        const std::string v = s.answer.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
        const std::size_t found = p.find("One of the special magic numbers for " + key + " is: " + v + ".", at);
        ASSERT_NE(found, std::string::npos) << v;
        at = comma == std::string::npos ? std::string::npos : found + 1;
        from = comma + 2;
      }
    } else if (task == "vartrack") {
      EXPECT_EQ(q.rfind("They are: "), q.size() - 10);
      const std::string value = q.substr(q.find("value ") + 6, 5);
      std::string last;
      for (std::size_t b = 0; b < s.answer.size(); b += 6) {
        const std::string name = s.answer.substr(b, 5);
        const std::string rhs = last.empty() ? value : "VAR " + last;
        EXPECT_NE(p.find("VAR " + name + " = " + rhs + "."), std::string::npos) << name;
        last = name;
      }
    } else if (task == "copy") {
      EXPECT_NE(p.find("Code: <<" + s.answer + ">>"), std::string::npos);
      EXPECT_EQ(q, "\nRepeat the code: <<");
    }
  }
}

TEST(Tasks, SamplesAreReproducibleFromTheSeed) {
  Rng a(5), b(5), c(6);
  const TaskSample x = make_task("multikey", 700, 0.5, a, filler());
  const TaskSample y = make_task("multikey", 700, 0.5, b, filler());
  const TaskSample z = make_task("multikey", 700, 0.5, c, filler());
  EXPECT_EQ(x.prompt, y.prompt);
  EXPECT_EQ(x.answer, y.answer);
  EXPECT_NE(x.prompt, z.prompt);
}

TEST(Tasks, WilsonIntervalsWorkedByHand) {
  // n = 10, z = 1.96: 5/10 -> 0.5 +- 0.2634; 0/10 -> [0, 0.2775].
  auto [lo, hi] = wilson_interval(5, 10);
  EXPECT_NEAR(lo, 0.2366, 1e-4);
  EXPECT_NEAR(hi, 0.7634, 1e-4);
  std::tie(lo, hi) = wilson_interval(0, 10);
  EXPECT_EQ(lo, 0.0);
  EXPECT_NEAR(hi, 0.2775, 1e-4);
  std::tie(lo, hi) = wilson_interval(10, 10);
  EXPECT_NEAR(lo, 0.7225, 1e-4);
  EXPECT_NEAR(hi, 1.0, 1e-12);
}

TEST(Tasks, BadRequestsAreClearErrors) {
  Rng rng(1);
  expect_input_error([&] { make_task("needle", 512, 0.5, rng, filler()); },
                     "unknown task 'needle' (known: passkey, multikey, multivalue, vartrack, copy)");
  expect_input_error([&] { make_task("passkey", 90, 0.5, rng, filler()); }, "90 bytes cannot hold");
  const std::vector<std::uint8_t> little(100, 'a');
  expect_input_error([&] { make_task("passkey", 512, 0.5, rng, little); }, "the filler text has 100 bytes");
  const auto model = committed_model();
  TaskRequest r;
  r.samples = 1;
  r.depths = 1;
  r.lengths = {model->config().context + 1};
  expect_input_error([&] { run_tasks(model, filler(), r); }, "longer than the model's context");
  r.lengths = {256};
  r.budgets = {300};
  expect_input_error([&] { run_tasks(model, filler(), r); }, "budget 300 is above the context length 256");
  r.budgets = {64};
  r.tasks = {"passkey", "haystack"};
  expect_input_error([&] { run_tasks(model, filler(), r); }, "unknown task 'haystack'");
  expect_input_error([] { parse_moment("later"); }, "unknown moment 'later'");
}

// PyTorch's greedy bytes for fixed prompts (model/task_reference.py, full
// cache) against the C++ decoder's.
TEST(Tasks, TheDecoderAnswersExactlyAsPyTorchDoes) {
  std::ifstream in(model_dir() / "task-reference.json");
  ASSERT_TRUE(in) << "missing " << (model_dir() / "task-reference.json") << " (model/task_reference.py writes it)";
  const nlohmann::json ref = nlohmann::json::parse(in);
  ASSERT_GE(ref.at("cases").size(), 10U);
  auto unhex = [](const std::string& h) {
    std::vector<std::uint8_t> out;
    for (std::size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<std::uint8_t>(std::stoi(h.substr(i, 2), nullptr, 16)));
    return out;
  };
  const auto model = committed_model();
  for (const auto& c : ref.at("cases")) {
    const std::vector<std::uint8_t> prompt = unhex(c.at("prompt_hex").get<std::string>());
    const std::vector<std::uint8_t> want = unhex(c.at("greedy_hex").get<std::string>());
    Decoder decoder(model, static_cast<std::uint32_t>(prompt.size() + want.size()));
    std::span<const float> logits;
    for (const std::uint8_t b : prompt) logits = decoder.step(b);
    std::vector<std::uint8_t> got;
    for (std::size_t j = 0; j < want.size(); ++j) {
      const auto best = static_cast<std::uint8_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      got.push_back(best);
      if (j + 1 < want.size()) logits = decoder.step(best);
    }
    EXPECT_EQ(got, want) << c.at("task").get<std::string>() << ": the C++ greedy answer differs from PyTorch's";
  }
}

// A budget as large as the sample keeps every position: every policy at
// every moment answers exactly as the full cache does, having evicted nothing.
TEST(Tasks, CompressionThatKeepsEverythingEqualsTheFullCache) {
  TaskRequest r;
  r.tasks = {"passkey", "copy"};
  r.lengths = {300};
  r.depths = 2;
  r.samples = 2;
  r.budgets = {300};
  r.moments = {Moment::decode, Moment::prefill, Moment::prefill_query};
  const std::vector<TaskRow> rows = run_tasks(committed_model(), filler(), r);
  ASSERT_EQ(rows.size(), 2U * 2U * (1U + 7U * 3U));
  const TaskRow* full = nullptr;
  for (const TaskRow& row : rows) {
    if (row.policy.empty()) {
      full = &row;
      continue;
    }
    ASSERT_NE(full, nullptr);
    EXPECT_EQ(row.correct, full->correct) << row.policy << " " << moment_name(row.moment);
    EXPECT_EQ(row.evicted, 0U) << row.policy << " " << moment_name(row.moment);
    EXPECT_EQ(row.task, full->task);
    EXPECT_EQ(row.depth, full->depth);
  }
}

// The benchmark can fail: with the needle far outside a 64-byte window the
// sliding window cannot know the key (guessing 5 to 7 digits right is about
// 1 in 10^5), while the full cache, which the model was trained to use,
// can. The committed model answers 44 of these 48 with the full cache
// (docs/real-model.md); 36 is the floor, so a retrained model that reads the
// needle unreliably fails here, and one correct by chance would happen with
// probability below 10^-150: a pass means the model reads the needle and the
// window lost it.
TEST(Tasks, ASlidingWindowThatLostTheNeedleCannotAnswer) {
  TaskRequest r;
  r.tasks = {"passkey"};
  r.lengths = {512};
  r.depths = 2;  // 25 % and 75 % in: at least ~100 bytes before the question
  r.samples = 24;
  r.policies = {"sliding-window"};
  r.budgets = {64};
  r.moments = {Moment::decode, Moment::prefill};
  const std::vector<TaskRow> rows = run_tasks(committed_model(), filler(), r);
  std::uint32_t full = 0, window = 0, n = 0;
  for (const TaskRow& row : rows) {
    if (row.policy.empty()) {
      full += row.correct;
      n += row.samples;
    } else {
      window += row.correct;
    }
  }
  EXPECT_EQ(n, 48U);
  EXPECT_EQ(window, 0U) << "a window without the needle answered";
  EXPECT_GE(full, 36U) << "the full cache answered " << full << " of " << n
                      << ": the model does not use its context, so the benchmark cannot tell policies apart";
}

}  // namespace
}  // namespace kvevict
