// train_byte_pairs: learns a byte-level BPE vocabulary from a text (the
// one kvevict-small was trained with), merge by merge, most frequent pair
// first, ties to the pair seen first.
#include "kvevict/model/vocab/vocab.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "kvevict/core/errors.h"
#include "pretokenize.h"
#include "vocab_internal.h"

namespace kvevict {
namespace {

// Learns merges over the distinct pieces of a text, each weighted by how
// often it occurs, updating pair counts incrementally so that each merge
// costs the pieces it touches.
class MergeLearner {
 public:
  using Pair = std::pair<Token, Token>;

  void add_piece(std::vector<Token> symbols, std::int64_t count) {
    words_.push_back({std::move(symbols), count});
    count_pairs(words_.size() - 1, +1);
  }

  // The most frequent pair; ties go to the smaller left token id, then the
  // smaller right one (so the result depends on the text alone). Pairs for
  // which `allowed` is false are dropped.
  template <typename Allowed>
  std::optional<Pair> best(Allowed allowed) {
    while (!order_.empty()) {
      const auto [negative, left, right] = *order_.begin();
      if (allowed(left, right)) return Pair{left, right};
      order_.erase(order_.begin());
      counts_.erase({left, right});
    }
    return std::nullopt;
  }

  void merge(const Pair& pair, Token result) {
    const auto it = where_.find(pair);
    if (it == where_.end()) return;
    const std::set<std::size_t> words = std::move(it->second);
    where_.erase(it);
    for (const std::size_t w : words) {
      count_pairs(w, -1);
      std::vector<Token>& s = words_[w].symbols;
      std::vector<Token> merged;
      merged.reserve(s.size());
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == pair.first && s[i + 1] == pair.second) {
          merged.push_back(result);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s = std::move(merged);
      count_pairs(w, +1);
    }
    // The merged pair is gone everywhere; drop what remains of it.
    adjust(pair, -counts_[pair]);
  }

 private:
  struct Word {
    std::vector<Token> symbols;
    std::int64_t count;
  };

  void adjust(const Pair& pair, std::int64_t delta) {
    std::int64_t& count = counts_[pair];
    if (count > 0) order_.erase({-count, pair.first, pair.second});
    count += delta;
    if (count > 0) {
      order_.insert({-count, pair.first, pair.second});
    } else {
      counts_.erase(pair);
    }
  }

  void count_pairs(std::size_t w, int sign) {
    const Word& word = words_[w];
    for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const Pair pair{word.symbols[i], word.symbols[i + 1]};
      adjust(pair, sign * word.count);
      if (sign > 0) where_[pair].insert(w);
    }
  }

  std::vector<Word> words_;
  std::map<Pair, std::int64_t> counts_;
  std::set<std::tuple<std::int64_t, Token, Token>> order_;  // (-count, left, right)
  std::map<Pair, std::set<std::size_t>> where_;             // may list words that lost the pair
};

}  // namespace

std::shared_ptr<const Vocabulary> Vocabulary::train_byte_pairs(std::string_view text, std::uint32_t merges,
                                                               std::string_view pre, std::uint32_t size) {
  using namespace vocab_detail;
  const std::optional<PreKind> kind = PreTokenizer::kind_of(pre);
  if (!kind) {
    throw ParameterError(fmt::format("train_byte_pairs: pre-tokenizer '{}' is not one of {}", pre,
                                     PreTokenizer::supported_names()));
  }
  VocabularyParts parts;
  parts.source = "train_byte_pairs";
  parts.model = "gpt2";
  parts.pre = std::string(pre);
  parts.tokens = {"<s>", "</s>"};
  parts.token_types = {static_cast<std::int32_t>(TokenType::kControl), static_cast<std::int32_t>(TokenType::kControl)};
  constexpr Token kFirstByte = 2;
  for (int b = 0; b < 256; ++b) {
    parts.tokens.push_back(byte_level_spelling(std::string(1, static_cast<char>(b))));
    parts.token_types.push_back(static_cast<std::int32_t>(TokenType::kNormal));
  }
  parts.bos = 0;
  parts.eos = 1;
  parts.add_bos = true;

  // The distinct pieces, in first-seen order, with their counts.
  std::unordered_map<std::string_view, std::size_t> seen;
  std::vector<std::pair<std::string_view, std::int64_t>> pieces;
  for (const std::string_view piece : PreTokenizer(*kind).split(text)) {
    const auto [it, fresh] = seen.try_emplace(piece, pieces.size());
    if (fresh) pieces.emplace_back(piece, 0);
    ++pieces[it->second].second;
  }
  MergeLearner learner;
  for (const auto& [piece, count] : pieces) {
    std::vector<Token> symbols;
    symbols.reserve(piece.size());
    for (const char c : piece) symbols.push_back(kFirstByte + static_cast<unsigned char>(c));
    learner.add_piece(std::move(symbols), count);
  }
  std::unordered_map<std::string, Token> ids;
  for (std::size_t i = 0; i < parts.tokens.size(); ++i) ids.emplace(parts.tokens[i], static_cast<Token>(i));
  for (std::uint32_t m = 0; m < merges; ++m) {
    // A merge that would spell a special token is skipped: text must never
    // turn into one (none of the published expressions lets it happen).
    const auto best = learner.best([&](Token l, Token r) {
      const auto it = ids.find(parts.tokens[l] + parts.tokens[r]);
      return it == ids.end() || parts.token_types[it->second] != static_cast<std::int32_t>(TokenType::kControl);
    });
    if (!best) break;  // every piece is one token already
    const auto [l, r] = *best;
    std::string text_of = parts.tokens[l] + parts.tokens[r];
    // Two merges may spell the same token ("ab c", "a bc"): they share it.
    auto [it, fresh] = ids.try_emplace(text_of, static_cast<Token>(parts.tokens.size()));
    if (fresh) {
      parts.tokens.push_back(text_of);
      parts.token_types.push_back(static_cast<std::int32_t>(TokenType::kNormal));
    }
    parts.merges.emplace_back(parts.tokens[l], parts.tokens[r]);
    learner.merge(*best, it->second);
  }
  if (size != 0 && size < parts.tokens.size()) {
    throw ParameterError(fmt::format("train_byte_pairs: a vocabulary of {} tokens is smaller than the {} learned",
                                     size, parts.tokens.size()));
  }
  for (std::size_t i = parts.tokens.size(); i < size; ++i) {
    parts.tokens.push_back(fmt::format("<unused_{}>", i));
    parts.token_types.push_back(static_cast<std::int32_t>(TokenType::kUnused));
  }
  return build_vocabulary(std::move(parts));
}

}  // namespace kvevict
