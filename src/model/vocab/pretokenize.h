// The pre-tokenizers of byte-level BPE vocabularies: the published regular
// expressions (model-files.md section 4.4), run by PCRE2 in UTF + UCP mode so
// \p{L}, \p{N} and \s are Unicode classes, as in the Python and Rust
// originals.
//
// Splitting follows llama.cpp's unicode_regex_split and Hugging Face's Split
// with behavior "Isolated": every match is a piece, and so is every stretch
// of text between matches (text no alternative matched is kept, never
// dropped). A pre-tokenizer with several expressions applies each to every
// piece of the one before.
//
// Texts need not be valid UTF-8. The expressions are compiled with
// PCRE2_MATCH_INVALID_UTF (PCRE2 10.34+): an invalid byte matches nothing, so
// a run of them falls between matches and becomes a piece of its own, which
// byte-level BPE then encodes byte by byte. Valid text around them splits
// exactly as it would alone.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvevict::vocab_detail {

// The pre-tokenizer families llama.cpp tells apart (llama_vocab_pre_type).
enum class PreKind { kGpt2, kLlama3, kQwen2, kSmollm, kDefault };

class PreTokenizer {
 public:
  // The family a GGUF tokenizer.ggml.pre name stands for; nullopt when
  // kvevict does not know the name.
  static std::optional<PreKind> kind_of(std::string_view name) noexcept;
  // "gpt-2, gpt2, llama3, ..." for error messages.
  static std::string supported_names();
  // The name kvevict writes for a family ("gpt-2", "llama-bpe", "qwen2",
  // "smollm", "default").
  static std::string_view canonical_name(PreKind kind) noexcept;
  // The published expressions of a family, in the order they apply.
  static const std::vector<std::string>& expressions(PreKind kind);
  // The family whose expressions these are (exact text; the GPT-2 expression
  // is also recognized with Hugging Face's trailing "|\s+", which splits no
  // differently because unmatched text is kept as pieces anyway).
  static std::optional<PreKind> kind_of_expressions(std::span<const std::string> expressions);

  explicit PreTokenizer(PreKind kind);
  PreKind kind() const noexcept { return kind_; }
  // The Llama-3 family emits a piece that is already a token whole, and
  // starts texts with BOS, unless the file says otherwise (llama.cpp).
  bool ignores_merges() const noexcept { return kind_ == PreKind::kLlama3; }
  bool adds_bos_by_default() const noexcept { return kind_ == PreKind::kLlama3; }

  // The pieces of `text`, in order; they concatenate back to `text`.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  PreKind kind_;
};

}  // namespace kvevict::vocab_detail
