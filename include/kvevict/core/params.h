// Parameters as the tool, the vector files and the bindings give them: named
// integers ("recentWindow" -> 64). Each policy turns them into its own typed
// struct and validates that struct in its constructor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvevict {

// Ordered (key, value) pairs; a later duplicate key overrides an earlier one.
using ParamMap = std::vector<std::pair<std::string, std::int64_t>>;

// Parses a whole string as a base-10 integer. `what` names the thing for the
// error message ("--budget", "recentWindow"). Throws ParameterError for empty
// text, trailing characters, fractions, or values outside int64.
std::int64_t parse_integer(std::string_view text, std::string_view what);

// Splits "key=value" into the pair, the value parsed with parse_integer.
// Throws ParameterError when '=' or the key is missing.
std::pair<std::string, std::int64_t> parse_assignment(std::string_view text);

// "a,b,c" -> {a, b, c}, for every front end's list arguments. An empty item
// throws ParameterError "WHAT: empty item in 'TEXT'".
std::vector<std::string> split_list(std::string_view text, std::string_view what);

// Parses a comma-separated list of integers ("256,512,1024"); names the bad
// entry when one does not parse.
std::vector<std::int64_t> parse_integer_list(std::string_view text, std::string_view what);

// Sets or replaces `key` in `params`.
void set_param(ParamMap& params, std::string_view key, std::int64_t value);

// KEY=VALUE items (each parse_assignment) as parameters, a later item
// replacing an earlier one of the same key: every front end's --set.
ParamMap parse_assignments(std::span<const std::string> items);

// The candidate `given` is most likely a typo of: the nearest by edit
// distance (insertions, deletions, substitutions and adjacent swaps, case
// ignored) when it is at most two edits away and those are fewer than half
// the longer name's letters; the first such in `candidates` order on a tie.
// Empty when none is that near. The registry's policy names, the parameters'
// keys and the tool's commands and flags use it.
std::string nearest_name(std::string_view given, std::span<const std::string> candidates);

}  // namespace kvevict
