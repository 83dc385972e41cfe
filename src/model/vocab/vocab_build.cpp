// A vocabulary's parts checked, one error per rule, and handed to the
// tokenizer its model names (gpt2: byte-level BPE; llama: SentencePiece).
#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "pretokenize.h"
#include "vocab_internal.h"

namespace kvevict::vocab_detail {

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

}  // namespace kvevict::vocab_detail
