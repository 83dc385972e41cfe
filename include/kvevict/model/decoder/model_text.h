// The text a model reads: a file's bytes, checked, and the tokens the
// model's own vocabulary (vocab.h) makes of them, with the bytes each token
// stands for (so that bits per byte compare across tokenizers) and the BOS a
// window starts with.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvevict/model/decoder/model.h"

namespace kvevict {

// A text as the model reads it: its tokens (without BOS), the bytes each
// stands for, and the BOS each window starts with (the vocabulary's, when
// it adds one).
struct TokenizedText {
  std::vector<Token> tokens;
  std::vector<std::uint32_t> bytes;  // per token
  std::optional<Token> bos;
  std::string tokenizer;  // Vocabulary::describe()
};
TokenizedText tokenize_text(const Model& model, std::span<const std::uint8_t> text);
// The same as one sequence to feed: BOS first (when the vocabulary adds
// one), then the text's tokens.
std::vector<Token> sequence_tokens(const Model& model, std::span<const std::uint8_t> text);

// A window of a text as perplexity reads it: `length` positions, the first
// the BOS when `bos`, the rest the text's tokens from `begin`. Shared by every
// engine that scores the same windows (kvevict's decoder, kvevict-llama,
// choose's plan), so that their rows compare window by window.
struct TextWindow {
  std::size_t begin = 0;
  std::uint32_t length = 0;
  bool bos = false;

  // The token at position i, and the bytes it stands for (0 for the BOS).
  Token token_at(const TokenizedText& t, std::uint32_t i) const {
    if (bos) return i == 0 ? *t.bos : t.tokens[begin + i - 1];
    return t.tokens[begin + i];
  }
  std::uint32_t bytes_at(const TokenizedText& t, std::uint32_t i) const {
    if (bos) return i == 0 ? 0 : t.bytes[begin + i - 1];
    return t.bytes[begin + i];
  }
};
// The text cut into windows of at most `context` positions: with a BOS, the
// BOS and context - 1 tokens each (every token predicted once); without, context
// tokens each. At most `max_windows` of them (0: all).
std::vector<TextWindow> text_windows(const TokenizedText& t, std::uint32_t context, std::uint32_t max_windows = 0);

// Reads a text file as bytes. Throws InputError for a missing or unreadable
// file, or one with fewer than 2 bytes (nothing to predict).
std::vector<std::uint8_t> read_text(const std::filesystem::path& file);

// The offset of the first byte that is not part of well-formed UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included), or
// nullopt for valid UTF-8. A tokenizer scores any bytes; callers warn that a
// text is not what a model of text was trained on.
std::optional<std::size_t> first_invalid_utf8(std::span<const std::uint8_t> text);

}  // namespace kvevict
