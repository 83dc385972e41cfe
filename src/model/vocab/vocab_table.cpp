// What every vocabulary stands on: GPT-2's byte map, the token table the two
// tokenizers share (vocab_bpe.cpp, vocab_spm.cpp), the byte vocabulary of
// kvevict-tiny, and the bytes each token of a text stands for. The sources
// are above it: vocab_build.cpp checks a vocabulary's parts and picks its
// tokenizer, vocab_gguf.cpp and vocab_json.cpp read the parts from a file,
// vocab_train.cpp learns them, vocab_load.cpp picks the reader.
#include "kvevict/model/vocab/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "vocab_internal.h"

namespace kvevict {
namespace vocab_detail {
namespace {

std::array<char32_t, 256> make_byte_code_points() {
  std::array<char32_t, 256> out{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return out;
}

// The highest code point the map uses: 256 + 68 - 1.
constexpr char32_t kLastByteCodePoint = 323;

std::array<int, kLastByteCodePoint + 1> make_code_point_bytes() {
  std::array<int, kLastByteCodePoint + 1> out{};
  out.fill(-1);
  const auto& forward = byte_code_points();
  for (std::size_t b = 0; b < forward.size(); ++b) out[forward[b]] = static_cast<int>(b);
  return out;
}

// Decodes the UTF-8 code point at text[at] (valid sequences only; an invalid
// byte decodes as nullopt and is one byte long).
std::optional<char32_t> decode_utf8(std::string_view text, std::size_t at, std::size_t& length) {
  length = utf8_length(text, at);
  const auto lead = static_cast<unsigned char>(text[at]);
  if (length == 1) {
    if (lead < 0x80) return lead;
    return std::nullopt;
  }
  char32_t c = lead & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07);
  for (std::size_t i = 1; i < length; ++i) c = (c << 6) | (static_cast<unsigned char>(text[at + i]) & 0x3F);
  // Overlong three- and four-byte forms, surrogates and values past U+10FFFF
  // are not valid UTF-8 (two-byte overlongs are excluded by utf8_length).
  const bool overlong = (length == 3 && c < 0x800) || (length == 4 && c < 0x10000);
  if (overlong || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) {
    length = 1;
    return std::nullopt;
  }
  return c;
}

// The byte vocabulary of kvevict-tiny.
class ByteVocabulary final : public Vocabulary {
 public:
  Kind kind() const noexcept override { return Kind::kBytes; }
  std::string_view model_name() const noexcept override { return "bytes"; }
  std::string_view pre_name() const noexcept override { return ""; }
  std::string describe() const override { return "bytes, 256 tokens"; }
  std::uint32_t size() const noexcept override { return 256; }
  std::optional<Token> bos() const noexcept override { return std::nullopt; }
  std::optional<Token> eos() const noexcept override { return std::nullopt; }
  bool adds_bos() const noexcept override { return false; }
  std::vector<Token> encode(std::string_view text, bool /*with_bos*/) const override {
    std::vector<Token> out;
    out.reserve(text.size());
    for (const char c : text) out.push_back(static_cast<unsigned char>(c));
    return out;
  }
  std::string piece_bytes(Token t) const override {
    if (t >= 256) throw InputError(fmt::format("token {} is outside the byte vocabulary of 256", t));
    return std::string(1, static_cast<char>(t));
  }
  std::string decode(std::span<const Token> tokens) const override {
    std::string out;
    out.reserve(tokens.size());
    for (const Token t : tokens) out += piece_bytes(t);
    return out;
  }
  void write_gguf(GgufWriter& /*writer*/) const override {}
  std::string tokenizer_json() const override {
    throw ContractError("tokenizer_json: the byte vocabulary has no tokenizer.json form");
  }
};

bool is_byte_token_text(std::string_view text) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return text.size() == 6 && text.substr(0, 3) == "<0x" && hex(text[3]) && hex(text[4]) && text[5] == '>';
}

}  // namespace

void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw InputError(fmt::format("{}: {}: {}", source, key, what));
}

const std::array<char32_t, 256>& byte_code_points() noexcept {
  static const std::array<char32_t, 256> table = make_byte_code_points();
  return table;
}

int code_point_byte(char32_t c) noexcept {
  static const std::array<int, kLastByteCodePoint + 1> table = make_code_point_bytes();
  return c <= kLastByteCodePoint ? table[c] : -1;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string byte_level_spelling(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char b : bytes) append_utf8(out, byte_code_points()[static_cast<unsigned char>(b)]);
  return out;
}

std::string byte_level_bytes(std::string_view spelling) {
  std::string out;
  out.reserve(spelling.size());
  std::size_t at = 0;
  while (at < spelling.size()) {
    std::size_t length = 1;
    const std::optional<char32_t> c = decode_utf8(spelling, at, length);
    const int b = c ? code_point_byte(*c) : -1;
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(spelling.substr(at, length));
    }
    at += length;
  }
  return out;
}

std::size_t utf8_length(std::string_view text, std::size_t at) noexcept {
  const auto lead = static_cast<unsigned char>(text[at]);
  std::size_t n = 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
  }
  if (n == 1 || at + n > text.size()) return 1;
  for (std::size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(text[at + i]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

TableVocabulary::TableVocabulary(VocabularyParts& parts)
    : source_(std::move(parts.source)), tokens_(std::move(parts.tokens)), bos_(parts.bos), eos_(parts.eos) {
  types_.reserve(tokens_.size());
  if (!parts.token_types.empty()) {
    for (const std::int32_t t : parts.token_types) types_.push_back(static_cast<TokenType>(t));
  } else {
    // No token_type key: byte tokens by their <0xXX> spelling (SentencePiece
    // only), the specials by their ids, everything else normal.
    const bool spm = parts.model == "llama";
    for (const std::string& text : tokens_) {
      types_.push_back(spm && is_byte_token_text(text) ? TokenType::kByte : TokenType::kNormal);
    }
    for (const std::optional<Token> special : {parts.bos, parts.eos}) {
      if (special) types_[*special] = TokenType::kControl;
    }
    if (parts.unk) types_[*parts.unk] = TokenType::kUnknown;
  }
  ids_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) ids_[tokens_[i]] = static_cast<Token>(i);
}

std::optional<Token> TableVocabulary::find(std::string_view text) const {
  const auto it = ids_.find(text);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void TableVocabulary::check_token(Token t) const {
  if (t >= tokens_.size()) {
    throw InputError(fmt::format("token {} is outside the vocabulary of {} tokens ({})", t, tokens_.size(), source_));
  }
}

void TableVocabulary::write_table(GgufWriter& writer) const {
  writer.set_strings("tokenizer.ggml.tokens", tokens_);
  std::vector<std::int32_t> types;
  types.reserve(types_.size());
  for (const TokenType t : types_) types.push_back(static_cast<std::int32_t>(t));
  writer.set_i32s("tokenizer.ggml.token_type", types);
}

}  // namespace vocab_detail

std::shared_ptr<const Vocabulary> Vocabulary::bytes() {
  static const std::shared_ptr<const Vocabulary> vocabulary = std::make_shared<vocab_detail::ByteVocabulary>();
  return vocabulary;
}

std::vector<std::uint32_t> text_bytes_of(const Vocabulary& vocab, std::span<const Token> tokens) {
  std::vector<std::uint32_t> bytes;
  bytes.reserve(tokens.size());
  for (const Token t : tokens) bytes.push_back(static_cast<std::uint32_t>(vocab.piece_bytes(t).size()));
  // The first piece of text is the one a dummy prefix would lead: decode()
  // alone knows whether it does (a control token before it has no piece).
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (bytes[i] == 0) continue;
    bytes[i] = static_cast<std::uint32_t>(vocab.decode(tokens.subspan(i, 1)).size());
    break;
  }
  return bytes;
}

}  // namespace kvevict
