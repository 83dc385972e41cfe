// libFuzzer target: arbitrary bytes as a vector file. The runner must report
// every problem as a failure, never crash, hang or throw out.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvevict/eval/vectors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const kvevict::VectorReport report = kvevict::run_vector_text(text, "fuzz.vectors.json");
  for (const auto& f : report.failures) (void)kvevict::describe(f);
  return 0;
}
