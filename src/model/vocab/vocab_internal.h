// What the vocabulary's sources share: the parts a vocabulary is built from
// (read from GGUF keys or a tokenizer.json, or made by train_byte_pairs),
// their validation, the token table both tokenizers stand on, and GPT-2's
// byte-to-code-point map. Tests build vocabularies from parts directly.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvevict/model/vocab/vocab.h"

namespace kvevict::vocab_detail {

// GGUF tokenizer.ggml.token_type values (llama_token_attr's older form).
enum class TokenType : std::int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Where each part came from, for error messages ("<file>: <key>: ...").
// GGUF keys by default; the tokenizer.json reader names its own.
struct PartNames {
  std::string model = "tokenizer.ggml.model";
  std::string pre = "tokenizer.ggml.pre";
  std::string tokens = "tokenizer.ggml.tokens";
  std::string scores = "tokenizer.ggml.scores";
  std::string token_type = "tokenizer.ggml.token_type";
  std::string merges = "tokenizer.ggml.merges";
  std::string bos = "tokenizer.ggml.bos_token_id";
  std::string eos = "tokenizer.ggml.eos_token_id";
  std::string unk = "tokenizer.ggml.unknown_token_id";
};

struct VocabularyParts {
  std::string source;  // the file, first in every error message
  PartNames names;
  std::string model;  // "llama" or "gpt2"
  std::string pre;    // gpt2: the pre-tokenizer's name
  // gpt2: whether a piece that is a token is emitted whole; unset: what the
  // pre-tokenizer implies (llama.cpp sets it for the Llama-3 family).
  std::optional<bool> ignore_merges;
  std::vector<std::string> tokens;
  std::vector<float> scores;              // llama; empty: all 0
  std::vector<std::int32_t> token_types;  // empty: inferred (see build_vocabulary)
  std::vector<std::pair<std::string, std::string>> merges;  // gpt2, by rank
  std::optional<Token> bos, eos, unk;
  std::optional<bool> add_bos;           // unset: the model's default
  std::optional<bool> add_space_prefix;  // llama; unset: on
};

// Throws InputError: "<source>: <key>: <what>".
[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what);

// Checks the parts and builds the vocabulary (vocab_build.cpp). Throws InputError, one line,
// "<source>: <key>: <what>", for anything inconsistent.
std::shared_ptr<const Vocabulary> build_vocabulary(VocabularyParts parts);

// GPT-2's bytes_to_unicode: bytes 33-126, 161-172 and 174-255 stand for
// themselves, the other 68 take 256, 257, ... in byte order.
const std::array<char32_t, 256>& byte_code_points() noexcept;
// The byte a code point stands for, or -1.
int code_point_byte(char32_t c) noexcept;
// `bytes` with every byte replaced by its code point, in UTF-8.
std::string byte_level_spelling(std::string_view bytes);
void append_utf8(std::string& out, char32_t c);
// The bytes a byte-level spelling stands for (code points outside the map
// are copied as their UTF-8).
std::string byte_level_bytes(std::string_view spelling);
// Length of the valid UTF-8 sequence at text[at], or 1 for an invalid byte.
std::size_t utf8_length(std::string_view text, std::size_t at) noexcept;

// The token table both tokenizers stand on: texts, types, the specials.
class TableVocabulary : public Vocabulary {
 public:
  std::uint32_t size() const noexcept override { return static_cast<std::uint32_t>(tokens_.size()); }
  std::optional<Token> bos() const noexcept override { return bos_; }
  std::optional<Token> eos() const noexcept override { return eos_; }
  bool adds_bos() const noexcept override { return add_bos_ && bos_.has_value(); }

  const std::vector<std::string>& tokens() const noexcept { return tokens_; }
  TokenType type(Token t) const noexcept { return types_[t]; }
  TableVocabulary(const TableVocabulary&) = delete;  // ids_ views into tokens_
  TableVocabulary& operator=(const TableVocabulary&) = delete;

 protected:
  explicit TableVocabulary(VocabularyParts& parts);
  // The id of a token text (the last of equal texts, as llama.cpp), or nullopt.
  std::optional<Token> find(std::string_view text) const;
  // Throws InputError for a token outside the table.
  void check_token(Token t) const;
  // The keys every table writes: tokens, token_type, bos/eos, add_bos.
  void write_table(GgufWriter& writer) const;

  std::string source_;
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, Token> ids_;  // views into tokens_
  std::optional<Token> bos_, eos_;
  bool add_bos_ = false;
};

std::shared_ptr<const Vocabulary> make_byte_pair_vocabulary(VocabularyParts parts);
std::shared_ptr<const Vocabulary> make_sentence_piece_vocabulary(VocabularyParts parts);

}  // namespace kvevict::vocab_detail
