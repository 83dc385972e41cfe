// Attention recorded from your own model, as a NumPy .npy file: shape [N, N]
// (one head) or [H, N, N] (several, each replayed as its own policy
// instance); row t holds the attention of the token at position t over
// positions 0 ... t-1 (entries at or after t are ignored). dtype float16,
// float32 or float64, little-endian, C order. Strict: every problem is an
// InputError naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/eval/trace.h"

namespace kvevict {

// What a file holds: an attention trace ([N, N] or [H, N, N]), or one vector
// per position ([N, D] or [H, N, D]: recorded keys, values or queries,
// eval/signal_files.h). The dtype rules are the same.
enum class NpyLayout { kTrace, kRows };

struct NpyHeader {
  char kind = 'f';                   // only floating point is accepted
  std::size_t item_size = 4;         // 2, 4 or 8
  std::vector<std::uint64_t> shape;  // [N, N] or [H, N, N] (kRows: [N, D] or [H, N, D])
  std::uint64_t data_offset = 0;     // bytes before the array data
  // Bytes of array data the shape needs, H * N * N * item_size. The parser
  // refuses a shape for which this, plus data_offset, overflows a file offset.
  std::uint64_t data_bytes = 0;

  std::uint64_t heads() const noexcept { return shape.size() == 3 ? shape[0] : 1; }
  // N: positions (a trace's last dimension; kRows: the one before the last).
  std::uint64_t length() const noexcept { return shape.back(); }
  std::uint64_t rows() const noexcept { return shape[shape.size() - 2]; }
};

// Parses the magic, version and header dictionary at the start of `bytes`
// (at least the whole header). `file` names the file in errors.
NpyHeader parse_npy_header(std::string_view bytes, const std::string& file,
                           NpyLayout layout = NpyLayout::kTrace);

// Reads and checks the header of a file, including that the data is all there.
NpyHeader read_npy_header(const std::filesystem::path& file, NpyLayout layout = NpyLayout::kTrace);

// One head of an .npy attention file, streamed a row at a time.
class NpyTrace final : public Trace {
 public:
  NpyTrace(const std::filesystem::path& file, std::uint64_t head);

  const std::string& id() const noexcept override { return id_; }
  std::uint32_t length() const noexcept override { return length_; }
  void rewind() override { step_ = 0; }
  std::uint32_t step() const noexcept override { return step_; }
  std::span<const float> next() override;

 private:
  std::string id_;
  std::string file_;
  NpyHeader header_;
  std::uint64_t head_;
  std::uint32_t length_;
  std::uint32_t step_ = 0;
  std::ifstream in_;
  std::vector<char> raw_;
  std::vector<float> weights_;
};

// Converts out.size() little-endian items of `item_size` bytes (2, 4 or 8:
// float16, float32, float64) at `raw` to float.
void npy_items_to_floats(const char* raw, std::size_t item_size, std::span<float> out);

// True when `id` names an .npy file rather than a generated trace.
bool is_npy_id(std::string_view id);

// Every head of a trace: one for a generated id, H for an [H, N, N] file.
std::vector<std::unique_ptr<Trace>> open_trace_heads(std::string_view id);

// Writes the first `steps` steps of `trace` as an [steps + 1, steps + 1]
// float32 .npy in the layout above (row 0 and entries at or after t are 0).
// Refuses to replace an existing file unless `overwrite`; writes a temporary
// file and renames it, so a failure leaves nothing half-written.
void write_npy_trace(Trace& trace, std::uint32_t steps, const std::filesystem::path& file,
                     bool overwrite);

// The same for several traces of equal length: [H, steps + 1, steps + 1] when
// `head_axis` (or [steps + 1, steps + 1] for exactly one trace without it).
void write_npy_heads(std::span<Trace* const> heads, std::uint32_t steps,
                     const std::filesystem::path& file, bool overwrite, bool head_axis = true);

// Writes `data` (C order) as a float32 .npy of the given shape, the same way:
// refused over an existing file unless `overwrite`, through a temporary file
// and a rename. Throws ContractError when the shape does not match the data.
void write_npy_floats(std::span<const std::uint64_t> shape, std::span<const float> data,
                      const std::filesystem::path& file, bool overwrite);

}  // namespace kvevict
