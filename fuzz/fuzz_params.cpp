// libFuzzer target: the text a user types -- a policy name, `--set KEY=VALUE`
// assignments, integer and policy lists. Anything may be refused with a
// kvevict::Error; nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/core/params.h"
#include "kvevict/core/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  try {
    (void)kvevict::parse_integer_list(lines.front(), "--budgets");
  } catch (const kvevict::Error&) {
  }
  try {
    (void)kvevict::parse_policy_list(lines.front());
  } catch (const kvevict::Error&) {
  }
  try {
    kvevict::ParamMap params;
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const auto [key, value] = kvevict::parse_assignment(lines[i]);
      kvevict::set_param(params, key, value);
    }
    auto policy = kvevict::make_policy(lines.front(), params);
    (void)kvevict::find_policy(lines.front()).effective(params);
    (void)policy->memory_bytes();
  } catch (const kvevict::Error&) {
  }
  return 0;
}
