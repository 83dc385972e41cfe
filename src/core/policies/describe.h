// Builds a policy's registry entry from its typed parameter struct, so the
// names, defaults and factory cannot drift apart: defaults come from the
// struct's own initialisers, and every rule is checked by the constructor.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict::detail {

template <class Params>
struct Field {
  const char* name;  // camelCase interchange name
  std::int64_t Params::*member;
  const char* help;
};

// A query with no argument (`effectiveBudget`) or one position (`votesOf`).
template <class P, class Fn>
QueryInfo query0(const char* name, Fn fn) {
  return QueryInfo{name, 0, [fn](const Policy& p, std::span<const std::int64_t>) {
                     return static_cast<double>(fn(static_cast<const P&>(p)));
                   }};
}
template <class P, class Fn>
QueryInfo query1(const char* name, Fn fn) {
  return QueryInfo{name, 1, [fn](const Policy& p, std::span<const std::int64_t> args) {
                     return static_cast<double>(fn(static_cast<const P&>(p), args[0]));
                   }};
}

template <class P, class Params>
PolicyInfo describe(const char* name, const char* title, const char* summary,
                    std::vector<Field<Params>> fields, std::vector<QueryInfo> queries) {
  PolicyInfo info;
  info.name = name;
  info.title = title;
  info.summary = summary;
  const Params defaults{};
  for (const auto& f : fields) info.params.push_back({f.name, defaults.*(f.member), f.help});
  info.queries = std::move(queries);
  // The signals a policy reads: its class's kSignals, or the weights.
  if constexpr (requires { P::kSignals; }) info.signals = P::kSignals;
  std::string policy_title = title;
  info.make = [fields, policy_title](const ParamMap& given) -> std::unique_ptr<Policy> {
    Params params{};
    for (const auto& [key, value] : given) {
      bool found = false;
      for (const auto& f : fields) {
        if (key == f.name) {
          params.*(f.member) = value;
          found = true;
          break;
        }
      }
      if (!found) {
        std::string known;
        std::vector<std::string> names;
        for (const auto& f : fields) {
          known += (known.empty() ? "" : ", ") + std::string(f.name);
          names.emplace_back(f.name);
        }
        const std::string near = nearest_name(key, names);
        throw ParameterError(fmt::format("{}: unknown parameter '{}'{} (known: {})", policy_title, key,
                                         near.empty() ? "" : fmt::format(": did you mean '{}'?", near), known));
      }
    }
    return std::make_unique<P>(params);
  };
  return info;
}

}  // namespace kvevict::detail
