#include "kvevict/core/params.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

std::int64_t parse_integer(std::string_view text, std::string_view what) {
  if (text.empty()) throw ParameterError(fmt::format("{}: expected an integer, got nothing", what));
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (*begin == '+') ++begin;  // from_chars refuses a leading '+', users write it
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range) {
    throw ParameterError(fmt::format("{}: '{}' is out of range for a 64-bit integer", what, text));
  }
  if (ec != std::errc() || ptr != end || begin == end) {
    throw ParameterError(fmt::format("{}: '{}' is not an integer", what, text));
  }
  return value;
}

std::vector<std::string> split_list(std::string_view text, std::string_view what) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    out.emplace_back(text.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (out.back().empty()) throw ParameterError(fmt::format("{}: empty item in '{}'", what, text));
    if (comma == std::string_view::npos) return out;
    begin = comma + 1;
  }
}

std::pair<std::string, std::int64_t> parse_assignment(std::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    throw ParameterError(fmt::format("'{}' is not KEY=VALUE (no '=')", text));
  }
  const std::string_view key = text.substr(0, eq);
  if (key.empty()) throw ParameterError(fmt::format("'{}' has no key before '='", text));
  return {std::string(key), parse_integer(text.substr(eq + 1), key)};
}

ParamMap parse_assignments(std::span<const std::string> items) {
  ParamMap params;
  for (const std::string& item : items) {
    const auto [key, value] = parse_assignment(item);
    set_param(params, key, value);
  }
  return params;
}

std::vector<std::int64_t> parse_integer_list(std::string_view text, std::string_view what) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    try {
      out.push_back(parse_integer(item, what));
    } catch (const ParameterError&) {
      throw ParameterError(fmt::format("{}: value {} of '{}' ('{}') is not an integer", what,
                                       out.size() + 1, text, item));
    }
    start = comma + 1;
  }
  return out;
}

void set_param(ParamMap& params, std::string_view key, std::int64_t value) {
  for (auto& [k, v] : params) {
    if (k == key) {
      v = value;
      return;
    }
  }
  params.emplace_back(std::string(key), value);
}

namespace {

char lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Optimal string alignment distance (Levenshtein with adjacent swaps, each
// one edit), ignoring case: "lsit" is one edit from "list", "H2O" none from "h2o".
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}
}  // namespace

std::string nearest_name(std::string_view given, std::span<const std::string> candidates) {
  // A typo, not another word: at most two edits, and fewer than half the
  // longer name's letters ("lru" is three from "h2o": no suggestion).
  std::string best;
  std::size_t best_distance = 3;
  for (const std::string& c : candidates) {
    const std::size_t dist = edit_distance(given, c);
    if (dist < best_distance && 2 * dist < std::max(given.size(), c.size())) {
      best = c;
      best_distance = dist;
    }
  }
  return best;
}

}  // namespace kvevict
