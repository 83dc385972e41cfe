#include "kvevict/core/registry.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

// The catalogue: one line per policy. Each entry names a function
// `detail::<entry>_info()` defined in src/core/policies/<entry>.cpp.
#define KVEVICT_CATALOGUE(X) \
  X(scissorhands)            \
  X(h2o)                     \
  X(streaming_llm)           \
  X(sliding_window)          \
  X(tova)                    \
  X(snapkv)                  \
  X(pyramidkv)               \
  X(knorm)                   \
  X(keydiff)                 \
  X(expected_attention)

namespace detail {
#define KVEVICT_DECLARE(entry) const PolicyInfo& entry##_info();
KVEVICT_CATALOGUE(KVEVICT_DECLARE)
#undef KVEVICT_DECLARE
}  // namespace detail

std::span<const PolicyInfo* const> policies() {
#define KVEVICT_ENTRY(entry) &detail::entry##_info(),
  static const PolicyInfo* const catalogue[] = {KVEVICT_CATALOGUE(KVEVICT_ENTRY)};
#undef KVEVICT_ENTRY
  return catalogue;
}

namespace {
std::string known_names() {
  std::string names;
  for (const PolicyInfo* info : policies()) names += (names.empty() ? "" : ", ") + info->name;
  return names;
}

}  // namespace

const PolicyInfo& find_policy(std::string_view name) {
  std::vector<std::string> names;
  for (const PolicyInfo* info : policies()) {
    if (info->name == name) return *info;
    names.push_back(info->name);
  }
  const std::string near = nearest_name(name, names);
  throw ParameterError(fmt::format("unknown policy '{}'{} (known: {})", name,
                                   near.empty() ? "" : fmt::format(": did you mean '{}'?", near), known_names()));
}

std::unique_ptr<Policy> make_policy(std::string_view name, const ParamMap& params) {
  return find_policy(name).make(params);
}

ParamMap PolicyInfo::effective(const ParamMap& given) const {
  ParamMap out;
  for (const ParamInfo& p : params) out.emplace_back(p.name, p.default_value);
  for (const auto& [key, value] : given) set_param(out, key, value);
  return out;
}

bool PolicyInfo::has_param(std::string_view param_name) const {
  return std::any_of(params.begin(), params.end(), [&](const ParamInfo& p) { return p.name == param_name; });
}

const QueryInfo* PolicyInfo::find_query(std::string_view query_name) const {
  for (const QueryInfo& q : queries) {
    if (q.name == query_name) return &q;
  }
  return nullptr;
}

std::vector<std::string> policy_names(Signals available) {
  std::vector<std::string> out;
  for (const PolicyInfo* info : policies()) {
    if ((info->signals & ~available) == 0) out.push_back(info->name);
  }
  return out;
}

void check_signals_available(const PolicyInfo& info, Signals available, std::string_view source) {
  const Signals missing = info.signals & ~available;
  if (missing == 0) return;
  Signals first = 1;
  while ((missing & first) == 0) first <<= 1;
  throw ParameterError(fmt::format("{} reads the new token's {} ({}), which {} does not supply", info.name,
                                   signal_name(static_cast<Signal>(first)), signal_names(info.signals),
                                   source.empty() ? std::string_view("this source") : source));
}

std::vector<std::string> parse_policy_list(std::string_view text, Signals available, std::string_view source) {
  std::vector<std::string> out;
  if (text == "all") return policy_names(available);
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    if (item.empty()) {
      throw ParameterError(fmt::format("empty policy name in the list '{}'", text));
    }
    const PolicyInfo& info = find_policy(item);
    check_signals_available(info, available, source);
    out.emplace_back(info.name);
    start = comma + 1;
  }
  return out;
}

}  // namespace kvevict
