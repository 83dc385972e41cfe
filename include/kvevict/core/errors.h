// Error types thrown by the library. Every message is one line that names what
// was wrong and where; bindings map ParameterError to their "bad value" error
// (Python ValueError) and the rest to their runtime error.
#pragma once

#include <stdexcept>
#include <string>

namespace kvevict {

// Base of everything the library throws on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A parameter that breaks a rule, refused at construction (or while parsing
// `key=value` text): names the policy, the parameter, the value and the rule.
class ParameterError : public Error {
 public:
  using Error::Error;
};

// The caller broke the policy or harness contract (positions out of order,
// capacity overrun, an invalid victim). Nothing changed before it was thrown.
class ContractError : public Error {
 public:
  using Error::Error;
};

// Bad input from outside: an unknown trace id, a malformed vector file.
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace kvevict
