// The Llama family through kvevict's decoder: tiny random models in GGUF and
// safetensors load with the shapes and settings they declare; a GGUF llama
// (NORMAL rope, Q/K rows permuted as llama.cpp's converter does) gives the
// logits of the same model as a safetensors folder (NEOX rope, rows as HF
// holds them); files that contradict themselves are refused by name; the
// model commands read text through the model's own tokenizer. (The logits
// against an independent PyTorch forward pass, every architecture and
// weight type: tests/model/reference_logits_test.py.)

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/arch/model_writer.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/format/safetensors.h"
#include "kvevict/model/vocab/vocab.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using testing::heldout_prefix;

RandomModelSpec small(std::string arch, std::string format, WeightType type) {
  RandomModelSpec s;
  s.architecture = std::move(arch);
  s.format = std::move(format);
  s.type = type;
  s.layers = 2;
  s.width = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ff = 96;
  s.context = 128;
  s.merges = 64;
  const std::vector<std::uint8_t> text = heldout_prefix(4000);
  s.tokenizer_text.assign(text.begin(), text.end());
  return s;
}

std::vector<float> logits_of(const std::shared_ptr<const Model>& model, const std::vector<Token>& tokens) {
  Decoder decoder(model);
  std::vector<float> out;
  for (const Token t : tokens) {
    const auto l = decoder.step(t);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

template <typename F>
void expect_input_error(F&& f, const std::vector<std::string>& phrases) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << phrases.front();
  } catch (const InputError& e) {
    const std::string what = e.what();
    for (const std::string& p : phrases) EXPECT_NE(what.find(p), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

TEST(LlamaModel, GgufDeclaresWhatItHolds) {
  const testing::ScratchFolder dir("kvevict-llama-test");
  RandomModelSpec spec = small("llama", "gguf", WeightType::kQ8_0);
  write_random_model(spec, dir / "m.gguf");
  const auto model = Model::load(dir / "m.gguf");
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.format, "gguf");
  EXPECT_EQ(c.layers, 2U);
  EXPECT_EQ(c.heads, 4U);
  EXPECT_EQ(c.kv_heads, 2U);
  EXPECT_EQ(c.head_dim(), 16U);
  EXPECT_EQ(c.ff, 96U);
  EXPECT_EQ(c.context, 128U);
  EXPECT_EQ(c.trained_context, 128U);
  EXPECT_EQ(c.vocab, 2U + 256U + 64U);  // <s>, </s>, the bytes, the merges
  EXPECT_EQ(c.rope_mode, RopeMode::kNormal);
  EXPECT_EQ(c.mlp, MlpKind::kSwiGlu);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.qkv_bias);
  // 2 layers x 7 matrices + embedding + output in Q8_0; 2 x 2 norms + the final one in F32.
  EXPECT_EQ(c.weight_types, "Q8_0 (16), F32 (5)");
  EXPECT_EQ(model->vocabulary().model_name(), "gpt2");
  EXPECT_NE(model->output().data, model->embed().data);
  EXPECT_EQ(model->output().type, WeightType::kQ8_0);  // kept as stored, for the weight kernels
  EXPECT_TRUE(model->uses_kernels());
}

TEST(LlamaModel, Qwen2TiesItsOutputAndHasBiases) {
  const testing::ScratchFolder dir("kvevict-llama-test");
  write_random_model(small("qwen2", "safetensors", WeightType::kBF16), dir / "q");
  const auto model = Model::load(dir / "q");
  EXPECT_EQ(model->config().architecture, "qwen2");
  EXPECT_EQ(model->config().rope_mode, RopeMode::kNeox);
  EXPECT_TRUE(model->config().qkv_bias);
  EXPECT_TRUE(model->config().tied_output);
  EXPECT_EQ(model->output().data, model->embed().data);
  EXPECT_EQ(model->embed().type, WeightType::kBF16);
  EXPECT_NE(model->layer(1).qkv_bias, nullptr);
}

// llama.cpp's converter permutes each head's Q and K rows so that rotating
// adjacent pairs (NORMAL) gives what HF's half split (NEOX) gives: new row
// 2j + h of a head is old row h * d/2 + j. The same weights written both
// ways must decode alike -- the two loaders and the two rope modes checked
// against each other.
TEST(LlamaModel, GgufNormalRopeEqualsSafetensorsNeox) {
  const testing::ScratchFolder dir("kvevict-llama-test");
  RandomModelSpec spec = small("llama", "safetensors", WeightType::kF32);
  spec.llama3_scaling = true;  // the divisors must agree too: config.json's rule vs rope_freqs
  write_random_model(spec, dir / "hf");
  const auto hf = Model::load(dir / "hf");
  const ModelConfig& c = hf->config();
  const std::uint32_t d = c.head_dim();

  const auto st = Safetensors::open(dir / "hf");
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_u32("llama.context_length", c.context);
  writer.set_u32("llama.embedding_length", c.width);
  writer.set_u32("llama.block_count", c.layers);
  writer.set_u32("llama.feed_forward_length", c.ff);
  writer.set_u32("llama.attention.head_count", c.heads);
  writer.set_u32("llama.attention.head_count_kv", c.kv_heads);
  writer.set_f32("llama.rope.freq_base", c.rope_base);
  writer.set_f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  load_vocabulary(dir / "hf")->write_gguf(writer);
  auto put = [&](const std::string& hf_name, const std::string& gguf_name, std::uint32_t permute_heads) {
    const SafetensorsTensor* t = st->tensor(hf_name);
    ASSERT_NE(t, nullptr) << hf_name;
    std::vector<float> v(t->elements);
    st->to_floats(*t, v.data());
    if (permute_heads > 0) {
      const std::size_t cols = t->shape[1];
      std::vector<float> p(v.size());
      for (std::uint32_t head = 0; head < permute_heads; ++head) {
        for (std::uint32_t j = 0; j < d / 2; ++j) {
          for (std::uint32_t h = 0; h < 2; ++h) {
            const std::size_t to = std::size_t{head} * d + 2 * j + h, from = std::size_t{head} * d + h * (d / 2) + j;
            std::memcpy(&p[to * cols], &v[from * cols], cols * sizeof(float));
          }
        }
      }
      v = p;
    }
    std::vector<std::uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    writer.add_tensor(gguf_name, std::vector<std::uint64_t>(t->shape.rbegin(), t->shape.rend()), WeightType::kF32,
                      std::move(bytes));
  };
  put("model.embed_tokens.weight", "token_embd.weight", 0);
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".", g = "blk." + std::to_string(l) + ".";
    put(h + "input_layernorm.weight", g + "attn_norm.weight", 0);
    put(h + "self_attn.q_proj.weight", g + "attn_q.weight", c.heads);
    put(h + "self_attn.k_proj.weight", g + "attn_k.weight", c.kv_heads);
    put(h + "self_attn.v_proj.weight", g + "attn_v.weight", 0);
    put(h + "self_attn.o_proj.weight", g + "attn_output.weight", 0);
    put(h + "post_attention_layernorm.weight", g + "ffn_norm.weight", 0);
    put(h + "mlp.gate_proj.weight", g + "ffn_gate.weight", 0);
    put(h + "mlp.up_proj.weight", g + "ffn_up.weight", 0);
    put(h + "mlp.down_proj.weight", g + "ffn_down.weight", 0);
  }
  put("model.norm.weight", "output_norm.weight", 0);
  put("lm_head.weight", "output.weight", 0);
  std::vector<std::uint8_t> freqs(c.rope_divisors.size() * 4);
  std::memcpy(freqs.data(), c.rope_divisors.data(), freqs.size());
  writer.add_tensor("rope_freqs.weight", {c.rope_divisors.size()}, WeightType::kF32, std::move(freqs));
  writer.write(dir / "m.gguf");
  const auto gguf = Model::load(dir / "m.gguf");
  ASSERT_EQ(gguf->config().rope_mode, RopeMode::kNormal);

  std::vector<Token> tokens;
  for (Token t = 0; t < 100; ++t) tokens.push_back((t * 37 + 5) % c.vocab);
  const std::vector<float> a = logits_of(hf, tokens), b = logits_of(gguf, tokens);
  ASSERT_EQ(a.size(), b.size());
  float worst = 0.0F, scale = 0.0F;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(a[i]));
  }
  // The same products summed in another order: float32 rounding only.
  EXPECT_LT(worst, 1e-4F * std::max(1.0F, scale)) << "largest logit " << scale;
  // Without the permutation the modes disagree once positions grow: the
  // check above could fail.
}

// kvevict's own model through the GGUF reader: the same float32 weights,
// the same arithmetic, so the same logits to the bit; quantized, close.
TEST(LlamaModel, TinyAsGgufDecodesToTheBit) {
  const testing::ScratchFolder dir("kvevict-llama-test");
  const auto kvm = testing::committed_model();
  write_gguf_of(*kvm, dir / "tiny.gguf");
  const auto gguf = Model::load(dir / "tiny.gguf");
  EXPECT_EQ(gguf->config().architecture, "kvevict-tiny");
  EXPECT_EQ(gguf->config().format, "gguf");
  EXPECT_EQ(gguf->config().mlp, MlpKind::kGelu);
  EXPECT_EQ(gguf->config().context, kvm->config().context);
  EXPECT_EQ(gguf->vocabulary().kind(), Vocabulary::Kind::kBytes);
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  const std::vector<Token> tokens(text.begin(), text.end());
  const std::vector<float> a = logits_of(kvm, tokens), b = logits_of(gguf, tokens);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
  write_gguf_of(*kvm, dir / "tiny-q8.gguf", WeightType::kQ8_0);
  const auto q8 = Model::load(dir / "tiny-q8.gguf");
  EXPECT_EQ(q8->config().weight_types, "Q8_0 (17), F32 (9)");
  const std::vector<float> c = logits_of(q8, tokens);
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - c[i])));
  EXPECT_GT(worst, 0.0);  // 8-bit weights are not the float32 ones
  EXPECT_LT(worst, 0.5);  // but close: logits of the trained model span about 30
  EXPECT_THROW(write_gguf_of(*kvm, dir / "tiny.gguf"), InputError);  // exists
  EXPECT_THROW(write_gguf_of(*gguf, dir / "x.gguf", WeightType::kQ4_K), ParameterError);  // width 128 < 256
}

TEST(LlamaModel, TokensOutsideTheVocabularyAreRefused) {
  const testing::ScratchFolder dir("kvevict-llama-test");
  write_random_model(small("mistral", "gguf", WeightType::kF16), dir / "m.gguf");
  const auto model = Model::load(dir / "m.gguf");
  Decoder decoder(model);
  try {
    decoder.step(model->config().vocab);
    ADD_FAILURE() << "a token past the vocabulary was fed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_EQ(decoder.position(), 0U);  // nothing changed: the decoder goes on
  EXPECT_NO_THROW(decoder.step(1));
}

TEST(LlamaModel, ContextRunsShorterNeverLonger) {
  const testing::ScratchFolder dir("kvevict-llama-test");
  write_random_model(small("llama", "gguf", WeightType::kF32), dir / "m.gguf");
  const auto model = Model::load(dir / "m.gguf", ModelOptions{.context = 64});
  EXPECT_EQ(model->config().context, 64U);
  EXPECT_EQ(model->config().trained_context, 128U);
  expect_input_error([&] { Model::load(dir / "m.gguf", ModelOptions{.context = 129}); },
                     {(dir / "m.gguf").string(), "over the 128 positions the model was trained on"});
}

TEST(LlamaModel, PerplexityReadsTheModelsTokens) {
  const testing::ScratchFolder dir("kvevict-llama-test");
  write_random_model(small("llama", "gguf", WeightType::kQ4_0), dir / "m.gguf");
  const auto model = Model::load(dir / "m.gguf");
  const std::vector<std::uint8_t> text = heldout_prefix(1500);
  const TokenizedText t = tokenize_text(*model, text);
  ASSERT_TRUE(t.bos.has_value());  // the trained tokenizer adds <s>
  std::uint64_t bytes = 0;
  for (const std::uint32_t b : t.bytes) bytes += b;
  EXPECT_EQ(bytes, text.size());  // byte-level BPE: every byte in exactly one token
  EXPECT_LT(t.tokens.size(), text.size());  // merges make fewer tokens than bytes
  const auto rows = perplexity(*model, text, {RunSpec{"sliding-window", {}, 32}});
  ASSERT_EQ(rows.size(), 2U);
  // Windows of BOS + 127 tokens, every text token predicted once.
  EXPECT_EQ(rows[0].predictions, t.tokens.size());
  EXPECT_EQ(rows[0].predicted_bytes, text.size());
  EXPECT_EQ(rows[0].tokenizer, model->vocabulary().describe());
  EXPECT_NEAR(rows[0].bits_per_byte,
              std::log(rows[0].perplexity) * static_cast<double>(rows[0].predictions) /
                  static_cast<double>(rows[0].predicted_bytes) / std::log(2.0),
              1e-9);
  EXPECT_GT(rows[1].evicted, 0U);
  // The whole model's KV bytes a position: 2 layers x 2 KV heads x (16 + 16) floats.
  EXPECT_EQ(rows[0].model_bytes_per_position, 2.0 * 2.0 * 32.0 * 4.0);
}

// ---- files that contradict themselves ------------------------------------------

class LlamaBadFiles : public ::testing::Test {
 protected:
  // A GGUF like the random llama's, with `change` applied to its parts.
  fs::path gguf(const std::function<void(GgufWriter&, std::vector<std::pair<std::string, std::vector<std::uint64_t>>>&)>& change,
                const std::string& arch = "llama") {
    const RandomModelSpec spec = small("llama", "safetensors", WeightType::kF32);
    write_random_model(spec, dir / "hf", true);
    const auto st = Safetensors::open(dir / "hf");
    GgufWriter w;
    w.set_string("general.architecture", arch);
    w.set_u32(arch + ".context_length", 128);
    w.set_u32(arch + ".embedding_length", 64);
    w.set_u32(arch + ".block_count", 2);
    w.set_u32(arch + ".feed_forward_length", 96);
    w.set_u32(arch + ".attention.head_count", 4);
    w.set_u32(arch + ".attention.head_count_kv", 2);
    load_vocabulary(dir / "hf")->write_gguf(w);
    std::vector<std::pair<std::string, std::vector<std::uint64_t>>> tensors;
    const std::pair<const char*, const char*> names[] = {
        {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"},   {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
        {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},         {"mlp.down_proj", "ffn_down"}};
    tensors.push_back({"token_embd.weight", {}});
    for (int l = 0; l < 2; ++l) {
      for (const auto& [h, g] : names) tensors.push_back({"blk." + std::to_string(l) + "." + g + ".weight", {}});
    }
    tensors.push_back({"output_norm.weight", {}});
    tensors.push_back({"output.weight", {}});
    auto hf_name = [&](const std::string& g) -> std::string {
      if (g == "token_embd.weight") return "model.embed_tokens.weight";
      if (g == "output_norm.weight") return "model.norm.weight";
      if (g == "output.weight") return "lm_head.weight";
      const std::string layer = g.substr(4, g.find('.', 4) - 4);
      const std::string part = g.substr(g.find('.', 4) + 1);
      for (const auto& [h, n] : names) {
        if (part == std::string(n) + ".weight") return "model.layers." + layer + "." + h + ".weight";
      }
      return g;
    };
    for (auto& [name, ne] : tensors) {
      const SafetensorsTensor* t = st->tensor(hf_name(name));
      ne.assign(t->shape.rbegin(), t->shape.rend());
    }
    change(w, tensors);
    for (const auto& [name, ne] : tensors) {
      std::uint64_t n = 1;
      for (const auto x : ne) n *= x;
      // Not all equal: a model of equal weights gives equal logits whatever
      // a bias adds (every element the same, then normalised away).
      const auto given = values.find(name);
      const float scale = given == values.end() ? 0.01F : given->second;
      std::vector<float> v(n);
      for (std::uint64_t i = 0; i < n; ++i) {
        v[i] = scale * static_cast<float>(1.0 + 0.5 * std::sin(0.37 * static_cast<double>(i) + static_cast<double>(name.size())));
      }
      std::vector<std::uint8_t> bytes(n * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
      w.add_tensor(name, ne, WeightType::kF32, std::move(bytes));
    }
    w.write(dir / "bad.gguf", true);
    return dir / "bad.gguf";
  }
  // The scale of a tensor's values, by name (0.01 for the others).
  std::map<std::string, float> values;
  const testing::ScratchFolder dir{"kvevict-llama-test"};
};

using GgufTensors = std::vector<std::pair<std::string, std::vector<std::uint64_t>>>;

// Adds llama.cpp's optional llama biases to every layer: q, k, v (width 64
// and 32, 32: 4 heads and 2 KV heads of 16), the output, gate, up, down.
void add_biases(GgufTensors& t) {
  for (int l = 0; l < 2; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    t.push_back({g + "attn_q.bias", {64}});
    t.push_back({g + "attn_k.bias", {32}});
    t.push_back({g + "attn_v.bias", {32}});
    t.push_back({g + "attn_output.bias", {64}});
    t.push_back({g + "ffn_gate.bias", {96}});
    t.push_back({g + "ffn_up.bias", {96}});
    t.push_back({g + "ffn_down.bias", {64}});
  }
}

// ---- every tensor read, every setting applied or refused (hardening 5) --------

// A llama file's biases are read, as llama.cpp reads them: biases of zero
// give the logits of the file without them to the bit, biases of 5 other ones
// (they were dropped: the same perplexity either way). Their arithmetic
// against an independent forward pass: reference_logits_test.py's --biases case.
TEST_F(LlamaBadFiles, ALlamaFilesBiasesAreRead) {
  const std::vector<Token> tokens = {1, 40, 41, 42, 300, 7};
  const auto plain = Model::load(gguf([](GgufWriter&, auto&) {}));
  const std::vector<float> without = logits_of(plain, tokens);
  for (const float b : {0.0F, 5.0F}) {
    values.clear();
    for (int l = 0; l < 2; ++l) {
      for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
        values["blk." + std::to_string(l) + "." + n + ".bias"] = b;
      }
    }
    const auto biased = Model::load(gguf([](GgufWriter&, auto& t) { add_biases(t); }));
    EXPECT_EQ(biased->parameter_count(), plain->parameter_count() + 2 * (64 + 32 + 32 + 64 + 96 + 96 + 64));
    const std::vector<float> with = logits_of(biased, tokens);
    if (b == 0.0F) {
      EXPECT_EQ(with, without);
    } else {
      EXPECT_NE(with, without);
    }
  }
}

TEST_F(LlamaBadFiles, QkvBiasesComeAsThree) {
  const fs::path f = gguf([](GgufWriter&, auto& t) { t.push_back({"blk.0.attn_q.bias", {64}}); });
  expect_input_error([&] { Model::load(f); }, {f.string(), "tensor 'blk.0.attn_k.bias' is missing"});
}

TEST_F(LlamaBadFiles, ATensorTheArchitectureDoesNotNameIsRefused) {
  const fs::path f = gguf([](GgufWriter&, auto& t) { t.push_back({"blk.0.attn_q_norm.weight", {16}}); });
  expect_input_error([&] { Model::load(f); },
                     {f.string(), "tensor 'blk.0.attn_q_norm.weight' is not part of a llama model with these settings"});
}

TEST_F(LlamaBadFiles, ABlockCountBelowTheLayersHeldIsRefused) {
  const fs::path f = gguf([](GgufWriter& w, auto&) { w.set_u32("llama.block_count", 1); });
  expect_input_error([&] { Model::load(f); }, {f.string(), "tensors 'blk.1.attn_norm.weight', 'blk.1.attn_q.weight', "
                                                           "'blk.1.attn_k.weight' and 6 more are not part of a llama "
                                                           "model with these settings (1 layers)"});
}

// Many tensors no llama names (the 100,000 of a hostile 4 MB file) are
// refused by name, with every lookup by index: linear in the file.
TEST_F(LlamaBadFiles, ManyUnnamedTensorsAreRefusedByName) {
  const fs::path f = gguf([](GgufWriter&, auto& t) {
    for (int i = 0; i < 100000; ++i) t.push_back({"x." + std::to_string(i), {1}});
  });
  expect_input_error([&] { Model::load(f); }, {f.string(), "tensors 'x.0', 'x.1', 'x.2' and 99997 more are not part"});
}

TEST_F(LlamaBadFiles, InfiniteRopeScalingIsRefused) {
  for (const float factor : {INFINITY, NAN}) {
    const fs::path f = gguf([&](GgufWriter& w, auto&) {
      w.set_string("llama.rope.scaling.type", "linear");
      w.set_f32("llama.rope.scaling.factor", factor);
    });
    expect_input_error([&] { Model::load(f); }, {f.string(), "llama.rope.scaling.factor is", "not finite"});
  }
}

TEST_F(LlamaBadFiles, SettingsTheDecoderDoesNotApplyAreRefused) {
  const fs::path f = gguf([](GgufWriter& w, auto&) { w.set_f32("llama.attn_logit_softcapping", 30.0F); });
  expect_input_error([&] { Model::load(f); }, {f.string(), "llama.attn_logit_softcapping is 30, which kvevict does not apply"});
  const fs::path g = gguf([](GgufWriter& w, auto&) { w.set_u32("llama.expert_count", 8); });
  expect_input_error([&] { Model::load(g); }, {g.string(), "mixture of experts"});
}

// config.json: every key that changes the arithmetic is applied or refused.
TEST_F(LlamaBadFiles, ConfigKeysThatChangeTheArithmetic) {
  write_random_model(small("llama", "safetensors", WeightType::kF32), dir / "m");
  nlohmann::json original;
  {
    std::ifstream in(dir / "m" / "config.json");
    original = nlohmann::json::parse(in);
  }
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json config = original;
    change(config);
    std::ofstream out(dir / "m" / "config.json");
    out << config.dump();
  };
  with([](nlohmann::json& c) { c["hidden_act"] = "gelu"; });
  expect_input_error([&] { Model::load(dir / "m"); }, {"\"hidden_act\" is \"gelu\""});
  with([](nlohmann::json& c) { c["partial_rotary_factor"] = 0.5; });
  expect_input_error([&] { Model::load(dir / "m"); }, {"\"partial_rotary_factor\" is 0.5"});
  with([](nlohmann::json& c) { c["attention_bias"] = true; });
  expect_input_error([&] { Model::load(dir / "m"); }, {"tensor 'model.layers.0.self_attn.q_proj.bias' is missing"});
  with([](nlohmann::json& c) { c["mlp_bias"] = true; });
  expect_input_error([&] { Model::load(dir / "m"); }, {"tensor 'model.layers.0.mlp.gate_proj.bias' is missing"});
  with([](nlohmann::json& c) { c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1e300}}; });
  expect_input_error([&] { Model::load(dir / "m"); }, {"rope_scaling's factor is 1e+300, which is not finite as a float"});
  with([](nlohmann::json& c) { c["attention_bias"] = false; c["mlp_bias"] = false; c["hidden_act"] = "silu"; });
  EXPECT_NO_THROW(Model::load(dir / "m"));
}

// A folder written with every bias: config.json says so, and the biases
// change the logits; the same file without attention_bias refuses the
// biases it would drop.
TEST_F(LlamaBadFiles, SafetensorsBiasesAreReadOrRefused) {
  RandomModelSpec spec = small("llama", "safetensors", WeightType::kF32);
  spec.biases = true;
  write_random_model(spec, dir / "b");
  const auto model = Model::load(dir / "b");
  EXPECT_NE(model->layer(0).proj_bias, nullptr);
  EXPECT_NE(model->layer(1).down_bias, nullptr);
  nlohmann::json config;
  {
    std::ifstream in(dir / "b" / "config.json");
    config = nlohmann::json::parse(in);
  }
  config.erase("attention_bias");
  {
    std::ofstream out(dir / "b" / "config.json");
    out << config.dump();
  }
  expect_input_error([&] { Model::load(dir / "b"); }, {"'model.layers.0.self_attn.q_proj.bias'", "not part of a llama model"});
}

// Llama-3's tokenizer_config.json names bos_token and leaves add_bos_token
// out: the post-processor's template adds BOS, as Hugging Face does (it was
// dropped, and the GGUF of the same model added it). add_bos_token, where
// given, overrides the template; without either, no BOS.
TEST_F(LlamaBadFiles, ATokenizerJsonsTemplateAddsBos) {
  write_random_model(small("llama", "safetensors", WeightType::kF32), dir / "t");
  auto write_config = [&](const nlohmann::json& config) {
    std::ofstream out(dir / "t" / "tokenizer_config.json");
    out << config.dump();
  };
  write_config({{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  const auto llama3 = load_vocabulary(dir / "t");
  ASSERT_TRUE(llama3->bos().has_value());
  EXPECT_TRUE(llama3->adds_bos());
  EXPECT_EQ(llama3->encode("the", true).front(), *llama3->bos());
  write_config({{"bos_token", "<s>"}, {"add_bos_token", false}});
  EXPECT_FALSE(load_vocabulary(dir / "t")->adds_bos());
  nlohmann::json tokenizer;
  {
    std::ifstream in(dir / "t" / "tokenizer.json");
    tokenizer = nlohmann::json::parse(in);
  }
  ASSERT_EQ(tokenizer["post_processor"]["type"], "TemplateProcessing");
  tokenizer["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  {
    std::ofstream out(dir / "t" / "tokenizer.json");
    out << tokenizer.dump();
  }
  write_config({{"bos_token", "<s>"}});
  EXPECT_FALSE(load_vocabulary(dir / "t")->adds_bos());
}

TEST_F(LlamaBadFiles, AMissingTensorIsNamed) {
  const fs::path f = gguf([](GgufWriter&, auto& t) {
    std::erase_if(t, [](const auto& e) { return e.first == "blk.1.ffn_up.weight"; });
  });
  expect_input_error([&] { Model::load(f); }, {f.string(), "tensor 'blk.1.ffn_up.weight' is missing"});
}

TEST_F(LlamaBadFiles, ATensorOfAnotherShapeIsNamed) {
  const fs::path f = gguf([](GgufWriter&, auto& t) {
    for (auto& [name, ne] : t) {
      if (name == "blk.0.attn_k.weight") ne = {64, 64};  // 4 heads' worth where the config says 2 KV heads
    }
  });
  expect_input_error([&] { Model::load(f); },
                     {f.string(), "tensor 'blk.0.attn_k.weight' has shape [64, 64]; the model's settings make it [32, 64]"});
}

TEST_F(LlamaBadFiles, AnUnknownArchitectureListsTheSupportedOnes) {
  const fs::path f = gguf([](GgufWriter&, auto&) {}, "gpt2");
  expect_input_error([&] { Model::load(f); }, {f.string(), "architecture 'gpt2' is not supported", "llama, qwen2, mistral"});
}

TEST_F(LlamaBadFiles, KvHeadsThatDoNotDivideTheHeads) {
  const fs::path f = gguf([](GgufWriter& w, auto&) { w.set_u32("llama.attention.head_count_kv", 3); });
  expect_input_error([&] { Model::load(f); }, {f.string(), "3 KV heads do not divide 4 attention heads"});
}

TEST_F(LlamaBadFiles, ASizeFarPastAnyModelIsRefusedBeforeAllocating) {
  const fs::path f = gguf([](GgufWriter& w, auto&) { w.set_u32("llama.feed_forward_length", 4000000000U); });
  expect_input_error([&] { Model::load(f); }, {f.string(), "llama.feed_forward_length is 4000000000"});
}

TEST_F(LlamaBadFiles, SafetensorsConfigContradictingTheWeights) {
  write_random_model(small("qwen2", "safetensors", WeightType::kF16), dir / "q");
  nlohmann::json config;
  {
    std::ifstream in(dir / "q" / "config.json");
    config = nlohmann::json::parse(in);
  }
  config["intermediate_size"] = 128;
  {
    std::ofstream out(dir / "q" / "config.json");
    out << config.dump();
  }
  expect_input_error([&] { Model::load(dir / "q"); },
                     {"tensor 'model.layers.0.mlp.gate_proj.weight' has shape [96, 64]; the model's settings make it [128, 64]"});
  fs::remove(dir / "q" / "tokenizer.json");
  config["intermediate_size"] = 96;
  {
    std::ofstream out(dir / "q" / "config.json");
    out << config.dump();
  }
  expect_input_error([&] { Model::load(dir / "q"); }, {"has no tokenizer.json"});
  fs::remove(dir / "q" / "config.json");
  expect_input_error([&] { Model::load(dir / "q"); }, {"no config.json"});
}

TEST_F(LlamaBadFiles, AFileThatIsNoModel) {
  {
    std::ofstream out(dir / "notes.txt");
    out << "hello";
  }
  expect_input_error([&] { Model::load(dir / "notes.txt"); }, {"not a kvevict model", "GGUF", "safetensors"});
}

}  // namespace
}  // namespace kvevict
