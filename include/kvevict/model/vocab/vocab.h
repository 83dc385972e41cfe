// A model's vocabulary and tokenizer, from the model's own files (llama.cpp's
// llama-vocab, in kvevict's terms):
//   bytes  -- the byte-level kvevict-tiny: token = byte, no specials;
//   llama  -- SentencePiece-style BPE with scores (GGUF tokenizer.ggml.model
//             "llama"): spaces as U+2581, a dummy prefix, merges by best
//             score, byte fallback to <0xXX> tokens;
//   gpt2   -- byte-level BPE with ranked merges (GGUF "gpt2", or a
//             tokenizer.json with a BPE model): a pre-tokenizer splits the
//             text (gpt2, llama3 / llama-bpe, qwen2, smollm, default --
//             the published expressions, run by PCRE2), bytes map to
//             GPT-2's printable code points, the lowest-ranked pair merges.
// Special tokens (BOS/EOS) come from the file; text is never split on them
// (a "<s>" in a text is tokenized as text).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvevict {

class GgufFile;
class GgufWriter;

using Token = std::uint32_t;

class Vocabulary {
 public:
  enum class Kind { kBytes, kSentencePiece, kBytePairs };
  virtual ~Vocabulary() = default;

  // The byte vocabulary of kvevict-tiny (256 tokens).
  static std::shared_ptr<const Vocabulary> bytes();
  // From a GGUF file's tokenizer.ggml.* keys. Throws InputError naming the
  // file and the key for a missing or inconsistent key, or an unsupported
  // tokenizer model or pre-tokenizer (listing the supported ones).
  static std::shared_ptr<const Vocabulary> from_gguf(const GgufFile& file);
  // From a Hugging Face tokenizer.json (model.type "BPE"; byte-level, or
  // SentencePiece-style with byte_fallback), with the BOS/EOS tokens and
  // add_bos of tokenizer_config.json beside it when that file exists.
  static std::shared_ptr<const Vocabulary> from_tokenizer_json(const std::filesystem::path& file);
  // A byte-level BPE vocabulary learned from `text` (the most frequent pair
  // merged, `merges` times, within the pre-tokenizer's pieces): "<s>" (BOS,
  // added), "</s>" (EOS), the 256 byte tokens, then one token per merge. For
  // the tiny random models kvevict writes. `size` above the learned tokens
  // pads the table with "<unused_N>" tokens (GGUF's UNUSED type: no text
  // ever becomes one), so a random model can have a real model's embedding
  // rows; ParameterError when it is below them.
  static std::shared_ptr<const Vocabulary> train_byte_pairs(std::string_view text, std::uint32_t merges,
                                                            std::string_view pre = "llama-bpe",
                                                            std::uint32_t size = 0);

  virtual Kind kind() const noexcept = 0;
  // "bytes", "llama" or "gpt2" (GGUF's tokenizer.ggml.model names).
  virtual std::string_view model_name() const noexcept = 0;
  // The pre-tokenizer's name ("llama-bpe", "qwen2", ...), empty for bytes and llama.
  virtual std::string_view pre_name() const noexcept = 0;
  // One line for a row: "gpt2 BPE (pre-tokenizer llama-bpe), 49152 tokens".
  virtual std::string describe() const = 0;
  virtual std::uint32_t size() const noexcept = 0;
  virtual std::optional<Token> bos() const noexcept = 0;
  virtual std::optional<Token> eos() const noexcept = 0;
  // Whether a text starts with BOS (add_bos_token, or the model's default).
  virtual bool adds_bos() const noexcept = 0;

  // The tokens of `text` (bytes, UTF-8 or not), with BOS first when
  // adds_bos() and `with_bos`.
  virtual std::vector<Token> encode(std::string_view text, bool with_bos = true) const = 0;
  // The bytes token `t` stands for (a control token: empty; a byte token: its
  // byte; a SentencePiece piece: with U+2581 as a space). Throws InputError
  // for a token out of range.
  virtual std::string piece_bytes(Token t) const = 0;
  // The text of a token sequence (BOS/EOS dropped; a SentencePiece dummy
  // prefix's space removed at the start).
  virtual std::string decode(std::span<const Token> tokens) const = 0;

  // Writes the vocabulary's tokenizer.ggml.* keys (model, pre, tokens,
  // scores, token_type, merges, bos/eos ids, add_bos_token). Bytes
  // vocabularies write nothing.
  virtual void write_gguf(GgufWriter& writer) const = 0;
  // A tokenizer.json text for it (gpt2 kind only; others throw ContractError).
  virtual std::string tokenizer_json() const = 0;
};

// Opens whatever holds a model's vocabulary: a .gguf (the tokenizer.ggml.*
// keys; the file may hold no tensors), a tokenizer.json, or a model folder
// with a tokenizer.json. A .kvm model has the byte vocabulary.
std::shared_ptr<const Vocabulary> load_vocabulary(const std::filesystem::path& path);

// The bytes of the text each of `tokens` stands for (the denominators of
// bits per byte): piece_bytes()' sizes, less a SentencePiece tokenizer's
// dummy prefix, which is no byte of the text. They add up to
// decode(tokens).size().
std::vector<std::uint32_t> text_bytes_of(const Vocabulary& vocab, std::span<const Token> tokens);

}  // namespace kvevict
