// The names of the signals a policy reads (policy.h), for messages and listings.
#include <string>
#include <string_view>

#include "kvevict/core/policy.h"

namespace kvevict {

std::string_view signal_name(Signal signal) noexcept {
  switch (signal) {
    case kSignalAttention: return "attention";
    case kSignalKey: return "key";
    case kSignalValue: return "value";
    case kSignalQueries: return "queries";
  }
  return "unknown signal";
}

std::string signal_names(Signals signals) {
  std::string out;
  for (Signals bit = 1; bit <= kSignalQueries; bit <<= 1) {
    if ((signals & bit) != 0) out += (out.empty() ? "" : ", ") + std::string(signal_name(static_cast<Signal>(bit)));
  }
  return out.empty() ? "none" : out;
}

}  // namespace kvevict
