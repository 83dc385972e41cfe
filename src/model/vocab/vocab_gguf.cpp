// A vocabulary from a GGUF file's tokenizer.ggml.* keys, as llama.cpp reads them.
#include "kvevict/model/vocab/vocab.h"

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "vocab_internal.h"

namespace kvevict {

using vocab_detail::fail;
using vocab_detail::VocabularyParts;

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

}  // namespace kvevict
