// Hugging Face tokenizer.json (the `tokenizers` library's format), model type
// "BPE" only, in the two forms llama-family checkpoints ship:
//
//   byte-level  -- the ByteLevel pre-tokenizer (with use_regex: GPT-2's
//                  expression), or Split expressions followed by ByteLevel,
//                  or Digits + ByteLevel; the expressions must be one of the
//                  published families (pretokenize.h), which names the pre;
//   SentencePiece-style -- byte_fallback, spaces replaced by U+2581 (the
//                  normalizer Replace " " -> "▁", optionally after Prepend
//                  "▁"; or the Metaspace pre-tokenizer without splitting),
//                  no other pre-tokenizer. This becomes the llama kind with
//                  score -rank for each merge's result: SentencePiece's
//                  highest-score-first then merges exactly in merge order.
//
// Special tokens, as Hugging Face adds them: the post_processor's single
// template, when it begins with a special token, adds that token as BOS;
// tokenizer_config.json beside the file, when present, gives bos_token and
// eos_token (a string or {"content": ...}), and its add_bos_token, when
// given, overrides the template. With neither a template nor the setting,
// BOS is added only for the SentencePiece kind (as sentencepiece does). A
// BOS not named otherwise is an added token spelled <s>, <|begin_of_text|>,
// <|startoftext|> or <|endoftext|>; EOS one spelled </s>, <|end_of_text|> or
// <|endoftext|>.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "kvevict/core/errors.h"
#include "kvevict/model/vocab/vocab.h"
#include "pretokenize.h"
#include "vocab_internal.h"

namespace kvevict {
namespace {

using json = nlohmann::json;
using vocab_detail::PreKind;
using vocab_detail::PreTokenizer;
using vocab_detail::TokenType;
using vocab_detail::VocabularyParts;

constexpr std::string_view kSpace = "\xE2\x96\x81";

class JsonReader {
 public:
  explicit JsonReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void unsupported(const std::string& what) const {
    throw InputError(fmt::format("{}: {}", file_, what));
  }

  json parse(const std::filesystem::path& path) const {
    std::ifstream in(path, std::ios::binary);
    if (!in) unsupported("cannot be opened (does it exist?)");
    std::stringstream text;
    text << in.rdbuf();
    try {
      return json::parse(text.str());
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
    }
  }

  // The regular expressions a byte-level pre_tokenizer stands for, in order.
  void expressions_of(const json& pre, std::vector<std::string>& out, bool& byte_level) const {
    const std::string type = pre.value("type", "");
    if (type == "Sequence") {
      for (const json& p : pre.at("pretokenizers")) expressions_of(p, out, byte_level);
    } else if (type == "ByteLevel") {
      if (pre.value("add_prefix_space", false)) unsupported("pre_tokenizer: ByteLevel with add_prefix_space is not supported");
      byte_level = true;
      if (pre.value("use_regex", true)) out.push_back(PreTokenizer::expressions(PreKind::kGpt2).front());
    } else if (type == "Split") {
      const json& pattern = pre.at("pattern");
      if (!pattern.contains("Regex") || pre.value("behavior", "") != "Isolated" || pre.value("invert", false)) {
        unsupported("pre_tokenizer: only Split with a Regex pattern, behavior Isolated, not inverted, is supported");
      }
      out.push_back(pattern.at("Regex").get<std::string>());
    } else if (type == "Digits") {
      if (!pre.value("individual_digits", false)) unsupported("pre_tokenizer: Digits without individual_digits is not supported");
      out.push_back(PreTokenizer::expressions(PreKind::kSmollm).front());
    } else {
      unsupported(fmt::format("pre_tokenizer: type '{}' is not supported for byte-level BPE", type));
    }
  }

  // Whether the normalizer / pre-tokenizer pair is SentencePiece's space
  // handling; sets add_space_prefix.
  bool sentence_piece_spaces(const json& normalizer, const json& pre, bool& prefix) const {
    std::vector<json> steps;
    if (normalizer.is_object()) {
      if (normalizer.value("type", "") == "Sequence") {
        for (const json& n : normalizer.at("normalizers")) steps.push_back(n);
      } else {
        steps.push_back(normalizer);
      }
    }
    bool replaced = false;
    prefix = false;
    for (const json& n : steps) {
      const std::string type = n.value("type", "");
      if (type == "Prepend" && n.value("prepend", "") == kSpace && !replaced) {
        prefix = true;
      } else if (type == "Replace" && n.value("content", "") == kSpace && n.contains("pattern") &&
                 n.at("pattern").value("String", "") == " ") {
        replaced = true;
      } else {
        unsupported(fmt::format("normalizer: '{}' is not supported for a SentencePiece-style BPE", type));
      }
    }
    if (pre.is_object()) {
      if (replaced || pre.value("type", "") != "Metaspace" || pre.value("split", true) ||
          pre.value("replacement", "") != kSpace) {
        unsupported("pre_tokenizer: only Metaspace with split false is supported for a SentencePiece-style BPE");
      }
      const std::string scheme = pre.value("prepend_scheme", "always");
      prefix = scheme != "never";
      replaced = true;
    }
    return replaced;
  }

  std::optional<Token> token_named(const VocabularyParts& parts, const std::string& text) const {
    for (std::size_t i = parts.tokens.size(); i-- > 0;) {
      if (parts.tokens[i] == text) return static_cast<Token>(i);
    }
    return std::nullopt;
  }

  std::string file_;
};

std::optional<std::string> special_text(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return std::nullopt;
}

// The table: model.vocab, then added_tokens (which may extend it); the
// texts of the special added tokens go to `specials`.
void read_table(const json& root, const json& model, bool byte_fallback, JsonReader& reader, VocabularyParts& parts,
                std::vector<std::string>& specials) {
  std::vector<std::optional<std::string>> texts;
  std::vector<std::int32_t> types;
  const auto place = [&](std::size_t id, const std::string& text, TokenType t, const char* where) {
    if (id > (std::size_t{1} << 31)) reader.unsupported(fmt::format("{}: id {} is too large", where, id));
    if (id >= texts.size()) {
      texts.resize(id + 1);
      types.resize(id + 1, static_cast<std::int32_t>(TokenType::kNormal));
    }
    if (texts[id] && *texts[id] != text) {
      reader.unsupported(fmt::format("{}: id {} is both '{}' and '{}'", where, id, *texts[id], text));
    }
    texts[id] = text;
    types[id] = static_cast<std::int32_t>(t);
  };
  const json& vocab = model.at("vocab");
  if (!vocab.is_object()) reader.unsupported("model.vocab: not an object of token -> id");
  for (const auto& [text, id] : vocab.items()) {
    const bool byte = byte_fallback && text.size() == 6 && text.starts_with("<0x") && text.back() == '>';
    place(id.get<std::size_t>(), text, byte ? TokenType::kByte : TokenType::kNormal, "model.vocab");
  }
  if (root.contains("added_tokens")) {
    for (const json& added : root.at("added_tokens")) {
      const std::string text = added.at("content").get<std::string>();
      const bool special = added.value("special", false);
      place(added.at("id").get<std::size_t>(), text, special ? TokenType::kControl : TokenType::kUserDefined,
            "added_tokens");
      if (special) specials.push_back(text);
    }
  }
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (!texts[i]) reader.unsupported(fmt::format("model.vocab: no token has id {} (ids must run 0 ... {})", i, texts.size() - 1));
    parts.tokens.push_back(*texts[i]);
  }
  parts.token_types = std::move(types);
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    parts.unk = reader.token_named(parts, model.at("unk_token").get<std::string>());
    if (parts.unk) parts.token_types[*parts.unk] = static_cast<std::int32_t>(TokenType::kUnknown);
  }

}

// model.merges, each "left right" or [left, right], by rank.
std::vector<std::pair<std::string, std::string>> read_merges(const json& model, JsonReader& reader) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const json& merge : model.at("merges")) {
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const std::size_t space = text.size() > 1 ? text.find(' ', 1) : std::string::npos;
      if (space == std::string::npos) reader.unsupported(fmt::format("model.merges: '{}' is not 'left right'", text));
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2) {
      merges.emplace_back(merge.at(0).get<std::string>(), merge.at(1).get<std::string>());
    } else {
      reader.unsupported("model.merges: a merge is neither \"left right\" nor [left, right]");
    }
  }
  return merges;
}

// Which tokenizer the file describes: a byte-level BPE (gpt2) or a
// SentencePiece-style one (llama, its merges turned into scores).
void read_kind(const json& root, const json& model, bool byte_fallback, JsonReader& reader, VocabularyParts& parts,
               std::vector<std::pair<std::string, std::string>> merges) {
  const json null;
  const json& normalizer = root.contains("normalizer") ? root.at("normalizer") : null;
  const json& pre = root.contains("pre_tokenizer") ? root.at("pre_tokenizer") : null;
  std::vector<std::string> expressions;
  bool byte_level = false;
  bool prefix = false;
  if (!byte_fallback && pre.is_object()) {
    if (!normalizer.is_null() && normalizer.value("type", "") != "NFC") {
      // NFC (Qwen2's) is accepted and not applied, as llama.cpp does.
      reader.unsupported(fmt::format("normalizer: '{}' is not supported for byte-level BPE",
                                     normalizer.value("type", "?")));
    }
    reader.expressions_of(pre, expressions, byte_level);
    if (!byte_level) reader.unsupported("pre_tokenizer: no ByteLevel step, and byte_fallback is off: not a byte-level BPE");
    const std::optional<PreKind> kind = PreTokenizer::kind_of_expressions(expressions);
    if (!kind) {
      reader.unsupported("pre_tokenizer: its expressions are none of the pre-tokenizers kvevict knows (" +
                         PreTokenizer::supported_names() + ")");
    }
    parts.model = "gpt2";
    parts.pre = std::string(PreTokenizer::canonical_name(*kind));
    parts.ignore_merges = model.value("ignore_merges", false);
    parts.merges = std::move(merges);
  } else if (byte_fallback && reader.sentence_piece_spaces(normalizer, pre, prefix)) {
    parts.model = "llama";
    parts.add_space_prefix = prefix;
    // sentencepiece merges the best-scored piece first; with score -rank
    // for each merge's result that is the lowest-ranked merge first.
    // Tokens no merge makes keep the lowest score of all (single
    // characters, which are never a merge's result, are not affected).
    parts.scores.assign(parts.tokens.size(), -static_cast<float>(merges.size()));
    std::unordered_map<std::string, Token> ids;
    for (std::size_t i = 0; i < parts.tokens.size(); ++i) ids[parts.tokens[i]] = static_cast<Token>(i);
    for (std::size_t rank = merges.size(); rank-- > 0;) {
      const auto it = ids.find(merges[rank].first + merges[rank].second);
      if (it == ids.end()) {
        reader.unsupported(fmt::format("model.merges: merge {} ('{} {}'): its result is not a token", rank,
                                       merges[rank].first, merges[rank].second));
      }
      parts.scores[it->second] = -static_cast<float>(rank);
    }
  } else {
    reader.unsupported(
        "neither a byte-level BPE (ByteLevel pre-tokenizer) nor a SentencePiece-style one (byte_fallback with "
        "spaces as U+2581) -- kvevict reads those two");
  }
}

// BOS, EOS and whether BOS is added: tokenizer_config.json beside the file,
// the post-processor's template, then the usual special texts.
void read_specials(const std::filesystem::path& file, const json& root, JsonReader& reader, VocabularyParts& parts,
                   const std::vector<std::string>& specials) {
  const std::string name = file.string();
  // Special tokens. What Hugging Face adds in front of a text is the
  // post-processor's TemplateProcessing; tokenizer_config.json's
  // add_bos_token, where it is given, overrides it (LlamaTokenizerFast
  // rebuilds the template from it). Llama-3 names bos_token there but
  // leaves add_bos_token out: its template adds <|begin_of_text|>.
  std::optional<bool> add_bos_setting;
  const std::filesystem::path config_path = file.parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    JsonReader config_reader(config_path.string());
    const json config = config_reader.parse(config_path);
    const auto id_of = [&](const char* key) -> std::optional<Token> {
      const std::optional<std::string> text = special_text(config, key);
      if (!text) return std::nullopt;
      const std::optional<Token> id = reader.token_named(parts, *text);
      if (!id) config_reader.unsupported(fmt::format("{}: '{}' is not a token of {}", key, *text, name));
      return id;
    };
    parts.bos = id_of("bos_token");
    parts.eos = id_of("eos_token");
    if (config.contains("add_bos_token") && config.at("add_bos_token").is_boolean()) {
      add_bos_setting = config.at("add_bos_token").get<bool>();
    }
  }
  bool has_template = false;
  std::optional<Token> template_bos;
  if (root.contains("post_processor") && root.at("post_processor").is_object()) {
    // TemplateProcessing, alone or in a Sequence: a single template that
    // begins with a special token adds it as BOS.
    std::vector<json> processors{root.at("post_processor")};
    if (processors.front().value("type", "") == "Sequence") processors = root.at("post_processor").at("processors").get<std::vector<json>>();
    for (const json& p : processors) {
      if (p.value("type", "") != "TemplateProcessing" || !p.contains("single") || p.at("single").empty()) continue;
      has_template = true;
      const json& first = p.at("single").at(0);
      if (!first.contains("SpecialToken")) continue;
      const std::string id = first.at("SpecialToken").at("id").get<std::string>();
      template_bos = reader.token_named(parts, id);
      if (!template_bos) reader.unsupported(fmt::format("post_processor: its template adds '{}', not a token of {}", id, name));
    }
  }
  if (template_bos && (!add_bos_setting || *add_bos_setting)) parts.bos = template_bos;
  const auto first_of = [&](std::initializer_list<const char*> candidates) -> std::optional<Token> {
    for (const char* c : candidates) {
      if (std::find(specials.begin(), specials.end(), c) != specials.end()) return reader.token_named(parts, c);
    }
    return std::nullopt;
  };
  if (!parts.bos) parts.bos = first_of({"<s>", "<|begin_of_text|>", "<|startoftext|>", "<|endoftext|>"});
  if (!parts.eos) parts.eos = first_of({"</s>", "<|end_of_text|>", "<|endoftext|>"});
  if (add_bos_setting) {
    parts.add_bos = add_bos_setting;
  } else if (has_template) {
    parts.add_bos = template_bos.has_value();
  } else {
    parts.add_bos = parts.model == "llama";
  }
}

}  // namespace

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer_json(const std::filesystem::path& file) {
  const std::string name = file.string();
  JsonReader reader(name);
  const json root = reader.parse(file);
  VocabularyParts parts;
  parts.source = name;
  parts.names.model = "model.type";
  parts.names.pre = "pre_tokenizer";
  parts.names.tokens = "model.vocab";
  parts.names.token_type = "added_tokens";
  parts.names.merges = "model.merges";
  parts.names.bos = "bos_token";
  parts.names.eos = "eos_token";
  parts.names.unk = "model.unk_token";
  try {
    if (!root.is_object() || !root.contains("model")) reader.unsupported("not a tokenizer.json (no \"model\")");
    const json& model = root.at("model");
    const std::string type = model.value("type", "BPE");  // older files leave BPE's type out
    if (type != "BPE") reader.unsupported(fmt::format("model.type '{}' is not supported (kvevict reads BPE)", type));
    if (!model.value("dropout", json()).is_null() && model.at("dropout").get<double>() != 0.0) {
      reader.unsupported("model.dropout: BPE dropout is not supported");
    }
    const bool byte_fallback = model.value("byte_fallback", false);
    std::vector<std::string> specials;
    read_table(root, model, byte_fallback, reader, parts, specials);
    read_kind(root, model, byte_fallback, reader, parts, read_merges(model, reader));
    read_specials(file, root, reader, parts, specials);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not a tokenizer.json kvevict reads ({})", name, e.what()));
  }
  return vocab_detail::build_vocabulary(std::move(parts));
}

}  // namespace kvevict
