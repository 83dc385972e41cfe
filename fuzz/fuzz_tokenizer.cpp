// libFuzzer target: arbitrary bytes as text for the tokenizers. Fixed
// vocabularies, built once: byte-level BPE learned from a fixed text under
// each pre-tokenizer family, and a tiny SentencePiece-style one (with byte
// fallback) read back from GGUF. Every token must be in range; byte-level
// vocabularies must decode to exactly the input bytes, and the
// SentencePiece one must too whenever the text has no U+2581 of its own (its
// spaces are spelled that way) and does not start with one.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/model/format/gguf.h"
#include "kvevict/model/vocab/vocab.h"

namespace {

using kvevict::Vocabulary;

const char* const kTrainingText =
    "The quick brown fox jumps over the lazy dog. It's 2024; 12345 foxes said 'HELLO'!\n\n"
    "Ünïcödé wörds, 中文字符, emoji 😀\tand   spaces   end.\r\n";

std::shared_ptr<const Vocabulary> tiny_sentence_piece() {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<float> scores{0, 0, 0};
  std::vector<std::int32_t> types{2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char text[8];
    std::snprintf(text, sizeof text, "<0x%02X>", b);
    tokens.emplace_back(text);
    scores.push_back(0);
    types.push_back(6);
  }
  const char* const pieces[] = {"\xE2\x96\x81", "a", "b", "c", "e", "t", "h", "ab", "bc", "th", "he", "the",
                                "\xE2\x96\x81" "t", "\xE2\x96\x81" "the", "\xE2\x96\x81" "a"};
  float score = 0;
  for (const char* p : pieces) {
    tokens.emplace_back(p);
    scores.push_back(score);
    score += 0.5F;
    types.push_back(1);
  }
  kvevict::GgufWriter writer;
  writer.set_string("tokenizer.ggml.model", "llama");
  writer.set_strings("tokenizer.ggml.tokens", tokens);
  writer.set_f32s("tokenizer.ggml.scores", scores);
  writer.set_i32s("tokenizer.ggml.token_type", types);
  const std::vector<std::uint8_t> bytes = writer.bytes();
  return Vocabulary::from_gguf(*kvevict::GgufFile::parse(bytes, "fuzz-spm.gguf"));
}

const std::vector<std::shared_ptr<const Vocabulary>>& byte_level() {
  static const std::vector<std::shared_ptr<const Vocabulary>> vocabularies = [] {
    std::vector<std::shared_ptr<const Vocabulary>> out;
    for (const char* pre : {"llama-bpe", "qwen2", "gpt2", "smollm", "default"}) {
      out.push_back(Vocabulary::train_byte_pairs(kTrainingText, 150, pre));
    }
    return out;
  }();
  return vocabularies;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const auto& vocab : byte_level()) {
    const std::vector<kvevict::Token> tokens = vocab->encode(text);
    for (const kvevict::Token t : tokens) check(t < vocab->size(), "a byte-level token out of range");
    check(vocab->decode(tokens) == text, "byte-level decode(encode(x)) != x");
  }
  static const std::shared_ptr<const Vocabulary> spm = tiny_sentence_piece();
  const std::vector<kvevict::Token> tokens = spm->encode(text);
  for (const kvevict::Token t : tokens) check(t < spm->size(), "a SentencePiece token out of range");
  if (text.find("\xE2\x96\x81") == std::string::npos) {
    check(spm->decode(tokens) == text, "SentencePiece decode(encode(x)) != x");
  }
  return 0;
}
