// The vocabulary's common parts: GPT-2's byte map, the token table, the
// checks every source goes through, the byte vocabulary, the GGUF reader and
// load_vocabulary. The two tokenizers are in vocab_bpe.cpp and
// vocab_spm.cpp, the tokenizer.json reader in vocab_json.cpp.
#include "kvevict/model/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "kvevict/core/errors.h"
#include "kvevict/model/gguf.h"
#include "pretokenize.h"
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

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw InputError(fmt::format("{}: {}: {}", source, key, what));
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

std::shared_ptr<const Vocabulary> build_vocabulary(VocabularyParts parts) {
  const std::string& src = parts.source;
  const PartNames& names = parts.names;
  if (parts.model != "llama" && parts.model != "gpt2") {
    fail(src, names.model,
         fmt::format("tokenizer model '{}' is not supported (kvevict reads llama, gpt2)", parts.model));
  }
  const std::size_t n = parts.tokens.size();
  if (n == 0) fail(src, names.tokens, "the vocabulary has no tokens");
  if (n > (std::size_t{1} << 31)) fail(src, names.tokens, fmt::format("{} tokens is more than kvevict reads", n));
  if (!parts.scores.empty() && parts.scores.size() != n) {
    fail(src, names.scores, fmt::format("{} scores for {} tokens", parts.scores.size(), n));
  }
  if (!parts.token_types.empty() && parts.token_types.size() != n) {
    fail(src, names.token_type, fmt::format("{} token types for {} tokens", parts.token_types.size(), n));
  }
  for (std::size_t i = 0; i < parts.token_types.size(); ++i) {
    const std::int32_t t = parts.token_types[i];
    if (t < 1 || t > 6) fail(src, names.token_type, fmt::format("token {} has type {} (types are 1 ... 6)", i, t));
  }
  const auto check_id = [&](const std::optional<Token>& id, const std::string& key) {
    if (id && *id >= n) fail(src, key, fmt::format("token {} is outside the vocabulary of {} tokens", *id, n));
  };
  check_id(parts.bos, names.bos);
  check_id(parts.eos, names.eos);
  check_id(parts.unk, names.unk);
  if (parts.model == "gpt2") {
    if (!PreTokenizer::kind_of(parts.pre)) {
      fail(src, names.pre,
           fmt::format("pre-tokenizer '{}' is not supported (kvevict reads {})", parts.pre,
                       PreTokenizer::supported_names()));
    }
    return make_byte_pair_vocabulary(std::move(parts));
  }
  return make_sentence_piece_vocabulary(std::move(parts));
}

}  // namespace vocab_detail

using vocab_detail::fail;
using vocab_detail::VocabularyParts;

std::shared_ptr<const Vocabulary> Vocabulary::bytes() {
  static const std::shared_ptr<const Vocabulary> vocabulary = std::make_shared<vocab_detail::ByteVocabulary>();
  return vocabulary;
}

namespace {

const GgufValue* find_array(const GgufFile& file, const std::string& key, bool strings) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return nullptr;
  const bool numeric = value->element != GgufType::kString && value->element != GgufType::kArray;
  if (value->type != GgufType::kArray || (strings ? value->element != GgufType::kString : !numeric)) {
    fail(file.path(), key, strings ? "is not an array of strings" : "is not an array of numbers");
  }
  return value;
}

std::optional<Token> gguf_id(const GgufFile& file, const std::string& key) {
  const std::optional<std::uint64_t> id = file.get_uint_if(key);
  if (!id) return std::nullopt;
  if (*id > 0xFFFFFFFFULL) fail(file.path(), key, fmt::format("token {} is outside any vocabulary", *id));
  return static_cast<Token>(*id);
}

}  // namespace

std::shared_ptr<const Vocabulary> Vocabulary::from_gguf(const GgufFile& file) {
  VocabularyParts parts;
  parts.source = file.path();
  const vocab_detail::PartNames& names = parts.names;
  if (file.find(names.model) == nullptr) fail(file.path(), names.model, "missing (the file holds no vocabulary)");
  parts.model = file.get_string(names.model);
  if (parts.model != "llama" && parts.model != "gpt2") {
    fail(file.path(), names.model,
         fmt::format("tokenizer model '{}' is not supported (kvevict reads llama, gpt2)", parts.model));
  }
  const GgufValue* tokens = find_array(file, names.tokens, true);
  if (tokens == nullptr) fail(file.path(), names.tokens, "missing");
  parts.tokens = tokens->strings;
  if (const GgufValue* scores = find_array(file, names.scores, false)) {
    parts.scores.assign(scores->numbers.begin(), scores->numbers.end());
    // Counts are checked by build_vocabulary; a nested or short array keeps its count only.
    if (scores->numbers.size() != scores->count) fail(file.path(), names.scores, "holds no numbers");
  }
  if (const GgufValue* types = find_array(file, names.token_type, false)) {
    if (types->numbers.size() != types->count) fail(file.path(), names.token_type, "holds no numbers");
    parts.token_types.reserve(types->numbers.size());
    for (const double t : types->numbers) {
      if (t != static_cast<double>(static_cast<std::int32_t>(t))) {
        fail(file.path(), names.token_type, fmt::format("type {} is not an integer", t));
      }
      parts.token_types.push_back(static_cast<std::int32_t>(t));
    }
  }
  if (parts.model == "gpt2") {
    const GgufValue* merges = find_array(file, names.merges, true);
    if (merges == nullptr) fail(file.path(), names.merges, "missing (a gpt2 vocabulary needs its merges)");
    parts.merges.reserve(merges->strings.size());
    for (std::size_t i = 0; i < merges->strings.size(); ++i) {
      const std::string& merge = merges->strings[i];
      // Split at the first space after position 0 (llama.cpp), so a left
      // part may itself be a space.
      const std::size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string::npos;
      if (space == std::string::npos) {
        fail(file.path(), names.merges, fmt::format("merge {} ('{}') is not 'left right'", i, merge));
      }
      parts.merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
    }
    // llama.cpp reads a missing pre as "default".
    parts.pre = file.get_string_if(names.pre).value_or("default");
  }
  parts.bos = gguf_id(file, names.bos);
  parts.eos = gguf_id(file, names.eos);
  parts.unk = gguf_id(file, names.unk);
  parts.add_bos = file.get_bool_if("tokenizer.ggml.add_bos_token");
  parts.add_space_prefix = file.get_bool_if("tokenizer.ggml.add_space_prefix");
  return vocab_detail::build_vocabulary(std::move(parts));
}

std::shared_ptr<const Vocabulary> load_vocabulary(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path json = path / "tokenizer.json";
    if (!std::filesystem::exists(json, ec)) {
      throw InputError(fmt::format("{}: the folder holds no tokenizer.json", file));
    }
    return Vocabulary::from_tokenizer_json(json);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot be opened (does it exist?)", file));
  std::array<char, 8> magic{};
  in.read(magic.data(), magic.size());
  const std::string_view head(magic.data(), static_cast<std::size_t>(in.gcount()));
  if (head.substr(0, 4) == "GGUF") return Vocabulary::from_gguf(*GgufFile::open(path));
  if (head == "KVEVMODL") return Vocabulary::bytes();
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  if (path.extension() == ".json" || (first != std::string_view::npos && head[first] == '{')) {
    return Vocabulary::from_tokenizer_json(path);
  }
  throw InputError(fmt::format(
      "{}: not a vocabulary: kvevict reads a .gguf file (magic GGUF), a tokenizer.json (or a model folder holding "
      "one) or a .kvm model (magic KVEVMODL)",
      file));
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
