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

// Throws ParameterError listing the known names when `name` is unknown.
const PolicyInfo& find_policy(std::string_view name);

std::unique_ptr<Policy> make_policy(std::string_view name, const ParamMap& params = {});

// "a,b,c" or "all" -> policy names, each checked against the registry.
std::vector<std::string> parse_policy_list(std::string_view text);

}  // namespace kvevict
