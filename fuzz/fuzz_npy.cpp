// libFuzzer target: arbitrary bytes as an .npy attention file. The header
// parser sees every input; inputs whose header is valid are also written to a
// file and replayed, so truncation and bad values are exercised end to end.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "kvevict/errors.h"
#include "kvevict/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  kvevict::NpyHeader header;
  try {
    header = kvevict::parse_npy_header(bytes, "fuzz.npy");
  } catch (const kvevict::InputError&) {
    return 0;
  }
  if (header.length() > 64 || header.heads() > 4) return 0;  // keep each run fast
  static const std::string path = "/tmp/kvevict-fuzz-" + std::to_string(getpid()) + ".npy";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  try {
    for (auto& head : kvevict::open_trace_heads(path)) {
      for (std::uint32_t t = 0; t < head->steps(); ++t) {
        const auto w = head->next();
        if (w.size() != t + 1) __builtin_trap();
      }
    }
  } catch (const kvevict::InputError&) {
  }
  return 0;
}
