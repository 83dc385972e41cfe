// SentencePiece-style BPE (GGUF tokenizer.ggml.model "llama"), as
// sentencepiece's bpe_model.cc Encode and llama.cpp's llm_tokenizer_spm run
// it: spaces become U+2581 and one is put in front (add_dummy_prefix), the
// text splits into UTF-8 characters, and the adjacent pair whose
// concatenation is a piece with the highest score merges first (equal
// scores: the leftmost pair) until no adjacent pair forms a piece. A symbol
// that is not a piece falls back to its bytes' <0xXX> tokens (else UNK).
//
// Only normal and user-defined tokens take part in merging, as in
// sentencepiece (whose control, unknown and byte pieces are kept apart from
// the pieces it merges): text never turns into <s> or a byte token by
// spelling it out.
#include <fmt/format.h>

#include <queue>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "vocab_internal.h"

namespace kvevict::vocab_detail {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string spaces_shown(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  while (at < text.size()) {
    if (text.substr(at, kSpace.size()) == kSpace) {
      out += ' ';
      at += kSpace.size();
    } else {
      out += text[at++];
    }
  }
  return out;
}

// The parts with llama.cpp's SPM defaults filled in (BOS 1, EOS 2, UNK 0,
// where the vocabulary is that large).
VocabularyParts& with_defaults(VocabularyParts& parts) {
  const std::size_t n = parts.tokens.size();
  if (!parts.bos && n > 1) parts.bos = 1;
  if (!parts.eos && n > 2) parts.eos = 2;
  if (!parts.unk) parts.unk = 0;
  return parts;
}

class SentencePieceVocabulary final : public TableVocabulary {
 public:
  explicit SentencePieceVocabulary(VocabularyParts& parts)
      : TableVocabulary(with_defaults(parts)),
        unk_(*parts.unk),
        add_space_prefix_(parts.add_space_prefix.value_or(true)) {
    add_bos_ = parts.add_bos.value_or(true);
    scores_ = parts.scores.empty() ? std::vector<float>(tokens_.size(), 0.0F) : std::move(parts.scores);
    for (std::size_t i = 0; i < scores_.size(); ++i) {
      // A NaN would make the merge order meaningless.
      if (scores_[i] != scores_[i]) {
        throw InputError(fmt::format("{}: {}: token {} has a NaN score", source_, parts.names.scores, i));
      }
    }
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      if (types_[i] == TokenType::kNormal || types_[i] == TokenType::kUserDefined) {
        pieces_[tokens_[i]] = static_cast<Token>(i);
      }
    }
    for (int b = 0; b < 256; ++b) {
      const std::optional<Token> id = find(fmt::format("<0x{:02X}>", b));
      byte_tokens_[static_cast<std::size_t>(b)] = id.value_or(unk_);
    }
  }

  Kind kind() const noexcept override { return Kind::kSentencePiece; }
  std::string_view model_name() const noexcept override { return "llama"; }
  std::string_view pre_name() const noexcept override { return ""; }
  std::string describe() const override { return fmt::format("llama SentencePiece BPE, {} tokens", tokens_.size()); }

  std::vector<Token> encode(std::string_view text, bool with_bos) const override;

  std::string piece_bytes(Token t) const override {
    check_token(t);
    switch (types_[t]) {
      case TokenType::kControl: return {};
      case TokenType::kByte: {
        const std::string& text = tokens_[t];
        if (text.size() == 6) return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
        return spaces_shown(text);
      }
      default: return spaces_shown(tokens_[t]);
    }
  }

  std::string decode(std::span<const Token> tokens) const override {
    std::string out;
    bool first = true;
    for (const Token t : tokens) {
      std::string piece = piece_bytes(t);
      if (piece.empty()) continue;
      // The dummy prefix: the first piece's leading U+2581 is no space of the text.
      if (first && add_space_prefix_ && types_[t] != TokenType::kByte && tokens_[t].starts_with(kSpace)) {
        piece.erase(0, 1);
      }
      first = false;
      out += piece;
    }
    return out;
  }

  void write_gguf(GgufWriter& writer) const override {
    writer.set_string("tokenizer.ggml.model", "llama");
    write_table(writer);
    writer.set_f32s("tokenizer.ggml.scores", scores_);
    if (bos_) writer.set_u32("tokenizer.ggml.bos_token_id", *bos_);
    if (eos_) writer.set_u32("tokenizer.ggml.eos_token_id", *eos_);
    writer.set_u32("tokenizer.ggml.unknown_token_id", unk_);
    writer.set_bool("tokenizer.ggml.add_bos_token", add_bos_);
    writer.set_bool("tokenizer.ggml.add_space_prefix", add_space_prefix_);
  }

  std::string tokenizer_json() const override {
    throw ContractError("tokenizer_json: only gpt2 (byte-level BPE) vocabularies are written as tokenizer.json");
  }

 private:
  std::optional<Token> piece(std::string_view text) const {
    const auto it = pieces_.find(text);
    if (it == pieces_.end()) return std::nullopt;
    return it->second;
  }

  Token unk_;
  bool add_space_prefix_;
  std::vector<float> scores_;
  std::unordered_map<std::string_view, Token> pieces_;  // the tokens merging may form
  std::array<Token, 256> byte_tokens_{};
};

std::vector<Token> SentencePieceVocabulary::encode(std::string_view text, bool with_bos) const {
  std::vector<Token> out;
  if (with_bos && adds_bos()) out.push_back(*bos_);
  if (text.empty()) return out;  // sentencepiece adds no dummy prefix to nothing
  std::string normalized;
  normalized.reserve(text.size() + 3 * (text.size() / 4 + 1));
  if (add_space_prefix_) normalized += kSpace;
  for (const char c : text) {
    if (c == ' ') {
      normalized += kSpace;
    } else {
      normalized += c;
    }
  }

  struct Symbol {
    std::size_t start, length;  // length 0: merged into the symbol on its left
    std::size_t prev, next;
  };
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<Symbol> symbols;
  for (std::size_t at = 0; at < normalized.size();) {
    const std::size_t length = utf8_length(normalized, at);
    symbols.push_back({at, length, symbols.empty() ? kNone : symbols.size() - 1, kNone});
    if (symbols.size() > 1) symbols[symbols.size() - 2].next = symbols.size() - 1;
    at += length;
  }
  struct Candidate {
    float score;
    std::size_t left, right, length;
  };
  // Highest score first; equal scores, leftmost first (sentencepiece's
  // SymbolPairComparator).
  const auto lower = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
  const std::string_view all(normalized);
  const auto consider = [&](std::size_t left, std::size_t right) {
    if (left == kNone || right == kNone) return;
    const std::size_t length = symbols[left].length + symbols[right].length;
    const std::optional<Token> id = piece(all.substr(symbols[left].start, length));
    if (id) queue.push({scores_[*id], left, right, length});
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) consider(i, i + 1);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // Stale once either side has merged since (lengths only grow; a merged
    // away symbol has length 0).
    if (left.length == 0 || right.length == 0 || left.length + right.length != c.length) continue;
    left.length = c.length;
    right.length = 0;
    left.next = right.next;
    if (right.next != kNone) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  for (std::size_t i = 0; i != kNone; i = symbols[i].next) {
    const std::string_view text_of = all.substr(symbols[i].start, symbols[i].length);
    if (const std::optional<Token> id = piece(text_of)) {
      out.push_back(*id);
    } else {
      for (const char b : text_of) out.push_back(byte_tokens_[static_cast<unsigned char>(b)]);
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<const Vocabulary> make_sentence_piece_vocabulary(VocabularyParts parts) {
  return std::make_shared<const SentencePieceVocabulary>(parts);
}

}  // namespace kvevict::vocab_detail
