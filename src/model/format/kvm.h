// The .kvm file (model/FORMAT.md): kvevict's own byte-level model, a header
// of sizes and the float32 tensors in the one order the format fixes, under a
// CRC-32. This reads and checks the file; arch/tiny_builder.cpp makes the
// Model from what it holds.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvevict {

inline constexpr std::array<char, 8> kKvmMagic = {'K', 'V', 'E', 'V', 'M', 'O', 'D', 'L'};

// Whether a file's first bytes are a .kvm file's magic.
bool is_kvm_magic(std::string_view first_bytes) noexcept;

struct KvmFile {
  // The header: vocab is 256 (bytes), kv_heads = heads in version-1 files.
  std::uint32_t vocab = 0, layers = 0, heads = 0, kv_heads = 0, width = 0, ff = 0, context = 0;
  float rope_base = 0.0F, norm_eps = 0.0F;
  std::uint32_t head_dim() const noexcept { return width / heads; }
  // Every weight, tensor after tensor in the format's order: embed, then per
  // layer attn_norm, qkv, proj, mlp_norm, up, down, then final_norm; each
  // tensor's first float at offsets[i]. Every weight is finite.
  std::vector<float> weights;
  std::vector<std::uint64_t> offsets;
};

// Reads a whole .kvm file's bytes. Throws InputError, "<file>: <what>", for
// anything wrong: magic, version, length, checksum, header sizes, a tensor's
// name or shape, a non-finite weight, bytes left over.
KvmFile read_kvm(const std::vector<char>& bytes, const std::string& file);

}  // namespace kvevict
