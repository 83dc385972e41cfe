// The text a model reads: a file's bytes, checked, and their tokens by the
// model's own vocabulary (model_text.h).
#include "kvevict/model/decoder/model_text.h"

#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

TokenizedText tokenize_text(const Model& model, std::span<const std::uint8_t> text) {
  const Vocabulary& vocab = model.vocabulary();
  TokenizedText t;
  t.tokenizer = vocab.describe();
  const std::string_view view(reinterpret_cast<const char*>(text.data()), text.size());
  t.tokens = vocab.encode(view, false);
  if (vocab.adds_bos()) t.bos = vocab.bos();
  for (const Token tok : t.tokens) {
    if (tok >= model.config().vocab) {
      throw InputError(fmt::format("the tokenizer gave token {}, outside the model's {} embeddings", tok,
                                   model.config().vocab));
    }
  }
  t.bytes = text_bytes_of(vocab, t.tokens);
  if (t.tokens.size() + (t.bos ? 1 : 0) < 2 && vocab.kind() == Vocabulary::Kind::kBytes) {
    throw InputError("the text has fewer than 2 bytes: nothing to predict");
  }
  if (t.tokens.size() + (t.bos ? 1 : 0) < 2) {
    throw InputError(fmt::format("the text makes {} token{}: nothing to predict", t.tokens.size(),
                                 t.tokens.size() == 1 ? "" : "s"));
  }
  return t;
}

std::vector<Token> sequence_tokens(const Model& model, std::span<const std::uint8_t> text) {
  TokenizedText t = tokenize_text(model, text);
  if (t.bos) t.tokens.insert(t.tokens.begin(), *t.bos);
  return std::move(t.tokens);
}

std::optional<std::size_t> first_invalid_utf8(std::span<const std::uint8_t> text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const std::uint8_t b = text[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    std::uint32_t low = 0x80, high = 0xBF;  // the second byte's range (Unicode's table 3-7)
    if (b >= 0xC2 && b <= 0xDF) {
      n = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 2;
      if (b == 0xE0) low = 0xA0;   // no overlong forms
      if (b == 0xED) high = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 3;
      if (b == 0xF0) low = 0x90;
      if (b == 0xF4) high = 0x8F;  // nothing past U+10FFFF
    } else {
      return i;
    }
    if (i + n >= text.size()) return i;  // cut short at the end
    if (text[i + 1] < low || text[i + 1] > high) return i;
    for (std::size_t k = 2; k <= n; ++k) {
      if (text[i + k] < 0x80 || text[i + k] > 0xBF) return i;
    }
    i += n + 1;
  }
  return std::nullopt;
}

std::vector<std::uint8_t> read_text(const std::filesystem::path& file) {
  const std::string name = file.string();
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    throw InputError(fmt::format("{}: is a folder; the text is one file (join a folder's files into one first)", name));
  }
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw InputError(fmt::format("{}: not a readable file (does it exist?)", name));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot be opened", name));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(fmt::format("{}: reading failed", name));
  if (bytes.size() < 2) {
    throw InputError(fmt::format("{}: has {} bytes; a text needs at least 2 (one to predict)", name,
                                 bytes.size()));
  }
  return bytes;
}

std::vector<TextWindow> text_windows(const TokenizedText& t, std::uint32_t context, std::uint32_t max_windows) {
  std::vector<TextWindow> out;
  const std::size_t n = t.tokens.size();
  const bool bos = t.bos.has_value();
  const std::size_t step = bos ? context - 1 : context;
  // With a BOS every token is predicted, the first by the BOS; without, a
  // window needs two tokens to predict one.
  for (std::size_t at = 0; bos ? at < n : at + 1 < n; at += step) {
    out.push_back({at, static_cast<std::uint32_t>((bos ? 1 : 0) + std::min(step, n - at)), bos});
    if (max_windows != 0 && out.size() == max_windows) break;
  }
  return out;
}

}  // namespace kvevict
