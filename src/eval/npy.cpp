#include "kvevict/eval/npy.h"

#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// Positions are 32-bit and a row is read whole; larger files are refused.
constexpr std::uint64_t kMaxLength = std::uint64_t{1} << 24;
constexpr std::uint64_t kMaxHeads = std::uint64_t{1} << 16;
// Floats per position in a kRows file (a key, a value, a group's queries).
constexpr std::uint64_t kMaxWidth = std::uint64_t{1} << 20;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file, what));
}

// A tiny reader for the header's Python dict literal, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 3), }
class DictReader {
 public:
  DictReader(std::string_view text, const std::string& file) : s_(text), file_(file) {}

  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])) != 0) ++i_;
  }
  bool accept(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* where) {
    if (!accept(c)) fail(file_, fmt::format("malformed .npy header: expected '{}' {}", c, where));
  }
  std::string string() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) {
      fail(file_, "malformed .npy header: expected a quoted string");
    }
    const char quote = s_[i_++];
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != quote) ++i_;
    if (i_ >= s_.size()) fail(file_, "malformed .npy header: unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view w(word);
      if (s_.substr(i_, w.size()) == w) {
        i_ += w.size();
        return value;
      }
    }
    fail(file_, "malformed .npy header: fortran_order must be True or False");
  }
  std::vector<std::uint64_t> tuple() {
    expect('(', "to open the shape");
    std::vector<std::uint64_t> dims;
    while (!accept(')')) {
      skip_space();
      std::uint64_t v = 0;
      std::size_t digits = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])) != 0) {
        if (v > (std::numeric_limits<std::uint64_t>::max() - 9) / 10) fail(file_, "shape dimension too large");
        v = v * 10 + static_cast<std::uint64_t>(s_[i_++] - '0');
        ++digits;
      }
      if (digits == 0) fail(file_, "malformed .npy header: shape must be a tuple of integers");
      dims.push_back(v);
      if (!accept(',')) {
        expect(')', "to close the shape");
        break;
      }
    }
    return dims;
  }
  bool at_end() {
    skip_space();
    return i_ >= s_.size();
  }

 private:
  std::string_view s_;
  const std::string& file_;
  std::size_t i_ = 0;
};

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000U) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1FU;
  const std::uint32_t mantissa = h & 0x3FFU;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000U | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

template <class T>
T load_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;  // little-endian host (checked at compile time below)
}
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

}  // namespace

NpyHeader parse_npy_header(std::string_view bytes, const std::string& file, NpyLayout layout) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != kMagic) fail(file, "not a .npy file (wrong magic)");
  const auto major = static_cast<unsigned char>(bytes[6]);
  std::uint64_t header_len = 0;
  std::size_t prefix = 0;
  if (major == 1) {
    header_len = load_le<std::uint16_t>(bytes.data() + 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(file, "the .npy header is truncated");
    header_len = load_le<std::uint32_t>(bytes.data() + 8);
    prefix = 12;
  } else {
    fail(file, fmt::format("unsupported .npy format version {}", major));
  }
  if (bytes.size() < prefix + header_len) fail(file, "the .npy header is truncated");

  NpyHeader h;
  h.data_offset = prefix + header_len;
  DictReader r(bytes.substr(prefix, header_len), file);
  std::string descr;
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  r.expect('{', "to open the header");
  while (!r.accept('}')) {
    const std::string key = r.string();
    r.expect(':', "after a key");
    if (key == "descr") {
      descr = r.string();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = r.boolean();
      have_order = true;
    } else if (key == "shape") {
      h.shape = r.tuple();
      have_shape = true;
    } else {
      fail(file, fmt::format("unexpected key '{}' in the .npy header", key));
    }
    if (!r.accept(',')) {
      r.expect('}', "to close the header");
      break;
    }
  }
  if (!r.at_end()) fail(file, "malformed .npy header: text after the dictionary");
  if (!have_descr || !have_order || !have_shape) {
    fail(file, "the .npy header lacks 'descr', 'fortran_order' or 'shape'");
  }
  if (descr.size() != 3 || (descr[0] != '<' && descr[0] != '=' && descr[0] != '|') ||
      descr[1] != 'f' || (descr[2] != '2' && descr[2] != '4' && descr[2] != '8')) {
    fail(file, fmt::format("unsupported dtype '{}': use float16, float32 or float64, little-endian",
                           descr));
  }
  h.item_size = static_cast<std::size_t>(descr[2] - '0');
  if (fortran) fail(file, "Fortran order is not supported: save the array in C order");
  const auto& s = h.shape;
  const bool rows = layout == NpyLayout::kRows;
  if (s.size() != 2 && s.size() != 3) {
    fail(file, fmt::format("shape has {} dimensions: expected {}", s.size(),
                           rows ? "[N, D] or [H, N, D] (one vector per position)" : "[N, N] or [H, N, N]"));
  }
  const std::uint64_t n = s[s.size() - 2];
  if (rows) {
    if (s.back() < 1 || s.back() > kMaxWidth) {
      fail(file, fmt::format("D ({}) must be in 1 ... {} (floats per position)", s.back(), kMaxWidth));
    }
  } else if (s.back() != n) {
    fail(file, fmt::format("shape [..., {}, {}] is not square: row t must cover positions 0 ... N-1",
                           n, s.back()));
  }
  if (n < 2) fail(file, fmt::format("N ({}) must be at least 2: there is no decode step", n));
  if (n > kMaxLength) fail(file, fmt::format("N ({}) exceeds {}", n, kMaxLength));
  if (s.size() == 3 && (s[0] < 1 || s[0] > kMaxHeads)) {
    fail(file, fmt::format("H ({}) must be in 1 ... {}", s[0], kMaxHeads));
  }
  // H * N * N * item_size can pass 2^64 (H <= 2^16, N <= 2^24): wrapped, a
  // 192-byte file passed the truncation check and then sized H buffers from N.
  // Checked, and the end of the data must be a valid file offset, so every
  // row offset below it (head * N + t) * N * item_size fits too.
  std::uint64_t bytes_needed = 0;
  constexpr auto kMaxOffset = static_cast<std::uint64_t>(std::numeric_limits<std::streamoff>::max());
  if (__builtin_mul_overflow(h.heads(), n, &bytes_needed) ||
      __builtin_mul_overflow(bytes_needed, s.back(), &bytes_needed) ||
      __builtin_mul_overflow(bytes_needed, std::uint64_t{h.item_size}, &bytes_needed) ||
      bytes_needed > kMaxOffset - h.data_offset) {
    fail(file, fmt::format("shape ({}) of {}-byte items is too large: its data would end beyond the largest "
                           "file offset (2^63 - 1 bytes)",
                           fmt::join(s, ", "), h.item_size));
  }
  h.data_bytes = bytes_needed;
  return h;
}

NpyHeader read_npy_header(const std::filesystem::path& path, NpyLayout layout) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(file, "cannot be opened");
  std::string head(12, '\0');
  in.read(head.data(), 12);
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (head.size() < 10 || head.substr(0, 6) != kMagic) fail(file, "not a .npy file (wrong magic)");
  const auto major = static_cast<unsigned char>(head[6]);
  std::uint64_t header_len = 0;
  if (major == 1) header_len = load_le<std::uint16_t>(head.data() + 8);
  if ((major == 2 || major == 3) && head.size() >= 12) header_len = load_le<std::uint32_t>(head.data() + 8);
  if (header_len > (std::uint64_t{1} << 20)) fail(file, "the .npy header is implausibly long");
  std::string bytes(static_cast<std::size_t>(12 + header_len), '\0');
  in.clear();
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  NpyHeader h = parse_npy_header(bytes, file, layout);

  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(file, "cannot read its size");
  const std::uint64_t need = h.data_bytes;  // checked by the parser
  if (size < h.data_offset || size - h.data_offset < need) {
    fail(file, fmt::format("the file is truncated: shape needs {} bytes of data, found {}", need,
                           size < h.data_offset ? 0 : size - h.data_offset));
  }
  return h;
}

void npy_items_to_floats(const char* raw, std::size_t item_size, std::span<float> out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char* p = raw + i * item_size;
    switch (item_size) {
      case 2: out[i] = half_to_float(load_le<std::uint16_t>(p)); break;
      case 4: out[i] = load_le<float>(p); break;
      default: out[i] = static_cast<float>(load_le<double>(p)); break;
    }
  }
}

bool is_npy_id(std::string_view id) {
  return id.size() > 4 && id.substr(id.size() - 4) == ".npy";
}

NpyTrace::NpyTrace(const std::filesystem::path& file, std::uint64_t head)
    : id_(file.string()), file_(file.string()), header_(read_npy_header(file)), head_(head) {
  if (head_ >= header_.heads()) fail(file_, fmt::format("has no head {}", head_));
  length_ = static_cast<std::uint32_t>(header_.length());
  if (header_.heads() > 1) id_ = fmt::format("{}#{}", file_, head_);
  in_.open(file, std::ios::binary);
  if (!in_) fail(file_, "cannot be opened");
  raw_.resize(length_ * header_.item_size);
  weights_.resize(length_);
}

std::span<const float> NpyTrace::next() {
  if (step_ >= steps()) {
    fail(file_, fmt::format("no step after {} (it has {} steps)", step_, steps()));
  }
  const std::uint32_t t = ++step_;
  const std::uint64_t n = length_;
  // Cannot wrap: head < H and t < N, so the row lies within data_bytes, which
  // the header check bounds (with data_offset) by the largest file offset.
  const std::uint64_t offset = header_.data_offset + ((head_ * n + t) * n) * header_.item_size;
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(raw_.data(), static_cast<std::streamsize>(t * header_.item_size));
  if (in_.gcount() != static_cast<std::streamsize>(t * header_.item_size)) {
    fail(file_, fmt::format("could not read row {} of head {}", t, head_));
  }
  for (std::uint32_t i = 0; i < t; ++i) {
    const char* p = raw_.data() + i * header_.item_size;
    float w = 0.0F;
    switch (header_.item_size) {
      case 2: w = half_to_float(load_le<std::uint16_t>(p)); break;
      case 4: w = load_le<float>(p); break;
      default: w = static_cast<float>(load_le<double>(p)); break;
    }
    if (!(w >= 0.0F && w <= std::numeric_limits<float>::max())) {
      fail(file_, fmt::format("head {} row {} column {} is {}: weights must be finite and at least 0",
                              head_, t, i, std::isnan(w) ? std::string("NaN") : fmt::format("{}", w)));
    }
    weights_[i] = w;
  }
  return {weights_.data(), t};
}

std::vector<std::unique_ptr<Trace>> open_trace_heads(std::string_view id) {
  std::vector<std::unique_ptr<Trace>> heads;
  if (!is_npy_id(id)) {
    heads.push_back(open_trace(id));
    return heads;
  }
  const std::filesystem::path file{std::string(id)};
  const NpyHeader h = read_npy_header(file);
  for (std::uint64_t head = 0; head < h.heads(); ++head) {
    heads.push_back(std::make_unique<NpyTrace>(file, head));
  }
  return heads;
}

void write_npy_trace(Trace& trace, std::uint32_t steps, const std::filesystem::path& file,
                     bool overwrite) {
  Trace* one = &trace;
  write_npy_heads(std::span<Trace* const>(&one, 1), steps, file, overwrite, false);
}

namespace {
// Writes `file` whole or not at all (a .tmp beside it, then renamed): the
// magic, version 1.0, the header dict padded so the data starts on a 64-byte
// boundary, then what `body(out)` writes.
template <class Body>
void write_npy_atomically(const std::string& name, const std::filesystem::path& file, std::string header,
                          Body&& body) {
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::error_code ec;
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(name, "cannot be written (is the folder there and writable?)");
    const auto len = static_cast<std::uint16_t>(header.size());
    out.write(kMagic.data(), 6);
    out.put('\x01');
    out.put('\x00');
    out.put(static_cast<char>(len & 0xFF));
    out.put(static_cast<char>(len >> 8));
    out << header;
    body(out);
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      fail(name, "writing failed (disk full?)");
    }
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(name, fmt::format("cannot be written: {}", ec.message()));
  }
}
}  // namespace

void write_npy_heads(std::span<Trace* const> heads, std::uint32_t steps,
                     const std::filesystem::path& file, bool overwrite, bool head_axis) {
  const std::string name = file.string();
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(file, ec)) {
    fail(name, "already exists (pass --force to replace it)");
  }
  if (heads.empty() || (!head_axis && heads.size() != 1)) {
    throw ContractError(fmt::format("{}: {} heads to write", name, heads.size()));
  }
  const std::uint64_t n = std::uint64_t{steps} + 1;
  std::string header =
      head_axis ? fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}, {}), }}",
                              heads.size(), n, n)
                : fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", n, n);
  write_npy_atomically(name, file, std::move(header), [&](std::ofstream& out) {
    std::vector<float> row(n, 0.0F);
    for (Trace* trace : heads) {
      std::fill(row.begin(), row.end(), 0.0F);
      out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(n * 4));  // row 0
      trace->rewind();
      for (std::uint32_t t = 1; t <= steps; ++t) {
        const auto w = trace->next();
        std::fill(row.begin(), row.end(), 0.0F);
        std::copy(w.begin(), w.end(), row.begin());
        out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(n * 4));
      }
    }
  });
}

void write_npy_floats(std::span<const std::uint64_t> shape, std::span<const float> data,
                      const std::filesystem::path& file, bool overwrite) {
  const std::string name = file.string();
  std::uint64_t count = 1;
  for (const std::uint64_t d : shape) count *= d;
  if (shape.empty() || count != data.size()) {
    throw ContractError(fmt::format("{}: shape ({}) for {} floats", name, fmt::join(shape, ", "), data.size()));
  }
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(file, ec)) {
    fail(name, "already exists (pass --force to replace it)");
  }
  const std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}{}), }}",
                                         fmt::join(shape, ", "), shape.size() == 1 ? "," : "");
  write_npy_atomically(name, file, header, [&](std::ofstream& out) {
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  });
}

}  // namespace kvevict
