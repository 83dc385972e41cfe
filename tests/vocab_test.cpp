// The vocabulary and tokenizers: pre-tokenizer splits worked out by hand from
// the published expressions, GPT-2's byte map, byte-level BPE and
// SentencePiece-style merging on tiny hand-made vocabularies, round trips
// through GGUF and tokenizer.json, and the one-line errors for bad files.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../src/model/vocab/pretokenize.h"
#include "../src/model/vocab/vocab_internal.h"
#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "kvevict/model/vocab/vocab.h"
#include "support.h"

namespace kvevict {
namespace {

using vocab_detail::PreKind;
using vocab_detail::PreTokenizer;
using vocab_detail::TokenType;
using vocab_detail::VocabularyParts;
using Pieces = std::vector<std::string>;

Pieces split(PreKind kind, std::string_view text) {
  Pieces out;
  for (const std::string_view p : PreTokenizer(kind).split(text)) out.emplace_back(p);
  return out;
}

const std::string kSpace = "\xE2\x96\x81";  // U+2581

std::string fmt_byte(int b) {
  std::array<char, 8> text{};
  std::snprintf(text.data(), text.size(), "<0x%02X>", b);
  return text.data();
}

// ---- pre-tokenizers: expected pieces worked out by hand --------------------

TEST(VocabPreTokenizer, Gpt2) {
  // "Hello" \p{L}+; " world" ` ?\p{L}+`; "'s" a contraction; " 123" ` ?\p{N}+`;
  // the two spaces before "foo": `\s+(?!\S)` backs off to the first space
  // (the second is followed by "f"), which then goes with "foo"; "\n" at
  // the end is `\s+(?!\S)`.
  EXPECT_EQ(split(PreKind::kGpt2, "Hello world's 123  foo\n"),
            (Pieces{"Hello", " world", "'s", " 123", " ", " foo", "\n"}));
  // Contractions are lower case only in GPT-2's: "'" is punctuation, "S" a letter.
  EXPECT_EQ(split(PreKind::kGpt2, "IT'S"), (Pieces{"IT", "'", "S"}));
  // A tab before a letter matches nothing (` ?` takes only a space): kept
  // as a piece of its own.
  EXPECT_EQ(split(PreKind::kGpt2, "a\tb"), (Pieces{"a", "\t", "b"}));
}

TEST(VocabPreTokenizer, Llama3) {
  // "I" letters; "'ve" contraction; the space before "12345" is followed by
  // a digit, so only the last `\s+` takes it; digits in threes; " apples"
  // `[^\r\n\p{L}\p{N}]?\p{L}+`; "!!" takes the newlines after it
  // (` ?[^\s\p{L}\p{N}]+[\r\n]*`); the trailing spaces `\s+(?!\S)`.
  EXPECT_EQ(split(PreKind::kLlama3, "I've 12345 apples!!\n\nOK  "),
            (Pieces{"I", "'ve", " ", "123", "45", " apples", "!!\n\n", "OK", "  "}));
  // The contractions are case-insensitive: "'S" is one piece.
  EXPECT_EQ(split(PreKind::kLlama3, "IT'S"), (Pieces{"IT", "'S"}));
  // `\s*[\r\n]+` takes the spaces before the newlines and stops at the last
  // newline; of the two spaces after, `\s+(?!\S)` takes one, and the other
  // goes with "y".
  EXPECT_EQ(split(PreKind::kLlama3, "x  \n\n  y"), (Pieces{"x", "  \n\n", " ", " y"}));
  // A punctuation run takes the newlines after it.
  EXPECT_EQ(split(PreKind::kLlama3, "end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
  // One non-letter (not a newline) may lead a word: "(hi" then ")".
  EXPECT_EQ(split(PreKind::kLlama3, "(hi)"), (Pieces{"(hi", ")"}));
}

TEST(VocabPreTokenizer, Qwen2SingleDigits) {
  // As Llama-3, but `\p{N}` takes one digit at a time.
  EXPECT_EQ(split(PreKind::kQwen2, "abc 2024"), (Pieces{"abc", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(split(PreKind::kQwen2, "x12"), (Pieces{"x", "1", "2"}));
}

TEST(VocabPreTokenizer, SmollmAndDefault) {
  // SmolLM: every digit alone first, then GPT-2's expression on each piece.
  EXPECT_EQ(split(PreKind::kSmollm, "a12 b"), (Pieces{"a", "1", "2", " b"}));
  // llama.cpp's default: punctuation runs, GPT-2, digit runs, then threes.
  EXPECT_EQ(split(PreKind::kDefault, "a+=b"), (Pieces{"a", "+=", "b"}));
  EXPECT_EQ(split(PreKind::kDefault, "12345"), (Pieces{"123", "45"}));
}

TEST(VocabPreTokenizer, InvalidUtf8IsItsOwnPiece) {
  // Invalid bytes match nothing (PCRE2_MATCH_INVALID_UTF): a run of them is a
  // piece between the matches around it.
  EXPECT_EQ(split(PreKind::kLlama3, "ab\xFF\xFE" "cd"), (Pieces{"ab", "\xFF\xFE", "cd"}));
  EXPECT_EQ(split(PreKind::kGpt2, "\xC3 x"), (Pieces{"\xC3", " x"}));
}

TEST(VocabPreTokenizer, NamesAndExpressions) {
  for (const char* name : {"gpt-2", "gpt2", "llama3", "llama-v3", "llama-bpe", "qwen2", "smollm", "default"}) {
    EXPECT_TRUE(PreTokenizer::kind_of(name).has_value()) << name;
  }
  EXPECT_FALSE(PreTokenizer::kind_of("falcon").has_value());
  const std::vector<std::string> hf_gpt2{PreTokenizer::expressions(PreKind::kGpt2).front() + R"(|\s+)"};
  EXPECT_EQ(PreTokenizer::kind_of_expressions(hf_gpt2), PreKind::kGpt2);
  EXPECT_EQ(PreTokenizer::kind_of_expressions(PreTokenizer::expressions(PreKind::kQwen2)), PreKind::kQwen2);
}

// ---- GPT-2's byte map -------------------------------------------------------

TEST(VocabByteLevel, BytesToUnicode) {
  const auto& map = vocab_detail::byte_code_points();
  EXPECT_EQ(map[' '], U'\u0120');   // Ġ
  EXPECT_EQ(map['\n'], U'\u010A');  // Ċ
  EXPECT_EQ(map['A'], U'A');
  EXPECT_EQ(map[0], 256U);           // the first of the 68 moved bytes
  EXPECT_EQ(map[0xAD], 323U);        // soft hyphen, the last of them
  EXPECT_EQ(vocab_detail::byte_level_spelling(" hi\n"), "\xC4\xA0hi\xC4\x8A");
  EXPECT_EQ(vocab_detail::byte_level_bytes("\xC4\xA0hi\xC4\x8A"), " hi\n");
}

// ---- byte-level BPE on a hand-made vocabulary ---------------------------------

// The 256 byte tokens (id = byte), then `extra`.
VocabularyParts byte_parts(std::vector<std::string> extra, std::vector<std::pair<std::string, std::string>> merges,
                           std::string pre = "gpt2") {
  VocabularyParts parts;
  parts.source = "hand.gguf";
  parts.model = "gpt2";
  parts.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) parts.tokens.push_back(vocab_detail::byte_level_spelling(std::string(1, static_cast<char>(b))));
  for (std::string& e : extra) parts.tokens.push_back(std::move(e));
  parts.merges = std::move(merges);
  return parts;
}

TEST(VocabBytePairs, LowestRankMergesFirst) {
  // "b c" ranks before "a b": [a, bc], and "a bc" is no merge.
  const auto bc_first = vocab_detail::build_vocabulary(byte_parts({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(bc_first->encode("abc", false), (std::vector<Token>{'a', 257}));
  // The other order: [ab, c].
  const auto ab_first = vocab_detail::build_vocabulary(byte_parts({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(ab_first->encode("abc", false), (std::vector<Token>{256, 'c'}));
  // Equal pairs merge left to right: "aaa" is [aa, a].
  const auto aa = vocab_detail::build_vocabulary(byte_parts({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(aa->encode("aaa", false), (std::vector<Token>{256, 'a'}));
  EXPECT_EQ(aa->encode("aaaa", false), (std::vector<Token>{256, 256}));
  // Pieces never merge across: " aa" is [Ġ, aa] under GPT-2's expression.
  EXPECT_EQ(aa->decode(aa->encode("x aa", false)), "x aa");
  EXPECT_FALSE(aa->adds_bos());
  EXPECT_EQ(aa->describe(), "gpt2 BPE (pre-tokenizer gpt2), 257 tokens");
}

TEST(VocabBytePairs, IgnoreMerges) {
  // "abc" is a token no merge reaches; the Llama-3 family emits it whole.
  auto parts = byte_parts({"ab", "abc"}, {{"a", "b"}}, "llama-bpe");
  const auto llama3 = vocab_detail::build_vocabulary(parts);
  EXPECT_EQ(llama3->encode("abc", false), (std::vector<Token>{257}));
  parts.ignore_merges = false;
  const auto merging = vocab_detail::build_vocabulary(parts);
  EXPECT_EQ(merging->encode("abc", false), (std::vector<Token>{256, 'c'}));
  const auto gpt2 = vocab_detail::build_vocabulary(byte_parts({"ab", "abc"}, {{"a", "b"}}, "gpt2"));
  EXPECT_EQ(gpt2->encode("abc", false), (std::vector<Token>{256, 'c'}));
}

// ---- SentencePiece-style on a hand-made vocabulary ----------------------------

VocabularyParts spm_parts(bool with_space_a) {
  VocabularyParts parts;
  parts.source = "hand-spm.gguf";
  parts.model = "llama";
  const auto add = [&](std::string text, float score, TokenType type) {
    parts.tokens.push_back(std::move(text));
    parts.scores.push_back(score);
    parts.token_types.push_back(static_cast<std::int32_t>(type));
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) add(fmt_byte(b), 0, TokenType::kByte);
  add(kSpace, 0, TokenType::kNormal);         // 259
  add("a", 0, TokenType::kNormal);            // 260
  add("b", 0, TokenType::kNormal);            // 261
  add("c", 0, TokenType::kNormal);            // 262
  add("ab", 1, TokenType::kNormal);           // 263
  add("bc", 5, TokenType::kNormal);           // 264
  add("aa", 2, TokenType::kNormal);           // 265
  if (with_space_a) add(kSpace + "a", 0.5F, TokenType::kNormal);  // 266
  return parts;
}

TEST(VocabSentencePiece, HighestScoreWinsOverLeftmost) {
  const auto vocab = vocab_detail::build_vocabulary(spm_parts(false));
  // "▁abc": ab (1) is left of bc (5), but bc merges first: [▁, a, bc].
  EXPECT_EQ(vocab->encode("abc", false), (std::vector<Token>{259, 260, 264}));
  // Equal scores: the leftmost pair. "▁aaa": [▁, aa, a].
  EXPECT_EQ(vocab->encode("aaa", false), (std::vector<Token>{259, 265, 260}));
  // BOS by default, and the dummy prefix gone again in decode.
  EXPECT_EQ(vocab->encode("ab", true), (std::vector<Token>{1, 259, 263}));
  EXPECT_EQ(vocab->decode(vocab->encode("ab c", true)), "ab c");
  EXPECT_EQ(vocab->encode("", true), (std::vector<Token>{1}));
  const auto with = vocab_detail::build_vocabulary(spm_parts(true));
  EXPECT_EQ(with->encode("abc", false), (std::vector<Token>{266, 264}));
  EXPECT_EQ(with->describe(), "llama SentencePiece BPE, 267 tokens");
}

TEST(VocabSentencePiece, ByteFallback) {
  const auto vocab = vocab_detail::build_vocabulary(spm_parts(false));
  // "é" (C3 A9) is no piece: its bytes' tokens <0xC3> <0xA9>.
  EXPECT_EQ(vocab->encode("\xC3\xA9", false), (std::vector<Token>{259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(vocab->decode(vocab->encode("\xC3\xA9 a\n", true)), "\xC3\xA9 a\n");
  EXPECT_EQ(vocab->piece_bytes(3 + 0x0A), "\n");
  EXPECT_EQ(vocab->piece_bytes(1), "");
  EXPECT_EQ(vocab->piece_bytes(259), " ");
  EXPECT_THROW((void)vocab->piece_bytes(9999), InputError);
  // Text never becomes a control token by spelling it out.
  for (const Token t : vocab->encode("<s></s>", false)) EXPECT_NE(vocab_detail::TokenType::kControl, static_cast<const vocab_detail::TableVocabulary&>(*vocab).type(t));
}

// The bytes each token stands for add up to the text's: the dummy prefix's
// U+2581 is no byte of it ("hello world" was 12 bytes of 11).
TEST(VocabSentencePiece, TextBytesLeaveOutTheDummyPrefix) {
  const auto vocab = vocab_detail::build_vocabulary(spm_parts(true));
  for (const std::string text : {"abc", "ab c", " abc", "\xC3\xA9 a\n", "aaa bc ab"}) {
    for (const bool bos : {false, true}) {
      const std::vector<Token> tokens = vocab->encode(text, bos);
      std::uint64_t sum = 0;
      for (const std::uint32_t b : text_bytes_of(*vocab, tokens)) sum += b;
      EXPECT_EQ(sum, text.size()) << "'" << text << "' bos " << bos;
    }
  }
  // "▁abc" is [▁a, bc]: the first token stands for "a" alone.
  EXPECT_EQ(text_bytes_of(*vocab, vocab->encode("abc", false)), (std::vector<std::uint32_t>{1, 2}));
  // Byte-level BPE has no dummy prefix: every piece counts whole.
  const auto bpe = Vocabulary::train_byte_pairs("hello world hello world", 5, "llama-bpe");
  const std::vector<Token> tokens = bpe->encode(" hello world", false);
  std::uint64_t sum = 0;
  for (const std::uint32_t b : text_bytes_of(*bpe, tokens)) sum += b;
  EXPECT_EQ(sum, 12U);
}

// ---- training, and the round trips --------------------------------------------

const std::string kTrainingText =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!\n\n"
    "In 2024, 12345 foxes and 678 dogs met at the river's edge. It's true, ISN'T IT?\n"
    "Ünïcödé wörds, 中文字符, emoji 😀 and tabs\tand   spaces   end.\n";

std::vector<std::string> sample_texts() {
  return {"", "the fox", "The quick brown fox jumps over the lazy dog.", "  leading and trailing  ",
          "numbers 1234567890 and 3.14159", "line\nbreaks\r\n\r\nhere", "\xFF\xFE invalid \xC3 utf8 \xE2\x82",
          "中文 and 😀 and Ünïcödé", "<s> is text, not BOS </s>", kTrainingText};
}

TEST(VocabTraining, LearnsDeterministicMerges) {
  const auto vocab = Vocabulary::train_byte_pairs(kTrainingText, 50, "llama-bpe");
  EXPECT_EQ(vocab->kind(), Vocabulary::Kind::kBytePairs);
  EXPECT_EQ(vocab->model_name(), "gpt2");
  EXPECT_EQ(vocab->pre_name(), "llama-bpe");
  EXPECT_EQ(vocab->bos(), Token{0});
  EXPECT_EQ(vocab->eos(), Token{1});
  EXPECT_TRUE(vocab->adds_bos());
  EXPECT_EQ(vocab->size(), 258U + 50U);
  const auto again = Vocabulary::train_byte_pairs(kTrainingText, 50, "llama-bpe");
  for (const std::string& text : sample_texts()) {
    const std::vector<Token> tokens = vocab->encode(text);
    EXPECT_EQ(tokens, again->encode(text));
    ASSERT_FALSE(tokens.empty());
    EXPECT_EQ(tokens.front(), 0U);
    for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_GE(tokens[i], 2U) << "text never becomes a special";
    EXPECT_EQ(vocab->decode(tokens), text);
  }
  // Merging shortens the text it learned from (much of it is multi-byte characters seen once).
  EXPECT_LT(vocab->encode(kTrainingText, false).size(), kTrainingText.size() * 2 / 3);
  // More merges than pairs: it stops when every piece is one token.
  const auto all = Vocabulary::train_byte_pairs("ab ab", 100, "gpt2");
  EXPECT_EQ(all->encode("ab ab", false).size(), 2U);
  EXPECT_THROW((void)Vocabulary::train_byte_pairs("x", 1, "nope"), ParameterError);
}

void expect_same_tokenizer(const Vocabulary& a, const Vocabulary& b) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.bos(), b.bos());
  EXPECT_EQ(a.eos(), b.eos());
  EXPECT_EQ(a.adds_bos(), b.adds_bos());
  EXPECT_EQ(a.model_name(), b.model_name());
  for (const std::string& text : sample_texts()) {
    EXPECT_EQ(a.encode(text), b.encode(text)) << text;
    EXPECT_EQ(a.encode(text, false), b.encode(text, false)) << text;
  }
  for (Token t = 0; t < a.size(); ++t) EXPECT_EQ(a.piece_bytes(t), b.piece_bytes(t)) << t;
}

std::shared_ptr<const Vocabulary> through_gguf(const Vocabulary& vocab) {
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  vocab.write_gguf(writer);
  const std::vector<std::uint8_t> bytes = writer.bytes();
  return Vocabulary::from_gguf(*GgufFile::parse(bytes, "round-trip.gguf"));
}

TEST(VocabRoundTrip, Gguf) {
  for (const char* pre : {"llama-bpe", "qwen2", "gpt2", "smollm", "default"}) {
    const auto trained = Vocabulary::train_byte_pairs(kTrainingText, 80, pre);
    const auto read = through_gguf(*trained);
    EXPECT_EQ(read->pre_name(), pre);
    expect_same_tokenizer(*trained, *read);
  }
  const auto spm = vocab_detail::build_vocabulary(spm_parts(true));
  const auto read = through_gguf(*spm);
  EXPECT_EQ(read->kind(), Vocabulary::Kind::kSentencePiece);
  expect_same_tokenizer(*spm, *read);
  EXPECT_THROW((void)spm->tokenizer_json(), ContractError);
}

// Padding to a real model's size adds tokens no text becomes: every text
// encodes as without them, and they survive a GGUF round trip.
TEST(VocabTraining, PaddingAddsUnusedTokensNoTextBecomes) {
  const auto learned = Vocabulary::train_byte_pairs(kTrainingText, 40, "llama-bpe");
  const auto padded = Vocabulary::train_byte_pairs(kTrainingText, 40, "llama-bpe", 1000);
  ASSERT_EQ(learned->size(), 298U);
  EXPECT_EQ(padded->size(), 1000U);
  for (const std::string& text : sample_texts()) EXPECT_EQ(padded->encode(text), learned->encode(text)) << text;
  EXPECT_EQ(padded->encode("<unused_500>", false), learned->encode("<unused_500>", false));
  EXPECT_EQ(padded->piece_bytes(999), "<unused_999>");
  expect_same_tokenizer(*padded, *through_gguf(*padded));
  testing::expect_error<ParameterError>(
      [] { (void)Vocabulary::train_byte_pairs(kTrainingText, 40, "llama-bpe", 297); },
      "train_byte_pairs: a vocabulary of 297 tokens is smaller than the 298 learned");
}

class VocabFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvevict-vocab-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(VocabFiles, TokenizerJsonRoundTrip) {
  for (const char* pre : {"llama-bpe", "qwen2", "gpt2", "smollm", "default"}) {
    const auto trained = Vocabulary::train_byte_pairs(kTrainingText, 80, pre);
    const auto path = write("tokenizer.json", trained->tokenizer_json());
    const auto read = Vocabulary::from_tokenizer_json(path);
    expect_same_tokenizer(*trained, *read);
    // A folder holding it, through load_vocabulary.
    expect_same_tokenizer(*trained, *load_vocabulary(dir_));
  }
  // tokenizer_config.json beside it decides BOS and add_bos.
  const auto trained = Vocabulary::train_byte_pairs(kTrainingText, 20, "llama-bpe");
  write("tokenizer.json", trained->tokenizer_json());
  write("tokenizer_config.json", R"({"add_bos_token": false, "bos_token": {"content": "</s>"}, "eos_token": "<s>"})");
  const auto configured = load_vocabulary(dir_);
  EXPECT_FALSE(configured->adds_bos());
  EXPECT_EQ(configured->bos(), Token{1});
  EXPECT_EQ(configured->eos(), Token{0});
}

TEST_F(VocabFiles, TokenizerJsonSentencePieceStyle) {
  // A SentencePiece-style BPE as transformers writes one: spaces as U+2581,
  // a prepended one, byte_fallback, pair-form merges. Scores = -rank.
  const std::string json = R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁": 4, "a": 5, "b": 6, "c": 7,
                        "bc": 8, "ab": 9, "▁a": 10},
              "merges": [["b", "c"], ["a", "b"], ["▁", "a"]]}})";
  const auto vocab = Vocabulary::from_tokenizer_json(write("tokenizer.json", json));
  EXPECT_EQ(vocab->kind(), Vocabulary::Kind::kSentencePiece);
  EXPECT_EQ(vocab->bos(), Token{1});
  EXPECT_TRUE(vocab->adds_bos());
  // "▁abc": b c (rank 0) first, then ▁ a: [▁a, bc].
  EXPECT_EQ(vocab->encode("abc"), (std::vector<Token>{1, 10, 8}));
  EXPECT_EQ(vocab->encode("\n", false), (std::vector<Token>{4, 3}));
  EXPECT_EQ(vocab->decode(vocab->encode("ab\nc")), "ab\nc");
}

TEST_F(VocabFiles, LoadVocabulary) {
  EXPECT_EQ(load_vocabulary(std::filesystem::path(KVEVICT_SOURCE_DIR) / "model" / "kvevict-tiny.kvm")->kind(),
            Vocabulary::Kind::kBytes);
  const auto trained = Vocabulary::train_byte_pairs(kTrainingText, 30, "qwen2");
  GgufWriter writer;
  trained->write_gguf(writer);
  writer.write(dir_ / "vocab.gguf");
  expect_same_tokenizer(*trained, *load_vocabulary(dir_ / "vocab.gguf"));
  try {
    (void)load_vocabulary(write("notes.txt", "hello"));
    FAIL() << "a text file was read as a vocabulary";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kvevict reads"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)load_vocabulary(dir_ / "missing.gguf"), InputError);
  std::filesystem::create_directories(dir_ / "empty");
  EXPECT_THROW((void)load_vocabulary(dir_ / "empty"), InputError);
  const auto bad = write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  try {
    (void)Vocabulary::from_tokenizer_json(bad);
    FAIL();
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(bad.string()), std::string::npos) << message;
    EXPECT_NE(message.find("WordPiece"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// ---- bad GGUF vocabularies: one line naming the file and the key ------------------

void expect_refused(GgufWriter& writer, const std::string& key, const std::string& also = "") {
  const std::vector<std::uint8_t> bytes = writer.bytes();
  try {
    (void)Vocabulary::from_gguf(*GgufFile::parse(bytes, "bad-vocab.gguf"));
    ADD_FAILURE() << "accepted; expected an error naming " << key;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("bad-vocab.gguf"), std::string::npos) << message;
    EXPECT_NE(message.find(key), std::string::npos) << message;
    EXPECT_NE(message.find(also), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

std::vector<std::string> byte_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(vocab_detail::byte_level_spelling(std::string(1, static_cast<char>(b))));
  return tokens;
}

TEST(VocabBadFiles, RefusedWithTheKey) {
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    expect_refused(w, "tokenizer.ggml.tokens");
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    const std::vector<float> scores{0.0F, 0.0F};
    w.set_f32s("tokenizer.ggml.scores", scores);
    expect_refused(w, "tokenizer.ggml.scores", "2 scores for 3 tokens");
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    const std::vector<std::int32_t> types{2, 3, 3, 1};
    w.set_i32s("tokenizer.ggml.token_type", types);
    expect_refused(w, "tokenizer.ggml.token_type");
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "gpt-2");
    w.set_strings("tokenizer.ggml.tokens", byte_tokens());
    w.set_strings("tokenizer.ggml.merges", {"a zz"});
    expect_refused(w, "tokenizer.ggml.merges", "'zz'");
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "bert");
    w.set_strings("tokenizer.ggml.tokens", {"[CLS]"});
    expect_refused(w, "tokenizer.ggml.model", "llama, gpt2");
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "falcon-9");
    w.set_strings("tokenizer.ggml.tokens", byte_tokens());
    w.set_strings("tokenizer.ggml.merges", {});
    expect_refused(w, "tokenizer.ggml.pre", "llama-bpe");
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "llama-bpe");
    w.set_strings("tokenizer.ggml.tokens", byte_tokens());
    w.set_strings("tokenizer.ggml.merges", {});
    w.set_u32("tokenizer.ggml.bos_token_id", 256);
    expect_refused(w, "tokenizer.ggml.bos_token_id", "256");
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_strings("tokenizer.ggml.tokens", {"a", "b"});
    w.set_strings("tokenizer.ggml.merges", {});
    expect_refused(w, "tokenizer.ggml.tokens", "byte");
  }
}

// ---- properties and size ----------------------------------------------------------

std::shared_ptr<const Vocabulary> property_vocabulary(std::size_t which) {
  static const std::vector<std::shared_ptr<const Vocabulary>> vocabularies = [] {
    std::vector<std::shared_ptr<const Vocabulary>> out;
    for (const char* pre : {"llama-bpe", "qwen2", "gpt2", "smollm", "default"}) {
      out.push_back(Vocabulary::train_byte_pairs(kTrainingText, 120, pre));
    }
    return out;
  }();
  return vocabularies[which % vocabularies.size()];
}

RC_GTEST_PROP(VocabProperties, ByteLevelDecodesWhatItEncodes, ()) {
  // Arbitrary bytes mixed with the text's usual suspects.
  const std::vector<std::string> atoms{"a", "Z", "7", " ", "  ", "\n", "\r\n", "\t", "'s", "'S", ".", "!!", "é",
                                       "中", "😀", "\xFF", "\xC3", "\xE2\x82", "\x80"};
  const auto parts = *rc::gen::container<std::vector<std::string>>(rc::gen::oneOf(
      rc::gen::elementOf(atoms), rc::gen::map(rc::gen::arbitrary<char>(), [](char c) { return std::string(1, c); })));
  std::string text;
  for (const std::string& p : parts) text += p;
  const auto vocab = property_vocabulary(*rc::gen::inRange<std::size_t>(0, 5));
  const std::vector<Token> tokens = vocab->encode(text);
  for (const Token t : tokens) RC_ASSERT(t < vocab->size());
  RC_ASSERT(vocab->decode(tokens) == text);
}

TEST(VocabProperties, LongPiecesStayFast) {
  const auto bpe = Vocabulary::train_byte_pairs(kTrainingText, 120, "llama-bpe");
  const auto spm = vocab_detail::build_vocabulary(spm_parts(true));
  std::string letters(100000, 'a');
  for (std::size_t i = 0; i < letters.size(); i += 7) letters[i] = 'e';
  const std::string spaces(100000, ' ');
  std::string mixed;
  for (std::size_t i = 0; mixed.size() < 100000; ++i) mixed += (i % 3 == 0) ? "ab" : "c";
  const auto start = std::chrono::steady_clock::now();
  for (const std::string* text : std::vector<const std::string*>{&letters, &spaces, &mixed}) {
    EXPECT_EQ(bpe->decode(bpe->encode(*text)), *text);
    EXPECT_EQ(spm->decode(spm->encode(*text)), *text);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "100 KB pieces should take milliseconds, not a quadratic time";
}

}  // namespace
}  // namespace kvevict
