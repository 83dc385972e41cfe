#include "model/format/kvm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

// Version 2 put the number of KV heads in the first reserved word (grouped-
// query attention); version 1 files (reserved = 0) have one per query head.
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::size_t kPreamble = 8 + 4 + 8;  // magic, version, body length
constexpr std::uint32_t kMaxLayers = 256;
constexpr std::uint32_t kMaxWidth = 1U << 14;
constexpr std::uint32_t kMaxContext = 1U << 20;
constexpr std::uint64_t kMaxFloats = 1ULL << 30;  // 4 GiB of weights

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file, what));
}

std::uint32_t read_le32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::uint64_t read_le64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Little-endian reads from the file image, each checked against its end.
class Reader {
 public:
  Reader(const std::string& file, const std::vector<char>& bytes, std::size_t begin, std::size_t end)
      : file_(file), bytes_(bytes), at_(begin), end_(end) {}

  void need(std::size_t n, const char* what) const {
    if (end_ - at_ < n) {
      fail(file_, fmt::format("truncated: the header ends inside {} (at byte {})", what, at_));
    }
  }
  std::uint32_t u32(const char* what) {
    need(4, what);
    const std::uint32_t v = read_le32(bytes_.data() + at_);
    at_ += 4;
    return v;
  }
  float f32(const char* what) {
    const std::uint32_t bits = u32(what);
    float f = 0.0F;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  std::string text(std::size_t n, const char* what) {
    need(n, what);
    std::string s(bytes_.data() + at_, n);
    at_ += n;
    return s;
  }
  void floats(float* out, std::size_t n, const std::string& tensor) {
    if ((end_ - at_) / 4 < n) fail(file_, fmt::format("truncated inside tensor '{}'", tensor));
    std::memcpy(out, bytes_.data() + at_, n * 4);  // x86-64 and arm64 are little-endian
    at_ += n * 4;
  }
  std::size_t at() const noexcept { return at_; }

 private:
  const std::string& file_;
  const std::vector<char>& bytes_;
  std::size_t at_;
  std::size_t end_;
};

// The preamble and the CRC-32 over everything before it; returns the version.
std::uint32_t check_envelope(const std::vector<char>& bytes, const std::string& file) {
  if (bytes.size() < kKvmMagic.size() || !std::equal(kKvmMagic.begin(), kKvmMagic.end(), bytes.begin())) {
    fail(file, "not a kvevict model (no KVEVMODL magic at the start)");
  }
  if (bytes.size() < kPreamble) fail(file, "truncated: the file ends inside its preamble");
  const std::uint32_t version = read_le32(bytes.data() + 8);
  if (version < 1 || version > kFormatVersion) {
    fail(file, fmt::format("format version {} is not supported (this build reads 1 ... {})", version,
                           kFormatVersion));
  }
  const std::uint64_t body = read_le64(bytes.data() + 12);
  const std::uint64_t expected = kPreamble + body + 4;
  if (body > bytes.size() || bytes.size() != expected) {
    const bool short_file = body > bytes.size() || bytes.size() < expected;
    fail(file, fmt::format("{}: the header promises a body of {} bytes ({} in all), the file has {}",
                           short_file ? "truncated" : "trailing bytes", body,
                           body > bytes.size() ? std::string("more than the file") : std::to_string(expected),
                           bytes.size()));
  }
  const std::size_t crc_at = bytes.size() - 4;
  const std::uint32_t stored = read_le32(bytes.data() + crc_at);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), crc_at);
  if (static_cast<std::uint32_t>(crc) != stored) {
    fail(file, fmt::format("checksum mismatch (stored CRC-32 {:08x}, computed {:08x}): the file is corrupt",
                           stored, static_cast<std::uint32_t>(crc)));
  }
  return version;
}

void read_header(Reader& r, std::uint32_t version, KvmFile& c, const std::string& file) {
  c.vocab = r.u32("the configuration");
  c.layers = r.u32("the configuration");
  c.heads = r.u32("the configuration");
  c.width = r.u32("the configuration");
  c.ff = r.u32("the configuration");
  c.context = r.u32("the configuration");
  const std::uint32_t kv_word = r.u32("the configuration");
  if (version == 1 && kv_word != 0) {
    fail(file, fmt::format("bad model header: reserved word {} is not 0 in a version-1 file", kv_word));
  }
  c.kv_heads = version == 1 ? c.heads : kv_word;
  const std::uint32_t reserved = r.u32("the configuration");
  if (reserved != 0) {
    fail(file, fmt::format("bad model header: the reserved word after the KV heads is {}; it must be 0", reserved));
  }
  c.rope_base = r.f32("the configuration");
  c.norm_eps = r.f32("the configuration");

  auto bad = [&](const std::string& what) { fail(file, fmt::format("bad model header: {}", what)); };
  if (c.vocab != 256) bad(fmt::format("vocab {} (byte-level models have 256)", c.vocab));
  if (c.layers < 1 || c.layers > kMaxLayers) bad(fmt::format("layers {} (1 ... {})", c.layers, kMaxLayers));
  if (c.heads < 1 || c.width < 1 || c.width > kMaxWidth) {
    bad(fmt::format("width {} with {} heads", c.width, c.heads));
  }
  if (c.width % c.heads != 0 || c.head_dim() % 2 != 0) {
    bad(fmt::format("width {} is not an even head size times {} heads", c.width, c.heads));
  }
  if (c.kv_heads < 1 || c.heads % c.kv_heads != 0) {
    bad(fmt::format("{} KV heads do not divide {} query heads", c.kv_heads, c.heads));
  }
  if (c.ff < 1 || c.ff > 8 * kMaxWidth) bad(fmt::format("ff {}", c.ff));
  if (c.context < 2 || c.context > kMaxContext) bad(fmt::format("context {} (2 ... {})", c.context, kMaxContext));
  if (!std::isfinite(c.rope_base) || c.rope_base <= 1.0F) bad(fmt::format("rope base {}", c.rope_base));
  if (!std::isfinite(c.norm_eps) || c.norm_eps <= 0.0F) bad(fmt::format("norm eps {}", c.norm_eps));
}

struct Expected {
  std::string name;
  std::vector<std::uint32_t> shape;
};

// The tensors, in the one order the format fixes.
std::vector<Expected> expected_tensors(const KvmFile& c) {
  std::vector<Expected> want;
  want.push_back({"embed", {c.vocab, c.width}});
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("blocks.{}.", l);
    want.push_back({p + "attn_norm", {c.width}});
    want.push_back({p + "qkv", {(c.heads + 2 * c.kv_heads) * c.head_dim(), c.width}});
    want.push_back({p + "proj", {c.width, c.width}});
    want.push_back({p + "mlp_norm", {c.width}});
    want.push_back({p + "up", {c.ff, c.width}});
    want.push_back({p + "down", {c.width, c.ff}});
  }
  want.push_back({"final_norm", {c.width}});
  return want;
}

}  // namespace

bool is_kvm_magic(std::string_view first_bytes) noexcept {
  return first_bytes.size() == kKvmMagic.size() &&
         std::equal(kKvmMagic.begin(), kKvmMagic.end(), first_bytes.begin());
}

KvmFile read_kvm(const std::vector<char>& bytes, const std::string& file) {
  const std::uint32_t version = check_envelope(bytes, file);
  const std::size_t crc_at = bytes.size() - 4;
  KvmFile c;
  Reader r(file, bytes, kPreamble, crc_at);
  read_header(r, version, c, file);

  const std::vector<Expected> want = expected_tensors(c);
  std::uint64_t total = 0;
  for (const Expected& e : want) {
    c.offsets.push_back(total);
    std::uint64_t n = 1;
    for (const std::uint32_t d : e.shape) n *= d;
    total += n;
  }
  if (total > kMaxFloats) fail(file, fmt::format("bad model header: {} weights is too many", total));
  // The weights must be in the file before anything is allocated for them.
  if (total * 4 > crc_at - r.at()) {
    fail(file, fmt::format("truncated: the header describes {} weights, the file holds at most {}", total,
                           (crc_at - r.at()) / 4));
  }

  const std::uint32_t count = r.u32("the tensor count");
  if (count != want.size()) {
    fail(file, fmt::format("has {} tensors; a {}-layer model has {}", count, c.layers, want.size()));
  }
  c.weights.resize(total);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const Expected& e = want[i];
    const std::uint32_t name_len = r.u32("a tensor name");
    if (name_len > 256) fail(file, fmt::format("tensor {}: name of {} bytes", i, name_len));
    const std::string name = r.text(name_len, "a tensor name");
    if (name != e.name) fail(file, fmt::format("tensor {} is '{}', expected '{}'", i, name, e.name));
    const std::uint32_t ndim = r.u32("a tensor shape");
    std::vector<std::uint32_t> shape;
    if (ndim > 4) fail(file, fmt::format("tensor '{}' has {} dimensions", name, ndim));
    for (std::uint32_t d = 0; d < ndim; ++d) shape.push_back(r.u32("a tensor shape"));
    if (shape != e.shape) {
      fail(file, fmt::format("tensor '{}' has shape [{}], expected [{}]", name, fmt::join(shape, ", "),
                             fmt::join(e.shape, ", ")));
    }
    float* dst = c.weights.data() + c.offsets[i];
    const std::size_t n = (i + 1 < c.offsets.size() ? c.offsets[i + 1] : total) - c.offsets[i];
    r.floats(dst, n, name);
    for (std::size_t j = 0; j < n; ++j) {
      if (!std::isfinite(dst[j])) {
        fail(file, fmt::format("tensor '{}' holds a non-finite weight at index {}", name, j));
      }
    }
  }
  if (r.at() != crc_at) fail(file, fmt::format("{} unread bytes after the last tensor", crc_at - r.at()));
  return c;
}

}  // namespace kvevict
