// The decoder's batched passes: a prefill (a prompt's chunk through each
// layer at once) and step_together (many decoders on one pass) against
// step() one token and one decoder at a time. The weight kernels promise the
// same bits (matmul.h), and so do kvevict-tiny's Eigen products, one vector
// at a time: every logit, every held position, every eviction must agree.
// The suite's name puts it in the simd_<target> runs (each target's kernels).
#include <gtest/gtest.h>


#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/arch/model_writer.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/evaluation/stream.h"
#include "kvevict/model/evaluation/tasks.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const Model> random_model(const std::string& arch, WeightType type, std::uint32_t width,
                                          const fs::path& dir, std::uint32_t context = 96) {
  RandomModelSpec s;
  s.architecture = arch;
  s.type = type;
  s.layers = 2;
  s.width = width;
  s.heads = 4;
  s.kv_heads = 2;
  s.ff = 2 * width;
  s.context = context;
  s.merges = 64;
  const std::vector<std::uint8_t> text = testing::heldout_prefix(4000);
  s.tokenizer_text.assign(text.begin(), text.end());
  const fs::path file = dir / (arch + "-" + std::string(weight_type_info(type).name) + ".gguf");
  write_random_model(s, file);
  return Model::load(file);
}

std::shared_ptr<const Model> tiny() {
  return Model::load(fs::path(KVEVICT_SOURCE_DIR) / "model" / "kvevict-tiny.kvm", ModelOptions{.context = 96});
}

std::vector<Token> tokens_for(const Model& model, std::size_t n) {
  std::vector<Token> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(static_cast<Token>((i * 37 + 11) % model.config().vocab));
  return t;
}

// What a run's progress callback was told: 0 of the total first (before any
// token), then counts rising to the total, which is reported once.
struct ProgressSeen {
  std::uint32_t calls = 0;
  std::uint32_t last = 0;
  std::uint32_t total = 0;
  bool rising = true;
  ProgressFn callback() {
    return [this](std::uint32_t done, std::uint32_t of) {
      rising = rising && (calls == 0 ? done == 0 : done > last && of == total);
      ++calls;
      last = done;
      total = of;
    };
  }
};

struct PolicySetup {
  const char* label;
  std::optional<RunSpec> spec;  // none: the full cache
  PositionMode positions = PositionMode::kOriginal;
  std::uint32_t block_size = 0;
};

std::vector<PolicySetup> setups() {
  std::vector<PolicySetup> s;
  s.push_back({"full cache", std::nullopt});
  s.push_back({"h2o 12", RunSpec{"h2o", {{"recentWindow", 4}}, 12}});
  s.push_back({"sliding window 10, by index", RunSpec{"sliding-window", {}, 10}, PositionMode::kCache});
  s.push_back({"expected attention 16", RunSpec{"expected-attention", {{"sinks", 2}, {"queryWindow", 8}}, 16}});
  s.push_back({"tova 12, paged", RunSpec{"tova", {}, 12}, PositionMode::kOriginal, 4});
  return s;
}

struct DecodeRun {
  std::unique_ptr<Decoder> decoder;
  DecoderPolicies policies;
};

DecodeRun make_run(const std::shared_ptr<const Model>& model, const PolicySetup& s, std::uint32_t chunk) {
  DecoderOptions o;
  o.positions = s.positions;
  o.block_size = s.block_size;
  o.prefill_chunk = chunk;
  o.threads = 2;
  DecodeRun r;
  r.decoder = std::make_unique<Decoder>(model, o);
  if (s.spec) {
    r.policies = DecoderPolicies(*s.spec, model->config(), PagedOptions{});
    r.policies.attach(*r.decoder);
  }
  return r;
}

void expect_same_caches(const Decoder& a, const Decoder& b, const std::string& where) {
  ASSERT_EQ(a.position(), b.position()) << where;
  ASSERT_EQ(a.evicted(), b.evicted()) << where;
  for (std::uint32_t h = 0; h < a.config().head_count(); ++h) {
    const auto ha = a.held(h);
    const auto hb = b.held(h);
    ASSERT_EQ(std::vector<Position>(ha.begin(), ha.end()), std::vector<Position>(hb.begin(), hb.end()))
        << where << " cache " << h;
    // What the last token left for the signals: its attention, over which
    // positions, and its queries.
    const auto aa = a.attended(h);
    const auto ab = b.attended(h);
    ASSERT_EQ(std::vector<Position>(aa.begin(), aa.end()), std::vector<Position>(ab.begin(), ab.end()))
        << where << " cache " << h;
    const auto wa = a.attention(h);
    const auto wb = b.attention(h);
    ASSERT_EQ(std::vector<float>(wa.begin(), wa.end()), std::vector<float>(wb.begin(), wb.end()))
        << where << " cache " << h;
    const auto qa = a.queries(h);
    const auto qb = b.queries(h);
    ASSERT_EQ(std::vector<float>(qa.begin(), qa.end()), std::vector<float>(qb.begin(), qb.end()))
        << where << " cache " << h;
  }
}

void check_prefill(const std::shared_ptr<const Model>& model, const std::string& name) {
  const std::vector<Token> tokens = tokens_for(*model, 60);
  for (const PolicySetup& s : setups()) {
    const std::string where = name + ", " + s.label;
    DecodeRun one = make_run(model, s, 1);
    DecodeRun chunked = make_run(model, s, 7);
    DecodeRun last_only = make_run(model, s, 7);  // PromptLogits::kLast
    std::vector<float> expected;
    for (const Token t : tokens) {
      const auto l = one.decoder->step(t);
      expected.insert(expected.end(), l.begin(), l.end());
    }
    const std::size_t vocab = model->config().vocab;
    for (std::size_t at = 0; at < tokens.size(); at += 7) {
      const std::size_t n = std::min<std::size_t>(7, tokens.size() - at);
      const auto rows = chunked.decoder->prefill(std::span<const Token>(tokens).subspan(at, n));
      ASSERT_EQ(rows.size(), n * vocab) << where;
      for (std::size_t j = 0; j < rows.size(); ++j) {
        ASSERT_EQ(rows[j], expected[at * vocab + j]) << where << ": token " << at + j / vocab << " logit " << j % vocab;
      }
      const auto last = chunked.decoder->last_logits();
      ASSERT_EQ(std::vector<float>(last.begin(), last.end()),
                std::vector<float>(rows.end() - static_cast<std::ptrdiff_t>(vocab), rows.end()))
          << where;
      // The last token's logits alone: that row, to the bit.
      const auto row = last_only.decoder->prefill(std::span<const Token>(tokens).subspan(at, n), PromptLogits::kLast);
      const std::vector<float> want(expected.begin() + static_cast<std::ptrdiff_t>((at + n - 1) * vocab),
                                    expected.begin() + static_cast<std::ptrdiff_t>((at + n) * vocab));
      ASSERT_EQ(std::vector<float>(row.begin(), row.end()), want) << where << ", last only: chunk at " << at;
      const auto kept = last_only.decoder->last_logits();
      ASSERT_EQ(std::vector<float>(kept.begin(), kept.end()), want) << where << ", last only";
    }
    expect_same_caches(*one.decoder, *chunked.decoder, where);
    expect_same_caches(*one.decoder, *last_only.decoder, where + ", last only");
    // And decoding goes on from there alike.
    const Token next = tokens[3];
    const auto a = one.decoder->step(next);
    const std::vector<float> va(a.begin(), a.end());
    const auto b = chunked.decoder->step(next);
    EXPECT_EQ(va, std::vector<float>(b.begin(), b.end())) << where;
  }
}

TEST(WeightKernelsDecoder, APrefillGivesEachTokensLogitsAsStepsDo) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  check_prefill(random_model("llama", WeightType::kQ8_0, 64, dir), "llama Q8_0");
  check_prefill(random_model("qwen2", WeightType::kF16, 64, dir), "qwen2 F16");
  check_prefill(random_model("mistral", WeightType::kQ4_K, 256, dir), "mistral Q4_K");
}

// A sequence budget's prefill runs a pass a token (its eviction comes
// between tokens); asked for the last logits only, it returns that row.
TEST(WeightKernelsDecoder, ALastLogitsPrefillUnderASequenceBudgetIsItsLastStep) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto model = random_model("llama", WeightType::kQ8_0, 64, dir);
  const std::vector<Token> tokens = tokens_for(*model, 30);
  PagedOptions sequence;
  sequence.set_granularity(Granularity::kSequence);
  const RunSpec h2o{"h2o", {{"recentWindow", 4}}, 12};
  std::vector<DecodeRun> runs(2);
  for (DecodeRun& r : runs) {
    r.decoder = std::make_unique<Decoder>(model, DecoderOptions{.threads = 2, .prefill_chunk = 10});
    r.policies = DecoderPolicies(h2o, model->config(), sequence);
    r.policies.attach(*r.decoder);
  }
  for (std::size_t at = 0; at < tokens.size(); at += 10) {
    std::vector<float> want;
    for (std::size_t i = at; i < at + 10; ++i) {
      const auto l = runs[0].decoder->step(tokens[i]);
      want.assign(l.begin(), l.end());
    }
    const auto row = runs[1].decoder->prefill(std::span<const Token>(tokens).subspan(at, 10), PromptLogits::kLast);
    ASSERT_EQ(std::vector<float>(row.begin(), row.end()), want) << "chunk at " << at;
  }
  expect_same_caches(*runs[0].decoder, *runs[1].decoder, "sequence budget, last only");
}

TEST(WeightKernelsDecoder, TheTinyModelsPrefillKeepsItsArithmetic) {
  const auto model = tiny();
  EXPECT_FALSE(model->uses_kernels());
  check_prefill(model, "kvevict-tiny");
}

TEST(WeightKernelsDecoder, StepTogetherIsEachDecoderStepAlone) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  for (const auto& model : {random_model("llama", WeightType::kF16, 64, dir), tiny()}) {
    const std::vector<Token> tokens = tokens_for(*model, 50);
    std::vector<DecodeRun> alone;
    std::vector<DecodeRun> together;
    for (const PolicySetup& s : setups()) {
      alone.push_back(make_run(model, s, 1));
      together.push_back(make_run(model, s, 1));
    }
    std::vector<Decoder*> group;
    for (DecodeRun& r : together) group.push_back(r.decoder.get());
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      // Each run its own token, as sequences in a batch; the first half the same token.
      std::vector<Token> step_tokens;
      for (std::size_t i = 0; i < group.size(); ++i) step_tokens.push_back(tokens[(t + (t < 25 ? 0 : i)) % tokens.size()]);
      Decoder::step_together(group, step_tokens);
      for (std::size_t i = 0; i < group.size(); ++i) {
        const auto a = alone[i].decoder->step(step_tokens[i]);
        const std::vector<float> va(a.begin(), a.end());
        const auto b = group[i]->last_logits();
        ASSERT_EQ(va, std::vector<float>(b.begin(), b.end()))
            << model->config().architecture << ", " << setups()[i].label << ", token " << t;
      }
    }
    for (std::size_t i = 0; i < group.size(); ++i) {
      expect_same_caches(*alone[i].decoder, *group[i], setups()[i].label);
    }
  }
}

// prefill_together: the same tokens to every decoder, several a pass --
// each decoder's logits after each token, its caches and signals, as it
// steps alone. Policies of every kind evict within the passes (budgets
// below the text), a paged store and keys by index among them, plus a
// decoder whose caches share one sequence budget (a pass a token); the
// passes' lengths vary (7, then 1, 5, ...). With PromptLogits::kLast the
// rows are each decoder's last alone, and everything else the same.
TEST(WeightKernelsDecoder, PrefillTogetherIsEachDecoderStepAlone) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto q8 = random_model("llama", WeightType::kQ8_0, 64, dir);
  for (const PromptLogits mode : {PromptLogits::kEvery, PromptLogits::kLast})
  for (const auto& model : {q8, tiny()}) {
    const std::vector<Token> tokens = tokens_for(*model, 60);
    std::vector<PolicySetup> runs = setups();
    std::vector<DecodeRun> alone;
    std::vector<DecodeRun> together;
    for (const PolicySetup& s : runs) {
      alone.push_back(make_run(model, s, 1));
      together.push_back(make_run(model, s, 7));
    }
    // The sequence budget's decoder, last (its own policies object).
    PagedOptions sequence;
    sequence.set_granularity(Granularity::kSequence);
    const RunSpec h2o{"h2o", {{"recentWindow", 4}}, 12};
    for (auto* group : {&alone, &together}) {
      DecodeRun r;
      r.decoder = std::make_unique<Decoder>(model, DecoderOptions{.threads = 2});
      r.policies = DecoderPolicies(h2o, model->config(), sequence);
      r.policies.attach(*r.decoder);
      group->push_back(std::move(r));
    }
    const bool every = mode == PromptLogits::kEvery;
    const std::string arch = model->config().architecture + (every ? "" : ", kLast");
    for (const bool with_sequence : {false, true}) {
      std::vector<Decoder*> group;
      for (std::size_t i = 0; i < together.size(); ++i) {
        if (i + 1 < together.size() || with_sequence) group.push_back(together[i].decoder.get());
      }
      // The first half without the sequence decoder, the rest with it.
      const std::size_t from = with_sequence ? 30 : 0;
      const std::size_t to = with_sequence ? tokens.size() : 30;
      if (!with_sequence) {  // the sequence decoder and its twin step alone, to be level for the second half
        for (std::size_t at = 0; at < 30; ++at) {
          together.back().decoder->step(tokens[at]);
          alone.back().decoder->step(tokens[at]);
        }
      }
      const std::size_t vocab = model->config().vocab;
      for (std::size_t at = from, pass = 0; at < to; ++pass) {
        const std::size_t n = std::min<std::size_t>(pass % 3 == 1 ? 1U : 7U - pass % 4, to - at);
        const std::span<const Token> some = std::span<const Token>(tokens).subspan(at, n);
        const std::span<const float> rows = Decoder::prefill_together(group, some, mode);
        const std::size_t kept = every ? n : 1;  // rows a decoder
        ASSERT_EQ(rows.size(), group.size() * kept * vocab) << arch;
        for (std::size_t k = 0; k < group.size(); ++k) {
          for (std::size_t j = 0; j < n; ++j) {
            const auto a = alone[k].decoder->step(some[j]);
            const std::vector<float> want(a.begin(), a.end());
            if (every || j + 1 == n) {
              const auto row = rows.subspan((k * kept + (every ? j : 0)) * vocab, vocab);
              ASSERT_EQ(want, std::vector<float>(row.begin(), row.end()))
                  << arch << ", run " << k << ", token " << at + j;
            }
            if (j + 1 == n) {
              const auto last = group[k]->last_logits();
              ASSERT_EQ(want, std::vector<float>(last.begin(), last.end())) << arch << ", run " << k;
            }
          }
        }
        at += n;
      }
    }
    for (std::size_t k = 0; k < together.size(); ++k) {
      expect_same_caches(*alone[k].decoder, *together[k].decoder, arch + ", run " + std::to_string(k));
    }
    EXPECT_GT(together[1].decoder->evicted(), 0U) << "the policies must evict for the test to mean anything";
    EXPECT_GT(together.back().decoder->evicted(), 0U);
  }
}

// Each decoder of a step_together owns its logits: the lead stepping again
// (alone, or leading another group) leaves the others' as they were, until
// they step themselves (they pointed into the lead's scratch).
TEST(WeightKernelsDecoder, LogitsAfterStepTogetherStayTheDecodersOwn) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto model = random_model("llama", WeightType::kQ8_0, 64, dir);
  const std::vector<Token> tokens = tokens_for(*model, 6);
  Decoder lead(model);
  Decoder other(model);
  Decoder third(model);
  Decoder reference(model);
  std::vector<Decoder*> pair = {&lead, &other};
  const std::vector<Token> two = {tokens[0], tokens[1]};
  Decoder::step_together(pair, two);
  const auto expected = reference.step(tokens[1]);
  const std::vector<float> want(expected.begin(), expected.end());
  const auto seen = other.last_logits();
  ASSERT_EQ(std::vector<float>(seen.begin(), seen.end()), want);
  lead.step(tokens[2]);  // the lead alone
  std::vector<Decoder*> next = {&lead, &third};
  const std::vector<Token> more = {tokens[3], tokens[4]};
  Decoder::step_together(next, more);  // the lead leading another group
  const auto still = other.last_logits();
  EXPECT_EQ(std::vector<float>(still.begin(), still.end()), want);
  // Stepping itself moves them on.
  const auto moved = other.step(tokens[5]);
  const auto again = reference.step(tokens[5]);
  EXPECT_EQ(std::vector<float>(moved.begin(), moved.end()), std::vector<float>(again.begin(), again.end()));
}

TEST(WeightKernelsDecoder, APrefillPastTheChunkOrTheCapacityIsRefusedChangingNothing) {
  const auto model = tiny();
  Decoder decoder(model, DecoderOptions{.capacity = 10, .prefill_chunk = 8});
  const std::vector<Token> tokens = tokens_for(*model, 9);
  testing::expect_error<InputError>([&] { decoder.prefill(tokens); },
                                            "decoder: a prefill of 9 tokens is over the chunk of 8 "
                                            "(DecoderOptions::prefill_chunk)");
  decoder.prefill(std::span<const Token>(tokens).first(6));
  testing::expect_error<InputError>(
      [&] { decoder.prefill(std::span<const Token>(tokens).first(5)); },
      "decoder: position 10 is past the capacity of 10 positions (cache 0 is full: a cache without a policy, or "
      "with a budget of the capacity or more, ends there)");
  EXPECT_EQ(decoder.position(), 6U);
  decoder.prefill(std::span<const Token>(tokens).first(4));  // exactly to the capacity
  EXPECT_EQ(decoder.position(), 10U);
}

TEST(WeightKernelsDecoder, StepTogetherRefusesWhatCannotBeOnePass) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto model = tiny();
  const auto other = random_model("llama", WeightType::kF32, 64, dir);
  Decoder a(model);
  Decoder b(model);
  Decoder c(other);
  const std::vector<Token> two = {1, 2};
  std::vector<Decoder*> same = {&a, &a};
  testing::expect_error<ContractError>([&] { Decoder::step_together(same, two); },
                                               "step_together: decoders 0 and 1 are one");
  std::vector<Decoder*> mixed = {&a, &c};
  testing::expect_error<ContractError>([&] { Decoder::step_together(mixed, two); },
                                               "step_together: decoder 1 runs another model than decoder 0");
  std::vector<Decoder*> pair = {&a, &b};
  const std::vector<Token> bad = {1, 999};
  testing::expect_error<InputError>(
      [&] { Decoder::step_together(pair, bad); },
      "decoder 1: token 999 at position 0 is outside the model's vocabulary of 256");
  EXPECT_EQ(a.position(), 0U);  // checked before anything moved
  std::vector<Decoder*> null_first = {nullptr, &b};
  testing::expect_error<ContractError>([&] { Decoder::step_together(null_first, two); },
                                       "step_together: decoder 0 is null");
  // prefill_together: the same checks, the lead's chunk (64 by default),
  // and every decoder ready for all the tokens.
  testing::expect_error<ContractError>([&] { Decoder::prefill_together(null_first, two); },
                                       "prefill_together: decoder 0 is null");
  testing::expect_error<ContractError>([&] { Decoder::prefill_together(same, two); },
                                       "prefill_together: decoders 0 and 1 are one");
  testing::expect_error<ContractError>([&] { Decoder::prefill_together(mixed, two); },
                                       "prefill_together: decoder 1 runs another model than decoder 0");
  testing::expect_error<InputError>([&] { Decoder::prefill_together(pair, bad); },
                                    "decoder 0: token 999 at position 1 is outside the model's vocabulary of 256");
  const std::vector<Token> long_pass(65, 7);
  testing::expect_error<InputError>(
      [&] { Decoder::prefill_together(pair, long_pass); },
      "prefill_together: 65 tokens are over decoder 0's chunk of 64 (DecoderOptions::prefill_chunk)");
  Decoder small(model, DecoderOptions{.capacity = 4});
  std::vector<Decoder*> with_small = {&a, &small};
  const std::vector<Token> five(5, 7);
  testing::expect_error<InputError>(
      [&] { Decoder::prefill_together(with_small, five); },
      "decoder 1: position 4 is past the capacity of 4 positions (cache 0 is full: a cache without a policy, or "
      "with a budget of the capacity or more, ends there)");
  EXPECT_EQ(a.position(), 0U);
  EXPECT_EQ(small.position(), 0U);
  EXPECT_TRUE(Decoder::prefill_together(pair, std::span<const Token>()).empty());
}

// Perplexity on a model on the weight kernels steps each window's runs
// together (ModelRunOptions::together): every row must be what the runs give
// one at a time, to the bit -- decode-time eviction, a paged store, and a
// prefill's compression alike.
TEST(WeightKernelsDecoder, PerplexityRowsAreTheRunsOneAtATime) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto model = random_model("llama", WeightType::kQ8_0, 64, dir);
  const std::vector<std::uint8_t> text = testing::heldout_prefix(700);
  const std::vector<RunSpec> specs = {{"h2o", {{"recentWindow", 4}}, 24},
                                      {"tova", {}, 24},
                                      {"sliding-window", {}, 16},
                                      {"expected-attention", {{"sinks", 2}, {"queryWindow", 8}}, 24},
                                      {"snapkv", {{"obsWindow", 4}, {"recentWindow", 4}}, 32}};
  ModelRunOptions decode;
  decode.max_windows = 3;
  ModelRunOptions paged = decode;
  paged.paged.block_size = 8;
  ModelRunOptions prefill = decode;
  prefill.prefill = 40;
  prefill.prefill_window = 8;
  // Without Expected Attention (whose compression reads every byte's
  // queries) the runs' passes before the prefill's end are several bytes long.
  std::vector<RunSpec> rows_only = specs;
  std::erase_if(rows_only, [](const RunSpec& r) { return r.policy == "expected-attention"; });
  for (const auto& [label, options, runs] :
       {std::tuple<const char*, ModelRunOptions, const std::vector<RunSpec>*>{"decode", decode, &specs},
        {"paged", paged, &specs},
        {"prefill", prefill, &specs},
        {"prefill, attention rows only", prefill, &rows_only}}) {
    const std::vector<RunSpec>& these = *runs;
    ModelRunOptions alone = options;
    alone.together = false;
    const std::vector<PerplexityRow> a = perplexity(*model, text, these, alone);
    ProgressSeen seen;
    ModelRunOptions together = options;
    together.progress = seen.callback();
    const std::vector<PerplexityRow> b = perplexity(*model, text, these, together);
    EXPECT_TRUE(seen.rising) << label;
    EXPECT_EQ(seen.last, seen.total) << label << ": progress ends at its total";
    // In tokens: every run steps each window's positions but its last; with a
    // prefill, the 40 tokens a window reads before its first prediction too.
    const std::uint64_t stepped = a[0].predictions + (options.prefill > 0 ? 3U * 40U : 0U);
    EXPECT_EQ(seen.total, (these.size() + 1) * stepped) << label << ": each run's tokens";
    ASSERT_EQ(a.size(), these.size() + 1) << label;
    ASSERT_EQ(b.size(), a.size()) << label;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].bits_per_byte, b[i].bits_per_byte) << label << " row " << i;
      EXPECT_EQ(a[i].perplexity, b[i].perplexity) << label << " row " << i;
      EXPECT_EQ(a[i].extra_bits_per_byte, b[i].extra_bits_per_byte) << label << " row " << i;
      EXPECT_EQ(a[i].evicted, b[i].evicted) << label << " row " << i;
      EXPECT_EQ(a[i].predictions, b[i].predictions) << label << " row " << i;
      EXPECT_EQ(a[i].peak_blocks, b[i].peak_blocks) << label << " row " << i;
      EXPECT_EQ(a[i].peak_positions, b[i].peak_positions) << label << " row " << i;
    }
    EXPECT_GT(a.back().evicted + a[1].evicted, 0U) << label << ": the policies must evict for the test to mean anything";
  }
}

// A sample's answers stepped together (answer_task_together) against each
// configuration answering alone (answer_task). The answer is the full
// cache's own greedy continuation, worked out here by plain step() calls, so
// the full cache must answer right over several tokens while the policies'
// answers part from it at different tokens -- runs leave the batch at
// different steps.
TEST(WeightKernelsDecoder, TaskAnswersTogetherAreEachAlone) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto model = random_model("llama", WeightType::kQ8_0, 64, dir);
  const Vocabulary& vocab = model->vocabulary();
  TaskSample sample;
  sample.task = "passkey";
  const std::vector<std::uint8_t> text = testing::heldout_prefix(60);
  sample.prompt = text;
  sample.question = 45;
  const std::vector<Token> prompt = sequence_tokens(*model, sample.prompt);
  ASSERT_LT(prompt.size() + 24, model->config().context);
  {
    Decoder decoder(model, DecoderOptions{.capacity = model->config().context});
    std::span<const float> logits;
    for (const Token t : prompt) logits = decoder.step(t);
    for (int k = 0; k < 6; ++k) {
      Token best = 0;
      for (Token v = 1; v < logits.size(); ++v) {
        if (logits[v] > logits[best]) best = v;
      }
      const std::string piece = vocab.piece_bytes(best);
      ASSERT_FALSE(piece.empty()) << "greedy token " << k << " stands for no bytes";
      sample.answer += piece;
      logits = decoder.step(best);
    }
  }
  const std::vector<RunSpec> specs = {{"h2o", {{"recentWindow", 4}}, 12},
                                      {"tova", {}, 20},
                                      {"sliding-window", {}, 8},
                                      {"expected-attention", {{"sinks", 2}, {"queryWindow", 8}}, 16},
                                      {"snapkv", {{"obsWindow", 4}, {"recentWindow", 4}}, 16}};
  std::vector<TaskConfig> configs = {{nullptr, Moment::full}};
  for (const RunSpec& spec : specs) configs.push_back({&spec, Moment::decode});
  configs.push_back({&specs.back(), Moment::prefill});
  configs.push_back({&specs.back(), Moment::prefill_query});
  for (const std::uint32_t chunk : {0U, 24U}) {
    const std::vector<TaskAnswer> together = answer_task_together(model, sample, configs, 8, chunk, {}, 1);
    ASSERT_EQ(together.size(), configs.size());
    std::size_t wrong = 0;
    for (std::size_t c = 0; c < configs.size(); ++c) {
      std::uint64_t evicted = 0;
      const bool right = answer_task(model, sample, configs[c].spec, configs[c].moment, 8, &evicted, chunk);
      EXPECT_EQ(together[c].right, right) << "configuration " << c << ", chunk " << chunk;
      EXPECT_EQ(together[c].evicted, evicted) << "configuration " << c << ", chunk " << chunk;
      if (c > 0) {
        EXPECT_GT(evicted, 0U) << "configuration " << c << " must evict for the test to mean anything";
      }
      wrong += right ? 0 : 1;
    }
    EXPECT_TRUE(together[0].right) << "the full cache says its own greedy continuation";
    EXPECT_GT(wrong, 0U) << "some policy must answer otherwise, leaving the batch early";
  }
}

// run_tasks on a kernel model answers each sample's configurations together
// (ModelRunOptions::together): the rows must be those of one at a time.
TEST(WeightKernelsDecoder, TaskRowsAreTheConfigurationsOneAtATime) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto model = random_model("llama", WeightType::kF16, 64, dir, 192);
  const std::vector<std::uint8_t> filler = testing::heldout_prefix(4000);
  TaskRequest request;
  request.tasks = {"passkey", "copy"};
  request.lengths = {150};
  request.depths = 2;
  request.samples = 2;
  request.policies = {"h2o", "snapkv", "sliding-window"};
  request.budgets = {24, 40};
  request.moments = {Moment::decode, Moment::prefill, Moment::prefill_query};
  request.overrides = {{"h2o.recentWindow", 4}, {"snapkv.recentWindow", 4}, {"snapkv.obsWindow", 4}};
  request.window = 8;
  ModelRunOptions alone;
  alone.together = false;
  const std::vector<TaskRow> a = run_tasks(model, filler, request, alone);
  ProgressSeen seen;
  ModelRunOptions together;
  together.progress = seen.callback();
  const std::vector<TaskRow> b = run_tasks(model, filler, request, together);
  EXPECT_TRUE(seen.rising);
  EXPECT_EQ(seen.last, seen.total) << "progress ends at its total";
  // In tokens: each of the 2 x 2 x 2 samples' 150, once a configuration.
  EXPECT_EQ(seen.total, 150U * 2U * 2U * 2U * (1U + 3U * 2U * 3U)) << "a sample's length a configuration";
  ASSERT_EQ(a.size(), 2U * 2U * (1U + 3U * 2U * 3U));
  ASSERT_EQ(b.size(), a.size());
  std::uint64_t evicted = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].policy, b[i].policy) << "row " << i;
    EXPECT_EQ(a[i].correct, b[i].correct) << "row " << i;
    EXPECT_EQ(a[i].evicted, b[i].evicted) << "row " << i;
    evicted += a[i].evicted;
  }
  EXPECT_GT(evicted, 0U);
}

// A stream on a kernel model steps its runs together
// (ModelRunOptions::together): every row, segment by segment, must be what
// the runs give one at a time -- the full cache leaving the batch at the
// context, the policies reading on past it, at both position modes.
TEST(WeightKernelsDecoder, StreamRowsAreTheRunsOneAtATime) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const auto model = random_model("llama", WeightType::kQ4_0, 64, dir);
  const std::vector<std::uint8_t> text = testing::heldout_prefix(400);
  StreamRequest request;
  request.specs = stream_specs("h2o,sliding-window,expected-attention:sinks=2:queryWindow=8",
                               std::vector<std::int64_t>{20, 40}, {{"h2o.recentWindow", 4}});
  request.tokens = 220;
  request.segment = 50;
  request.recompute_window = 16;
  request.recompute_tokens = 30;
  ModelRunOptions alone;
  alone.together = false;
  const std::vector<StreamRow> a = stream_perplexity(*model, text, request, alone);
  ProgressSeen seen;
  ModelRunOptions together;
  together.progress = seen.callback();
  const std::vector<StreamRow> b = stream_perplexity(*model, text, request, together);
  EXPECT_TRUE(seen.rising);
  EXPECT_EQ(seen.last, seen.total) << "progress ends at its total";
  EXPECT_EQ(seen.total, 220U * a.size()) << "the stream's 220 tokens a run";
  ASSERT_EQ(a.size(), 1U + 3U * 2U * 2U + 1U);
  ASSERT_EQ(b.size(), a.size());
  EXPECT_EQ(a.front().tokens, model->config().context) << "the full cache stops at the context";
  EXPECT_EQ(a[1].tokens, 220U) << "a policy reads the whole stream";
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].policy, b[i].policy) << "row " << i;
    EXPECT_EQ(a[i].positions, b[i].positions) << "row " << i;
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "row " << i;
    EXPECT_EQ(a[i].nll, b[i].nll) << "row " << i;
    EXPECT_EQ(a[i].bits_per_byte, b[i].bits_per_byte) << "row " << i;
    EXPECT_EQ(a[i].evicted, b[i].evicted) << "row " << i;
    EXPECT_EQ(a[i].peak_positions, b[i].peak_positions) << "row " << i;
    ASSERT_EQ(a[i].segments.size(), b[i].segments.size()) << "row " << i;
    for (std::size_t k = 0; k < a[i].segments.size(); ++k) {
      EXPECT_EQ(a[i].segments[k].nll, b[i].segments[k].nll) << "row " << i << " segment " << k;
      EXPECT_EQ(a[i].segments[k].predictions, b[i].segments[k].predictions) << "row " << i << " segment " << k;
    }
    if (i > 0 && i + 1 < a.size()) {
      EXPECT_GT(a[i].evicted, 0U) << "row " << i << " must evict for the test to mean anything";
    }
  }
}

// A deadline (ModelRunOptions::deadline) stops perplexity between windows:
// the rows are those of the first windows every run finished, to the bit the
// rows of that many windows (max_windows); at least min_windows run however
// late it is, and a deadline that is never reached changes nothing. On a
// kernel model (runs stepped together) and on kvevict-tiny (a job a run).
TEST(WeightKernelsDecoder, ADeadlineKeepsTheFirstWindowsRows) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const std::vector<std::uint8_t> text = testing::heldout_prefix(900);
  const std::vector<RunSpec> specs = {{"h2o", {{"recentWindow", 4}}, 24}, {"sliding-window", {}, 16}};
  for (const auto& [label, model] : {std::pair<const char*, std::shared_ptr<const Model>>{
                                         "llama Q8_0", random_model("llama", WeightType::kQ8_0, 64, dir)},
                                     {"kvevict-tiny", tiny()}}) {
    ModelRunOptions late;
    late.deadline = std::chrono::steady_clock::now();  // already past
    const std::vector<PerplexityRow> cut = perplexity(*model, text, specs, late);
    ModelRunOptions two;
    two.max_windows = 2;
    const std::vector<PerplexityRow> first = perplexity(*model, text, specs, two);
    ModelRunOptions whole;
    const std::vector<PerplexityRow> all = perplexity(*model, text, specs, whole);
    ModelRunOptions far;
    far.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
    const std::vector<PerplexityRow> unhurried = perplexity(*model, text, specs, far);
    ASSERT_EQ(cut.size(), specs.size() + 1) << label;
    EXPECT_GT(all.front().predictions, first.front().predictions) << label << ": the text must make more windows";
    for (std::size_t i = 0; i < cut.size(); ++i) {
      EXPECT_EQ(cut[i].predictions, first[i].predictions) << label << " row " << i;
      EXPECT_EQ(cut[i].bits_per_byte, first[i].bits_per_byte) << label << " row " << i;
      EXPECT_EQ(cut[i].extra_bits_per_byte, first[i].extra_bits_per_byte) << label << " row " << i;
      EXPECT_EQ(cut[i].extra_low, first[i].extra_low) << label << " row " << i;
      EXPECT_EQ(cut[i].evicted, first[i].evicted) << label << " row " << i;
      EXPECT_EQ(unhurried[i].bits_per_byte, all[i].bits_per_byte) << label << " row " << i;
      EXPECT_EQ(unhurried[i].predictions, all[i].predictions) << label << " row " << i;
    }
    ModelRunOptions one = late;
    one.min_windows = 1;
    ModelRunOptions first_only;
    first_only.max_windows = 1;
    EXPECT_EQ(perplexity(*model, text, specs, one).front().predictions,
              perplexity(*model, text, specs, first_only).front().predictions)
        << label;
  }
}

// Windows shorter than the context (ModelRunOptions::window) are the windows
// of the model run at that context: the same rows, to the bit. Past the
// context, or of one position, they are refused.
TEST(WeightKernelsDecoder, ShorterWindowsAreTheModelAtThatContext) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  random_model("llama", WeightType::kQ8_0, 64, dir);
  const fs::path file = dir / ("llama-" + std::string(weight_type_info(WeightType::kQ8_0).name) + ".gguf");
  const auto model = Model::load(file);
  const auto at48 = Model::load(file, ModelOptions{.context = 48});
  const std::vector<std::uint8_t> text = testing::heldout_prefix(500);
  const std::vector<RunSpec> specs = {{"h2o", {{"recentWindow", 4}}, 16}, {"tova", {}, 20}};
  ModelRunOptions window;
  window.window = 48;
  const std::vector<PerplexityRow> a = perplexity(*model, text, specs, window);
  const std::vector<PerplexityRow> b = perplexity(*at48, text, specs, {});
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].predictions, b[i].predictions) << "row " << i;
    EXPECT_EQ(a[i].bits_per_byte, b[i].bits_per_byte) << "row " << i;
    EXPECT_EQ(a[i].extra_bits_per_byte, b[i].extra_bits_per_byte) << "row " << i;
    EXPECT_EQ(a[i].evicted, b[i].evicted) << "row " << i;
  }
  EXPECT_GT(a[1].evicted, 0U);
  ModelRunOptions past;
  past.window = 97;
  EXPECT_THROW(perplexity(*model, text, specs, past), ParameterError);
  past.window = 1;
  EXPECT_THROW(perplexity(*model, text, specs, past), ParameterError);
  // Where there are no windows, neither a window nor a deadline is taken silently.
  StreamRequest stream;
  stream.specs = {specs.front()};
  stream.tokens = 100;
  ModelRunOptions shorter;
  shorter.window = 48;
  EXPECT_THROW(stream_perplexity(*model, text, stream, shorter), ContractError);
  ModelRunOptions hurried;
  hurried.deadline = std::chrono::steady_clock::now();
  EXPECT_THROW(stream_perplexity(*model, text, stream, hurried), ContractError);
  TaskRequest tasks;
  tasks.tasks = {"passkey"};
  tasks.lengths = {80};
  tasks.policies = {"h2o"};
  tasks.budgets = {20};
  EXPECT_THROW(run_tasks(model, text, tasks, shorter), ContractError);
}

// A deadline stops tasks between rounds (sample i of every task x length x
// depth): the rows are those of the first rounds, to the bit the rows of
// that many samples; one round runs however late it is.
TEST(WeightKernelsDecoder, ADeadlineKeepsTheFirstRoundsOfSamples) {
  const testing::ScratchFolder dir("kvevict-kernels-test");
  const std::vector<std::uint8_t> filler = testing::heldout_prefix(4000);
  for (const auto& [label, model] : {std::pair<const char*, std::shared_ptr<const Model>>{
                                         "llama F16", random_model("llama", WeightType::kF16, 64, dir, 192)},
                                     {"kvevict-tiny", Model::load(fs::path(KVEVICT_SOURCE_DIR) / "model" /
                                                                  "kvevict-tiny.kvm", ModelOptions{.context = 192})}}) {
    TaskRequest request;
    request.tasks = {"passkey"};
    request.lengths = {150};
    request.depths = 2;
    request.samples = 3;
    request.policies = {"h2o", "sliding-window"};
    request.budgets = {40};
    request.overrides = {{"h2o.recentWindow", 4}};
    ModelRunOptions late;
    late.deadline = std::chrono::steady_clock::now();
    const std::vector<TaskRow> cut = run_tasks(model, filler, request, late);
    TaskRequest one = request;
    one.samples = 1;
    const std::vector<TaskRow> first = run_tasks(model, filler, one, {});
    ModelRunOptions far;
    far.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
    const std::vector<TaskRow> unhurried = run_tasks(model, filler, request, far);
    const std::vector<TaskRow> all = run_tasks(model, filler, request, {});
    ASSERT_EQ(cut.size(), first.size()) << label;
    ASSERT_EQ(unhurried.size(), all.size()) << label;
    std::uint64_t evicted = 0;
    for (std::size_t i = 0; i < cut.size(); ++i) {
      EXPECT_EQ(cut[i].samples, 1U) << label << " row " << i;
      EXPECT_EQ(cut[i].correct, first[i].correct) << label << " row " << i;
      EXPECT_EQ(cut[i].evicted, first[i].evicted) << label << " row " << i;
      EXPECT_EQ(unhurried[i].samples, 3U) << label << " row " << i;
      EXPECT_EQ(unhurried[i].correct, all[i].correct) << label << " row " << i;
      EXPECT_EQ(unhurried[i].evicted, all[i].evicted) << label << " row " << i;
      evicted += cut[i].evicted;
    }
    EXPECT_GT(evicted, 0U) << label;
  }
}

}  // namespace
}  // namespace kvevict
