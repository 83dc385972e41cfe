// libFuzzer target: arbitrary bytes as an .npy attention file. The header
// parser sees every input; inputs whose header is valid are also written to a
// file, opened and replayed, so size checks, truncation and bad values are
// exercised end to end. Every parsed header goes through the open path (a
// filter on its shape once hid a size that wrapped around 2^64); only the
// replay is capped, a few heads and rows each, to keep each run fast.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "kvevict/core/errors.h"
#include "kvevict/eval/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    kvevict::parse_npy_header(bytes, "fuzz.npy");
  } catch (const kvevict::InputError&) {
    return 0;
  }
  static const std::string path = "/tmp/kvevict-fuzz-" + std::to_string(getpid()) + ".npy";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  try {
    constexpr std::size_t kMaxHeads = 4;
    constexpr std::uint32_t kMaxSteps = 64;
    const auto heads = kvevict::open_trace_heads(path);
    for (std::size_t h = 0; h < heads.size() && h < kMaxHeads; ++h) {
      for (std::uint32_t t = 0; t < heads[h]->steps() && t < kMaxSteps; ++t) {
        const auto w = heads[h]->next();
        if (w.size() != t + 1) __builtin_trap();
      }
    }
  } catch (const kvevict::InputError&) {
  }
  std::remove(path.c_str());  // nothing left in /tmp when the run ends
  return 0;
}
