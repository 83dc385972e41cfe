// The registry: every policy by name, with its parameters, defaults, one-line
// summary and introspection queries. It is the one entry point the tool, the
// vector runner and the bindings use to build a policy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"

namespace kvevict {

struct ParamInfo {
  std::string name;  // interchange name, camelCase
  std::int64_t default_value;
  std::string help;
};

// A read-only query a test or vector may ask ("votesOf", "effectiveBudget").
struct QueryInfo {
  std::string name;    // camelCase, as in vector files
  std::size_t arity;   // number of integer arguments
  std::function<double(const Policy&, std::span<const std::int64_t>)> call;
};

struct PolicyInfo {
  std::string name;     // "scissorhands"
  std::string title;    // "Scissorhands"
  std::string summary;  // one line
  std::vector<ParamInfo> params;
  std::vector<QueryInfo> queries;
  // The signals its steps read (policy.h): what a source must supply.
  Signals signals = kSignalAttention;
  // Builds the policy from named parameters (missing ones take defaults).
  // Throws ParameterError for an unknown name or a value that breaks a rule.
  std::function<std::unique_ptr<Policy>(const ParamMap&)> make;

  // Every parameter with its effective value: defaults overlaid with `given`.
  ParamMap effective(const ParamMap& given) const;
  const QueryInfo* find_query(std::string_view query_name) const;
  bool has_param(std::string_view param_name) const;
};

// All registered policies, in catalogue order (the flagship first).
std::span<const PolicyInfo* const> policies();

// Throws ParameterError listing the known names when `name` is unknown:
// "unknown policy 'snapk': did you mean 'snapkv'? (known: ...)", the
// suggestion when nearest_name finds one.
const PolicyInfo& find_policy(std::string_view name);

std::unique_ptr<Policy> make_policy(std::string_view name, const ParamMap& params = {});

// "a,b,c" or "all" -> policy names, each checked against the registry.
// `available` is what the caller's source supplies: "all" names only the
// policies it can feed, and a named policy that reads a signal outside it is
// refused (ParameterError naming the policy, the signal and `source`).
std::vector<std::string> parse_policy_list(std::string_view text, Signals available = kEverySignal,
                                           std::string_view source = {});

// The names of the policies a source supplying `available` can feed, in
// catalogue order: kSignalAttention for a trace, kEverySignal for the model.
std::vector<std::string> policy_names(Signals available = kEverySignal);

// Refuses a policy whose signals are not all in `available`:
// "<policy> reads the new token's <signal>, which <source> does not supply".
void check_signals_available(const PolicyInfo& info, Signals available, std::string_view source);

}  // namespace kvevict
