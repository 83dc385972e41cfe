// libFuzzer target: arbitrary bytes as a .kvm weights file. The CRC-32 at the
// end is recomputed first (when there is room for one), so the fuzzer gets
// past the checksum to the header and tensor parsing; a model that loads is
// then run for a few tokens with an evicting policy on every head.
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/core/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<char> bytes(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  if (bytes.size() >= 24) {
    const std::size_t at = bytes.size() - 4;
    const auto crc = static_cast<std::uint32_t>(crc32_z(crc32(0L, Z_NULL, 0), data, at));
    for (int i = 0; i < 4; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  }
  std::shared_ptr<const kvevict::Model> model;
  try {
    model = kvevict::Model::parse(std::move(bytes), "fuzz.kvm");
  } catch (const kvevict::InputError&) {
    return 0;
  }
  if (model->config().head_count() > 64 || model->parameter_count() > (1U << 20)) return 0;  // keep runs fast
  const std::uint32_t tokens = std::min<std::uint32_t>(8, model->config().context);
  kvevict::Decoder decoder(model, tokens);
  std::vector<std::unique_ptr<kvevict::Policy>> policies;
  for (std::uint32_t h = 0; h < model->config().head_count(); ++h) {
    policies.push_back(kvevict::make_policy("tova", {{"budget", 3}}));
    decoder.set_policy(h, policies.back().get(), 3);
  }
  try {
    for (std::uint32_t t = 0; t < tokens; ++t) decoder.step(static_cast<std::uint8_t>(t * 37));
  } catch (const kvevict::ContractError&) {
    // Huge finite weights can overflow to inf/NaN attention, which the policy
    // refuses by name: a clear error, not a crash.
  }
  return 0;
}
