// Byte-level BPE (GGUF tokenizer.ggml.model "gpt2"; a Hugging Face BPE with
// the ByteLevel pre-tokenizer): the pre-tokenizer splits the text, every byte
// of a piece becomes its GPT-2 code point (one symbol each), and adjacent
// symbols merge by their merge's rank, lowest first, equal ranks leftmost
// first -- llama.cpp's llm_tokenizer_bpe and Hugging Face's BPE word merge,
// both of which give what GPT-2's encoder.py gives. Also train_byte_pairs,
// which learns such a vocabulary, and the tokenizer.json writer.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "pretokenize.h"
#include "vocab_internal.h"

namespace kvevict {
namespace vocab_detail {
namespace {

constexpr Token kNoToken = 0xFFFFFFFFU;

std::uint64_t pair_key(Token left, Token right) noexcept { return (std::uint64_t{left} << 32) | right; }

struct Merge {
  std::uint32_t rank;
  Token result;
};

class BytePairVocabulary final : public TableVocabulary {
 public:
  explicit BytePairVocabulary(VocabularyParts& parts)
      : TableVocabulary(parts), pre_(parts.pre), pretokenizer_(*PreTokenizer::kind_of(parts.pre)) {
    const PartNames& names = parts.names;
    ignore_merges_ = parts.ignore_merges.value_or(pretokenizer_.ignores_merges());
    add_bos_ = parts.add_bos.value_or(pretokenizer_.adds_bos_by_default());
    // Byte-level BPE promises to encode any byte: every byte's code point
    // must be a token.
    for (int b = 0; b < 256; ++b) {
      const std::string spelling = byte_level_spelling(std::string(1, static_cast<char>(b)));
      const std::optional<Token> id = find(spelling);
      if (!id) {
        throw InputError(fmt::format("{}: {}: no token for byte 0x{:02X} ('{}'): not a byte-level vocabulary",
                                     source_, names.tokens, b, spelling));
      }
      byte_tokens_[static_cast<std::size_t>(b)] = *id;
    }
    merges_.reserve(parts.merges.size());
    merge_of_.reserve(parts.merges.size());
    for (std::size_t rank = 0; rank < parts.merges.size(); ++rank) {
      const std::string& left = parts.merges[rank].first;
      const std::string& right = parts.merges[rank].second;
      const auto need = [&](const std::string& text, const char* what) {
        const std::optional<Token> id = find(text);
        if (!id) {
          throw InputError(fmt::format("{}: {}: merge {} ('{} {}'): its {} '{}' is not a token", source_,
                                       names.merges, rank, left, right, what, text));
        }
        return *id;
      };
      const Token l = need(left, "left part"), r = need(right, "right part"), result = need(left + right, "result");
      merges_.emplace_back(l, r);
      // A pair listed twice keeps its first (best) rank.
      merge_of_.try_emplace(pair_key(l, r), Merge{static_cast<std::uint32_t>(rank), result});
    }
  }

  Kind kind() const noexcept override { return Kind::kBytePairs; }
  std::string_view model_name() const noexcept override { return "gpt2"; }
  std::string_view pre_name() const noexcept override { return pre_; }
  std::string describe() const override {
    return fmt::format("gpt2 BPE (pre-tokenizer {}), {} tokens", pre_, tokens_.size());
  }

  std::vector<Token> encode(std::string_view text, bool with_bos) const override {
    std::vector<Token> out;
    out.reserve(text.size() / 3 + 2);
    if (with_bos && adds_bos()) out.push_back(*bos_);
    for (const std::string_view piece : pretokenizer_.split(text)) encode_piece(piece, out);
    return out;
  }

  std::string piece_bytes(Token t) const override {
    check_token(t);
    switch (types_[t]) {
      case TokenType::kControl: return {};
      // Added tokens are stored as their text, not in byte-level spelling.
      case TokenType::kUserDefined: return tokens_[t];
      default: return byte_level_bytes(tokens_[t]);
    }
  }

  std::string decode(std::span<const Token> tokens) const override {
    std::string out;
    for (const Token t : tokens) out += piece_bytes(t);
    return out;
  }

  void write_gguf(GgufWriter& writer) const override {
    writer.set_string("tokenizer.ggml.model", "gpt2");
    writer.set_string("tokenizer.ggml.pre", pre_);
    write_table(writer);
    std::vector<std::string> merges;
    merges.reserve(merges_.size());
    for (const auto& [l, r] : merges_) merges.push_back(tokens_[l] + " " + tokens_[r]);
    writer.set_strings("tokenizer.ggml.merges", std::move(merges));
    if (bos_) writer.set_u32("tokenizer.ggml.bos_token_id", *bos_);
    if (eos_) writer.set_u32("tokenizer.ggml.eos_token_id", *eos_);
    writer.set_bool("tokenizer.ggml.add_bos_token", add_bos_);
  }

  std::string tokenizer_json() const override;

 private:
  void encode_piece(std::string_view piece, std::vector<Token>& out) const;

  std::string pre_;
  PreTokenizer pretokenizer_;
  bool ignore_merges_ = false;
  std::array<Token, 256> byte_tokens_{};
  std::vector<std::pair<Token, Token>> merges_;  // by rank
  std::unordered_map<std::uint64_t, Merge> merge_of_;
};

void BytePairVocabulary::encode_piece(std::string_view piece, std::vector<Token>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_ && piece.size() > 1) {
    // A piece that is a token is that token (never a control token: text is
    // not split on specials).
    const std::optional<Token> whole = find(byte_level_spelling(piece));
    if (whole && types_[*whole] != TokenType::kControl) {
      out.push_back(*whole);
      return;
    }
  }
  struct Symbol {
    Token id;
    std::size_t prev, next;  // kNone at the ends
  };
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<Symbol> symbols(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) {
    symbols[i] = {byte_tokens_[static_cast<unsigned char>(piece[i])], i == 0 ? kNone : i - 1,
                  i + 1 == piece.size() ? kNone : i + 1};
  }
  struct Candidate {
    std::uint32_t rank;
    std::size_t left, right;
    Token left_id, right_id, result;
  };
  // Lowest rank first; equal ranks, leftmost first.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto consider = [&](std::size_t left, std::size_t right) {
    if (left == kNone || right == kNone) return;
    const auto it = merge_of_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it == merge_of_.end()) return;
    queue.push({it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.result});
  };
  for (std::size_t i = 0; i + 1 < piece.size(); ++i) consider(i, i + 1);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // A candidate is stale once either symbol has merged since it was made
    // (a symbol's token only ever grows, and a merged-away one is kNoToken).
    if (left.id != c.left_id || right.id != c.right_id || left.next != c.right) continue;
    left.id = c.result;
    right.id = kNoToken;
    left.next = right.next;
    if (right.next != kNone) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  for (std::size_t i = 0; i != kNone; i = symbols[i].next) out.push_back(symbols[i].id);
}

nlohmann::ordered_json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

nlohmann::ordered_json split(const std::string& expression) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", expression}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

// The pre_tokenizer object Hugging Face's converters write for each family
// (vocab_json.cpp reads these forms back).
nlohmann::ordered_json pre_tokenizer_json(PreKind kind) {
  const std::vector<std::string>& expressions = PreTokenizer::expressions(kind);
  switch (kind) {
    case PreKind::kGpt2: return byte_level(true);
    case PreKind::kSmollm:
      return {{"type", "Sequence"},
              {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
    default: {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const std::string& e : expressions) list.push_back(split(e));
      list.push_back(byte_level(false));
      return {{"type", "Sequence"}, {"pretokenizers", std::move(list)}};
    }
  }
}

std::string BytePairVocabulary::tokenizer_json() const {
  using json = nlohmann::ordered_json;
  json added = json::array();
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (types_[i] != TokenType::kControl && types_[i] != TokenType::kUserDefined) continue;
    added.push_back({{"id", i},
                     {"content", tokens_[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", types_[i] == TokenType::kControl}});
  }
  json post = nullptr;
  if (adds_bos()) {
    const std::string& bos = tokens_[*bos_];
    post = {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {*bos_}}, {"tokens", {bos}}}}}}};
  }
  json vocab = json::object();
  for (std::size_t i = 0; i < tokens_.size(); ++i) vocab[tokens_[i]] = i;
  json merges = json::array();
  for (const auto& [l, r] : merges_) merges.push_back(tokens_[l] + " " + tokens_[r]);
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges_},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  json out = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", std::move(added)},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre_tokenizer_json(pretokenizer_.kind())},
              {"post_processor", std::move(post)},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
              {"model", std::move(model)}};
  return out.dump(2) + "\n";
}

}  // namespace

std::shared_ptr<const Vocabulary> make_byte_pair_vocabulary(VocabularyParts parts) {
  return std::make_shared<const BytePairVocabulary>(parts);
}

}  // namespace vocab_detail

}  // namespace kvevict
