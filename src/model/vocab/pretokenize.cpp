#include "pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <array>
#include <memory>

#include "kvevict/core/errors.h"

namespace kvevict::vocab_detail {
namespace {

// model-files.md 4.4, as published (the originals' (?i:...) kept: PCRE2 runs it).
const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kDigits = R"(\p{N})";

struct Named {
  std::string_view name;
  PreKind kind;
};
// The names llama.cpp maps to the families kvevict runs (llama-vocab.cpp).
constexpr std::array kNames{
    Named{"gpt-2", PreKind::kGpt2},        Named{"gpt2", PreKind::kGpt2},
    Named{"llama3", PreKind::kLlama3},     Named{"llama-v3", PreKind::kLlama3},
    Named{"llama-bpe", PreKind::kLlama3},  Named{"qwen2", PreKind::kQwen2},
    Named{"smollm", PreKind::kSmollm},     Named{"default", PreKind::kDefault},
};

std::size_t index_of(PreKind kind) noexcept { return static_cast<std::size_t>(kind); }

const std::array<std::vector<std::string>, 5>& all_expressions() {
  static const std::array<std::vector<std::string>, 5> table{{
      {kGpt2},
      {kLlama3},
      {kQwen2},
      // SMOLLM (StarCoder's): every digit on its own first, then GPT-2's.
      {kDigits, kGpt2},
      // llama.cpp's DEFAULT: four expressions in sequence.
      {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"},
  }};
  return table;
}

struct CodeDeleter {
  void operator()(pcre2_code* code) const noexcept { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const noexcept { pcre2_match_data_free(data); }
};
using Code = std::unique_ptr<pcre2_code, CodeDeleter>;
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  if (pcre2_get_error_message(code, buffer.data(), buffer.size()) < 0) return fmt::format("PCRE2 error {}", code);
  return std::string(reinterpret_cast<const char*>(buffer.data()));
}

Code compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF implies UTF; UCP makes \s, \d, \w and POSIX classes
  // Unicode-aware like the Python/Rust regex engines the patterns come from.
  Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr));
  if (!code) {
    throw ContractError(fmt::format("pre-tokenizer expression '{}' does not compile at {}: {}", pattern, offset,
                                    pcre2_message(error)));
  }
  // JIT where the platform has it: the interpreter gives the same matches.
  (void)pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
  return code;
}

// Every family's expressions compiled once, on first use (thread-safe static
// initialization); pcre2_code is read-only while matching.
const std::array<std::vector<Code>, 5>& compiled() {
  static const std::array<std::vector<Code>, 5> table = [] {
    std::array<std::vector<Code>, 5> out;
    for (std::size_t k = 0; k < out.size(); ++k) {
      for (const std::string& pattern : all_expressions()[k]) out[k].push_back(compile(pattern));
    }
    return out;
  }();
  return table;
}

// Length of the UTF-8 sequence starting at text[at] when it is valid, else 1
// (so an invalid byte is stepped over on its own).
std::size_t char_length(std::string_view text, std::size_t at) noexcept {
  const auto lead = static_cast<unsigned char>(text[at]);
  std::size_t n = 1;
  if (lead >= 0xC2 && lead <= 0xDF) n = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) n = 3;
  else if (lead >= 0xF0 && lead <= 0xF4) n = 4;
  if (n == 1 || at + n > text.size()) return 1;
  for (std::size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(text[at + i]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

// Splits one piece with one expression, keeping unmatched stretches.
void split_with(const pcre2_code* code, pcre2_match_data* data, std::string_view text,
                std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap = 0;  // start of the text not yet emitted
  std::size_t at = 0;   // where the next match is looked for
  while (at < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), at, 0, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw InputError(fmt::format("pre-tokenizer: matching failed: {}", pcre2_message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const std::size_t start = ovector[0], end = ovector[1];
    if (end <= start) {
      // None of the published expressions matches empty text; should one
      // ever, step one character on and leave it to the gap.
      at = start + char_length(text, start);
      continue;
    }
    if (start > gap) out.push_back(text.substr(gap, start - gap));
    out.push_back(text.substr(start, end - start));
    gap = at = end;
  }
  if (gap < text.size()) out.push_back(text.substr(gap));
}

}  // namespace

std::optional<PreKind> PreTokenizer::kind_of(std::string_view name) noexcept {
  for (const Named& n : kNames) {
    if (n.name == name) return n.kind;
  }
  return std::nullopt;
}

std::string PreTokenizer::supported_names() {
  std::string out;
  for (const Named& n : kNames) {
    if (!out.empty()) out += ", ";
    out += n.name;
  }
  return out;
}

std::string_view PreTokenizer::canonical_name(PreKind kind) noexcept {
  switch (kind) {
    case PreKind::kGpt2: return "gpt-2";
    case PreKind::kLlama3: return "llama-bpe";
    case PreKind::kQwen2: return "qwen2";
    case PreKind::kSmollm: return "smollm";
    case PreKind::kDefault: return "default";
  }
  return "default";
}

const std::vector<std::string>& PreTokenizer::expressions(PreKind kind) { return all_expressions()[index_of(kind)]; }

std::optional<PreKind> PreTokenizer::kind_of_expressions(std::span<const std::string> given) {
  const std::string hf_gpt2 = kGpt2 + R"(|\s+)";
  for (const PreKind kind : {PreKind::kGpt2, PreKind::kLlama3, PreKind::kQwen2, PreKind::kSmollm, PreKind::kDefault}) {
    const std::vector<std::string>& want = expressions(kind);
    if (want.size() != given.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < want.size() && same; ++i) {
      same = given[i] == want[i] || (want[i] == kGpt2 && given[i] == hf_gpt2);
    }
    if (same) return kind;
  }
  return std::nullopt;
}

PreTokenizer::PreTokenizer(PreKind kind) : kind_(kind) { (void)compiled(); }

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  for (const Code& code : compiled()[index_of(kind_)]) {
    const MatchData data(pcre2_match_data_create_from_pattern(code.get(), nullptr));
    if (!data) throw std::bad_alloc();
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (const std::string_view piece : pieces) split_with(code.get(), data.get(), piece, next);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace kvevict::vocab_detail
