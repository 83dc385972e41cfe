// libFuzzer target: arbitrary bytes as a GGUF file. A file the reader
// accepts has every metadata value and tensor info touched, and every
// tensor's data read end to end (its extent was checked: ASan would see a
// byte outside the buffer), so a check the reader forgot shows up here.
#include <cstddef>
#include <cstdint>
#include <span>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::unique_ptr<kvevict::GgufFile> file;
  try {
    file = kvevict::GgufFile::parse(std::span<const std::uint8_t>(data, size), "fuzz.gguf");
  } catch (const kvevict::InputError&) {
    return 0;
  }
  volatile std::uint64_t sink = file->version() + file->alignment();
  for (const auto& [key, value] : file->metadata()) {
    sink = sink + key.size() + static_cast<std::uint64_t>(value.integer) + value.text.size() + value.count;
    for (const auto& s : value.strings) sink = sink + s.size();
    for (const double x : value.numbers) sink = sink + static_cast<std::uint64_t>(x != 0.0);
    if (file->find(key) == nullptr) __builtin_trap();
    // The typed getters either answer or refuse by name; never anything else.
    try {
      sink = sink + file->get_uint(key);
    } catch (const kvevict::InputError&) {
    }
    try {
      sink = sink + static_cast<std::uint64_t>(file->get_float(key) != 0.0);
    } catch (const kvevict::InputError&) {
    }
    try {
      sink = sink + file->get_string(key).size();
    } catch (const kvevict::InputError&) {
    }
  }
  for (const auto& t : file->tensors()) {
    if (file->tensor(t.name) != &t) __builtin_trap();
    sink = sink + t.ne.size() + t.type + t.offset + t.elements;
    for (std::uint64_t i = 0; i < t.bytes; ++i) sink = sink + t.data[i];
  }
  (void)sink;
  return 0;
}
