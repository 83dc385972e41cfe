// GGUF: writer -> reader round trips (every value type, every supported
// tensor type, alignments 32 and 64) and the reader refusing bad files, each
// with a one-line message naming the file and the problem -- hostile counts
// refused at once, without allocating.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "alloc_counter.h"
#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

// This process's scratch folder, removed as it exits.
const fs::path& temp_folder() {
  static const testing::ScratchFolder dir("kvevict-gguf-test");
  return dir.path();
}

// Little-endian bytes, built field by field.
struct Bytes {
  std::vector<std::uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const auto at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  Bytes& u8(std::uint8_t v) { return put(v); }
  Bytes& u32(std::uint32_t v) { return put(v); }
  Bytes& u64(std::uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(tensors).u64(kvs);  // "GGUF" as a little-endian u32
  }
  Bytes& kv_u32(std::string_view key, std::uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& tensor(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(ne.size()));
    for (const std::uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  Bytes& pad(std::size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Bytes& zeros(std::size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

// `f` throws an InputError whose one-line message starts with "<file>: " and
// holds `problem`.
void expect_refused(const std::function<void()>& f, const std::string& file, const std::string& problem) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << problem;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(file + ": ", 0), 0U) << what;
    EXPECT_NE(what.find(problem), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

void expect_bad(const Bytes& bytes, const std::string& problem) {
  expect_refused([&] { GgufFile::parse(bytes.b, "bad.gguf"); }, "bad.gguf", problem);
}

// A hostile count is refused at once, allocating next to nothing.
void expect_bad_quickly(const Bytes& bytes, const std::string& problem) {
  const auto start = std::chrono::steady_clock::now();
  std::size_t allocations = 0;
  {
    testing::CountAllocations count;
    try {
      GgufFile::parse(bytes.b, "huge.gguf");
      ADD_FAILURE() << "no error; expected: " << problem;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("huge.gguf: ", 0), 0U) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
    allocations = count.count();
  }
  // The copy of the bytes, the file object, the message: a handful, none sized by the count
  // (one sized by it would have thrown std::bad_alloc, not InputError).
  EXPECT_LT(allocations, 40U);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

std::vector<float> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

std::vector<std::uint8_t> quantized(WeightType type, std::size_t n, std::uint32_t seed) {
  const auto values = random_values(n, seed);
  std::vector<std::uint8_t> out(weight_bytes(type, n));
  quantize(type, values.data(), out.data(), n);
  return out;
}

GgufValue scalar(GgufType type, std::int64_t integer, double number = 0.0) {
  GgufValue v;
  v.type = type;
  v.integer = integer;
  v.number = number;
  return v;
}

GgufValue numbers(GgufType element, std::vector<double> values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.element = element;
  v.numbers = std::move(values);
  return v;
}

struct TensorCase {
  std::string name;
  std::vector<std::uint64_t> ne;
  WeightType type;
};

const std::vector<TensorCase>& tensor_cases() {
  static const std::vector<TensorCase> cases = {
      {"f32", {8, 2}, WeightType::kF32},       {"f16", {5}, WeightType::kF16},
      {"bf16", {4, 3}, WeightType::kBF16},     {"q8_0", {64, 2}, WeightType::kQ8_0},
      {"q4_0", {32}, WeightType::kQ4_0},       {"q5_0", {32, 3}, WeightType::kQ5_0},
      {"blk.0.q4_k", {256, 2}, WeightType::kQ4_K}, {"q6_k", {512, 1, 1, 1}, WeightType::kQ6_K},
  };
  return cases;
}

GgufWriter full_writer(std::uint32_t alignment) {
  GgufWriter w(alignment);
  w.set_string("general.architecture", "llama");
  w.set("u8", scalar(GgufType::kU8, 200));
  w.set("i8", scalar(GgufType::kI8, -5));
  w.set("u16", scalar(GgufType::kU16, 60000));
  w.set("i16", scalar(GgufType::kI16, -300));
  w.set_u32("u32", 4000000000U);
  w.set_i32("i32", -7);
  w.set_f32("f32", 1.5f);
  w.set_bool("bool", true);
  w.set_bool("bool.false", false);
  w.set_string("string", "h\xC3\xA9llo");
  w.set("u64", scalar(GgufType::kU64, std::int64_t{1} << 40));
  w.set("i64", scalar(GgufType::kI64, -(std::int64_t{1} << 40)));
  w.set("f64", scalar(GgufType::kF64, 0, 0.1));
  w.set_strings("strings", {"a", "", "bc"});
  const float f32s[] = {1.5f, -2.0f};
  w.set_f32s("f32s", f32s);
  const std::int32_t i32s[] = {-1, 2, 3};
  w.set_i32s("i32s", i32s);
  w.set("u8s", numbers(GgufType::kU8, {0, 255}));
  w.set("bools", numbers(GgufType::kBool, {1, 0}));
  w.set("i64s", numbers(GgufType::kI64, {-9007199254740992.0, 5}));
  w.set("f64s", numbers(GgufType::kF64, {0.1, -1e300}));
  w.set("u16s", numbers(GgufType::kU16, {}));
  std::uint32_t seed = 1;
  for (const TensorCase& c : tensor_cases()) {
    std::uint64_t n = 1;
    for (const std::uint64_t d : c.ne) n *= d;
    w.add_tensor(c.name, c.ne, c.type, quantized(c.type, n, seed++));
  }
  return w;
}

void check_full(const GgufFile& f, std::uint32_t alignment, bool mapped) {
  EXPECT_EQ(f.version(), 3U);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("u8"), 200U);
  EXPECT_EQ(f.find("i8")->integer, -5);
  EXPECT_EQ(f.find("i8")->type, GgufType::kI8);
  EXPECT_EQ(f.get_uint("u16"), 60000U);
  EXPECT_EQ(f.find("i16")->integer, -300);
  EXPECT_EQ(f.get_uint("u32"), 4000000000U);
  EXPECT_EQ(f.find("i32")->integer, -7);
  EXPECT_EQ(f.get_float("f32"), 1.5);
  EXPECT_EQ(f.get_bool_if("bool"), std::optional<bool>(true));
  EXPECT_EQ(f.get_bool_if("bool.false"), std::optional<bool>(false));
  EXPECT_EQ(f.get_string("string"), "h\xC3\xA9llo");
  EXPECT_EQ(f.get_uint("u64"), std::uint64_t{1} << 40);
  EXPECT_EQ(f.find("i64")->integer, -(std::int64_t{1} << 40));
  EXPECT_EQ(f.get_float("f64"), 0.1);
  EXPECT_EQ(f.get_float("u16"), 60000.0);  // floats accept integers
  const GgufValue* strings = f.find("strings");
  ASSERT_NE(strings, nullptr);
  EXPECT_EQ(strings->element, GgufType::kString);
  EXPECT_EQ(strings->count, 3U);
  EXPECT_EQ(strings->strings, (std::vector<std::string>{"a", "", "bc"}));
  EXPECT_EQ(f.find("f32s")->numbers, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f.find("i32s")->numbers, (std::vector<double>{-1, 2, 3}));
  EXPECT_EQ(f.find("i32s")->element, GgufType::kI32);
  EXPECT_EQ(f.find("u8s")->numbers, (std::vector<double>{0, 255}));
  EXPECT_EQ(f.find("bools")->numbers, (std::vector<double>{1, 0}));
  EXPECT_EQ(f.find("bools")->element, GgufType::kBool);
  EXPECT_EQ(f.find("i64s")->numbers, (std::vector<double>{-9007199254740992.0, 5}));
  EXPECT_EQ(f.find("f64s")->numbers, (std::vector<double>{0.1, -1e300}));
  EXPECT_EQ(f.find("u16s")->count, 0U);
  EXPECT_EQ(f.find("missing"), nullptr);
  // Metadata in the order set (general.alignment first when not 32).
  const std::size_t first = alignment == 32 ? 0 : 1;
  ASSERT_GT(f.metadata().size(), first + 2);
  EXPECT_EQ(f.metadata()[first].first, "general.architecture");
  EXPECT_EQ(f.metadata()[first + 1].first, "u8");
  if (alignment != 32) {
    EXPECT_EQ(f.metadata()[0].first, "general.alignment");
  }

  ASSERT_EQ(f.tensors().size(), tensor_cases().size());
  std::uint32_t seed = 1;
  for (std::size_t i = 0; i < tensor_cases().size(); ++i) {
    const TensorCase& c = tensor_cases()[i];
    const GgufTensor& t = f.tensors()[i];
    EXPECT_EQ(f.tensor(c.name), &t);
    EXPECT_EQ(t.name, c.name);
    EXPECT_EQ(t.ne, c.ne);
    EXPECT_EQ(t.type, static_cast<std::uint32_t>(c.type));
    EXPECT_EQ(t.offset % alignment, 0U);
    std::uint64_t n = 1;
    for (const std::uint64_t d : c.ne) n *= d;
    EXPECT_EQ(t.elements, n);
    const auto want = quantized(c.type, n, seed++);
    ASSERT_EQ(t.bytes, want.size());
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size()), 0) << c.name;
    // A map starts on a page, so a tensor's data is aligned in memory too.
    if (mapped) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data) % alignment, 0U) << c.name;
    }
  }
}

class GgufRoundTrip : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(GgufRoundTrip, WriterToReader) {
  const std::uint32_t alignment = GetParam();
  const GgufWriter w = full_writer(alignment);
  const fs::path path = temp_folder() / ("round-trip-" + std::to_string(alignment) + ".gguf");
  w.write(path, true);
  const auto bytes = w.bytes();
  EXPECT_EQ(fs::file_size(path), bytes.size());
  EXPECT_EQ(bytes.size() % alignment, 0U);
  const auto opened = GgufFile::open(path);
  EXPECT_EQ(opened->path(), path.string());
  check_full(*opened, alignment, true);
  const auto parsed = GgufFile::parse(bytes, "memory");
  check_full(*parsed, alignment, false);
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(GgufAlignments, GgufRoundTrip, ::testing::Values(32U, 64U));

TEST(GgufWriter, RefusesToOverwrite) {
  const fs::path path = temp_folder() / "exists.gguf";
  GgufWriter w;
  w.set_u32("x", 1);
  w.write(path, true);
  expect_refused([&] { w.write(path); }, path.string(), "already exists");
  w.set_u32("x", 2);  // replaces, no duplicate
  w.write(path, true);
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->metadata().size(), 1U);
  EXPECT_EQ(f->get_uint("x"), 2U);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  fs::remove(path);
}

TEST(GgufWriter, RefusesBadTensors) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("t", {100}, WeightType::kQ4_K, std::vector<std::uint8_t>(144)), ParameterError);
  EXPECT_THROW(w.add_tensor("t", {256}, WeightType::kQ4_K, std::vector<std::uint8_t>(143)), ParameterError);
  EXPECT_THROW(w.add_tensor(std::string(65, 'n'), {1}, WeightType::kF32, std::vector<std::uint8_t>(4)),
               ParameterError);
  w.add_tensor("t", {1}, WeightType::kF32, std::vector<std::uint8_t>(4));
  EXPECT_THROW(w.add_tensor("t", {1}, WeightType::kF32, std::vector<std::uint8_t>(4)), ParameterError);
  EXPECT_THROW(GgufWriter(48), ParameterError);
}

TEST(GgufReader, AcceptsVersion2AndKnownUnsupportedTypes) {
  // Version 2, general.alignment as a u64, a Q4_1 tensor (id 3: 32 elements in
  // 20 bytes), which the reader accepts and the model builder refuses later.
  Bytes b;
  b.header(1, 1, 2).str("general.alignment").u32(10).u64(64);
  b.tensor("q4_1", {64}, 3, 0).pad(64).zeros(40);
  const auto f = GgufFile::parse(b.b, "v2.gguf");
  EXPECT_EQ(f->version(), 2U);
  EXPECT_EQ(f->alignment(), 64U);
  ASSERT_EQ(f->tensors().size(), 1U);
  EXPECT_EQ(f->tensors()[0].type, 3U);
  EXPECT_EQ(f->tensors()[0].bytes, 40U);
}

TEST(GgufReader, NestedArraysKeepTheirCount) {
  Bytes b;
  b.header(0, 1).str("nested").u32(9).u32(9).u64(2);  // array of 2 arrays
  b.u32(4).u64(1).u32(7);                              //   [u32 7]
  b.u32(8).u64(1).str("s");                            //   ["s"]
  const auto f = GgufFile::parse(b.b, "nested.gguf");
  EXPECT_EQ(f->find("nested")->element, GgufType::kArray);
  EXPECT_EQ(f->find("nested")->count, 2U);
}

// Nested arrays are checked and skipped, never held: 200,000 empty ones
// (2.4 MB) cost little more than the copy of the file's bytes (they took 16
// times their bytes as values: a 24 MB file, 380 MB).
TEST(GgufReader, NestedArraysAreNotHeld) {
  Bytes b;
  constexpr std::uint64_t kInner = 200000;
  b.header(0, 1).str("nested").u32(9).u32(9).u64(kInner);
  for (std::uint64_t i = 0; i < kInner; ++i) b.u32(4).u64(0);
  std::size_t allocated = 0;
  {
    testing::CountAllocations count;
    const auto f = GgufFile::parse(b.b, "nested.gguf");
    EXPECT_EQ(f->find("nested")->count, kInner);
    allocated = count.bytes();
  }
  EXPECT_LT(allocated, b.b.size() + 4096);
  // A nested array's element is still checked.
  Bytes bad;
  bad.header(0, 1).str("nested").u32(9).u32(9).u64(1).u32(99).u64(0);
  expect_bad(bad, "key 'nested': unknown array element type 99");
}

// Two tensors whose bytes overlap would read as each other's weights.
TEST(GgufReader, OverlappingTensorsAreRefused) {
  Bytes b;
  b.header(2, 0);
  b.tensor("a", {64}, 0, 0);    // F32: 256 bytes from 0
  b.tensor("b", {32}, 0, 128);  // from 128, inside a
  b.pad(32).zeros(512);
  expect_bad(b, "tensors 'a' (bytes 0 ... 256) and 'b' (from byte 128) overlap in the data section");
  Bytes ok;
  ok.header(2, 0);
  ok.tensor("b", {32}, 0, 256).tensor("a", {64}, 0, 0);  // listed out of order, end to end
  ok.pad(32).zeros(384);
  EXPECT_EQ(GgufFile::parse(ok.b, "ok.gguf")->tensors().size(), 2U);
}

// Lookups by name are indexed: every one of 100,000 tensors is found.
TEST(GgufReader, EveryTensorIsFoundByName) {
  GgufWriter w;
  constexpr int kTensors = 100000;
  for (int i = 0; i < kTensors; ++i) {
    std::vector<std::uint8_t> bytes(4);
    std::memcpy(bytes.data(), &i, 4);
    w.add_tensor("t." + std::to_string(i), {1}, WeightType::kF32, std::move(bytes));
  }
  const auto f = GgufFile::parse(w.bytes(), "many.gguf");
  for (int i = 0; i < kTensors; ++i) {
    const GgufTensor* t = f->tensor("t." + std::to_string(i));
    ASSERT_NE(t, nullptr) << i;
    int v = 0;
    std::memcpy(&v, t->data, 4);
    ASSERT_EQ(v, i);
  }
  EXPECT_EQ(f->tensor("t.100000"), nullptr);
}

TEST(GgufReader, TypedGettersNameTheKey) {
  GgufWriter w;
  w.set_string("s", "text");
  w.set_i32("neg", -3);
  w.set_u32("n", 3);
  const auto f = GgufFile::parse(w.bytes(), "get.gguf");
  expect_refused([&] { f->get_uint("s"); }, "get.gguf", "key 's' is string, expected an integer");
  expect_refused([&] { f->get_uint("neg"); }, "get.gguf", "key 'neg' is negative (-3)");
  expect_refused([&] { f->get_uint("nothing"); }, "get.gguf", "missing key 'nothing'");
  expect_refused([&] { f->get_float("s"); }, "get.gguf", "key 's' is string, expected a number");
  expect_refused([&] { f->get_string("n"); }, "get.gguf", "key 'n' is u32, expected a string");
  expect_refused([&] { f->get_bool_if("n"); }, "get.gguf", "key 'n' is u32, expected a bool");
  EXPECT_EQ(f->get_uint_if("nothing"), std::nullopt);
  EXPECT_EQ(f->get_float("n"), 3.0);
}

// ---- bad files ----------------------------------------------------------------

// A valid file with one Q8_0 tensor "w" [64] (68 bytes) at offset 0.
Bytes valid_file() {
  Bytes b;
  b.header(1, 1).kv_u32("general.alignment", 32);
  b.tensor("w", {64}, 8, 0).pad(32).zeros(68).pad(32);
  return b;
}

TEST(GgufBadFiles, ValidBaseline) { EXPECT_EQ(GgufFile::parse(valid_file().b, "ok.gguf")->tensors().size(), 1U); }

TEST(GgufBadFiles, WrongMagicAndShortFiles) {
  Bytes b = valid_file();
  b.b[3] = 'X';
  expect_bad(b, "not a GGUF file (bad magic");
  expect_bad(Bytes{}, "not a GGUF file (only 0 bytes)");
  Bytes two;
  two.b = {'G', 'G'};
  expect_bad(two, "not a GGUF file (only 2 bytes)");
}

TEST(GgufBadFiles, TruncatedHeader) {
  const Bytes whole = valid_file();
  for (const std::size_t cut : {6U, 12U, 20U, 75U, 85U}) {
    Bytes b;
    b.b.assign(whole.b.begin(), whole.b.begin() + static_cast<std::ptrdiff_t>(cut));
    expect_bad(b, "truncated header");
  }
}

TEST(GgufBadFiles, TruncatedDataAndOffsetPastTheEnd) {
  Bytes b = valid_file();
  b.b.resize(b.b.size() - 40);  // 68 data bytes no longer all there
  expect_bad(b, "tensor 'w': data at offset 0 (68 bytes) runs past the end of the file");
  Bytes far;
  far.header(1, 0).tensor("w", {64}, 8, 1024).pad(32).zeros(96);
  expect_bad(far, "tensor 'w': data at offset 1024 (68 bytes) runs past the end");
  Bytes huge;
  huge.header(1, 0).tensor("w", {64}, 8, 0xFFFFFFFFFFFFFFE0ULL).pad(32).zeros(96);
  expect_bad(huge, "runs past the end");
  // Through open(): the message names the path.
  const fs::path path = temp_folder() / "truncated.gguf";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.b.data()), static_cast<std::streamsize>(b.b.size()));
  }
  expect_refused([&] { GgufFile::open(path); }, path.string(), "runs past the end");
  fs::remove(path);
  expect_refused([&] { GgufFile::open(path); }, path.string(), "cannot open");
}

TEST(GgufBadFiles, MisalignedOffset) {
  Bytes b;
  b.header(1, 0).tensor("w", {64}, 8, 8).pad(32).zeros(96);
  expect_bad(b, "tensor 'w': offset 8 is not a multiple of the alignment 32");
}

TEST(GgufBadFiles, RowNotAWholeBlock) {
  Bytes b;
  b.header(1, 0).tensor("blk.0.ffn_down.weight", {100, 2}, 12, 0).pad(32).zeros(512);
  expect_bad(b, "tensor 'blk.0.ffn_down.weight': ne[0] = 100 is not a multiple of Q4_K's block of 256");
}

TEST(GgufBadFiles, UnknownTypeId) {
  for (const std::uint32_t id : {4U, 33U, 1000U}) {
    Bytes b;
    b.header(1, 0).tensor("w", {64}, id, 0).pad(32).zeros(256);
    expect_bad(b, "tensor 'w': unknown ggml type id " + std::to_string(id));
  }
}

TEST(GgufBadFiles, DimensionCounts) {
  Bytes zero;
  zero.header(1, 0).tensor("w", {}, 0, 0).pad(32).zeros(64);
  expect_bad(zero, "tensor 'w': n_dims 0 (must be 1 to 4)");
  Bytes five;
  five.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).pad(32).zeros(64);
  expect_bad(five, "tensor 'w': n_dims 5 (must be 1 to 4)");
  Bytes empty_dim;
  empty_dim.header(1, 0).tensor("w", {4, 0}, 0, 0).pad(32).zeros(64);
  expect_bad(empty_dim, "tensor 'w': ne[1] is 0");
  Bytes overflow;
  overflow.header(1, 0).tensor("w", {1ULL << 32, 1ULL << 32}, 0, 0).pad(32).zeros(64);
  expect_bad(overflow, "tensor 'w': the element count overflows");
}

TEST(GgufBadFiles, HostileCountsRefusedWithoutAllocating) {
  Bytes tensors;
  tensors.header(1ULL << 60, 0).zeros(64);
  expect_bad_quickly(tensors, "tensor count 1152921504606846976 cannot fit");
  Bytes kvs;
  kvs.header(0, 1ULL << 60).zeros(64);
  expect_bad_quickly(kvs, "metadata count 1152921504606846976 cannot fit");
  Bytes string_length;  // a string value of 2^40 bytes
  string_length.header(0, 1).str("general.name").u32(8).u64(1ULL << 40).zeros(64);
  expect_bad_quickly(string_length, "truncated header: general.name needs 1099511627776 bytes");
  Bytes array_count;  // 2^50 strings
  array_count.header(0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(1ULL << 50).zeros(64);
  expect_bad_quickly(array_count, "key 'tokenizer.ggml.tokens': array count 1125899906842624 cannot fit");
  Bytes u8_count;  // even one byte per element does not fit
  u8_count.header(0, 1).str("k").u32(9).u32(0).u64(1000).zeros(64);
  expect_bad_quickly(u8_count, "key 'k': array count 1000 cannot fit");
  Bytes name_length;
  name_length.header(1, 0).u64(1ULL << 62).zeros(64);
  expect_bad_quickly(name_length, "truncated header: tensor name needs 4611686018427387904 bytes");
}

TEST(GgufBadFiles, LongKeysAndNames) {
  Bytes key;
  key.header(0, 1).str(std::string(70000, 'k')).u32(4).u32(1);
  expect_bad(key, "metadata key 0 is 70000 bytes long (at most 65535)");
  Bytes name;
  name.header(1, 0).tensor(std::string(65, 'n'), {1}, 0, 0).pad(32).zeros(32);
  expect_bad(name, "is 65 bytes long (at most 64)");
  Bytes name64;  // 64 bytes is allowed
  name64.header(1, 0).tensor(std::string(64, 'n'), {1}, 0, 0).pad(32).zeros(32);
  EXPECT_EQ(GgufFile::parse(name64.b, "ok.gguf")->tensors()[0].name.size(), 64U);
}

TEST(GgufBadFiles, Duplicates) {
  Bytes keys;
  keys.header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  expect_bad(keys, "duplicate key 'a.b'");
  Bytes names;
  names.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad(32).zeros(64);
  expect_bad(names, "duplicate tensor 'w'");
}

TEST(GgufBadFiles, Versions) {
  Bytes v1;
  v1.header(0, 0, 1);
  expect_bad(v1, "GGUF version 1 is not supported");
  Bytes v4;
  v4.header(0, 0, 4);
  expect_bad(v4, "GGUF version 4 is newer than this reader");
  Bytes swapped;
  swapped.header(0, 0, 0x03000000);
  expect_bad(swapped, "byte-swapped (big-endian) GGUF file");
}

TEST(GgufBadFiles, BadAlignment) {
  Bytes odd;
  odd.header(0, 1).kv_u32("general.alignment", 48);
  expect_bad(odd, "key 'general.alignment' is 48, not a power of two");
  Bytes zero;
  zero.header(0, 1).kv_u32("general.alignment", 0);
  expect_bad(zero, "key 'general.alignment' is 0, not a power of two");
  Bytes negative;
  negative.header(0, 1).str("general.alignment").u32(5).put<std::int32_t>(-32);
  expect_bad(negative, "key 'general.alignment' is -32, not a power of two");
  Bytes real;
  real.header(0, 1).str("general.alignment").u32(6).put<float>(32.0f);
  expect_bad(real, "key 'general.alignment' is f32, not an integer");
}

TEST(GgufBadFiles, BadValues) {
  Bytes type;
  type.header(0, 1).str("k").u32(13).u32(0);
  expect_bad(type, "key 'k': unknown value type 13");
  Bytes element;
  element.header(0, 1).str("k").u32(9).u32(99).u64(0);
  expect_bad(element, "key 'k': unknown array element type 99");
  Bytes boolean;
  boolean.header(0, 1).str("k").u32(7).u8(2);
  expect_bad(boolean, "key 'k': bool value 2 is neither 0 nor 1");
  Bytes bool_array;
  bool_array.header(0, 1).str("k").u32(9).u32(7).u64(2).u8(1).u8(7);
  expect_bad(bool_array, "key 'k': bool value 7 is neither 0 nor 1");
  // 64-bit integers past 2^53 (a double's exact range) and past 2^63 are
  // kept whole; as a size, a u64 past 2^63 - 1 is refused where it is read.
  Bytes big;
  big.header(0, 2).str("a").u32(9).u32(10).u64(2).u64((1ULL << 53) + 1).u64(~0ULL).str("k").u32(10).u64(~0ULL);
  const auto file = GgufFile::parse(big.b, "big.gguf");
  EXPECT_EQ(file->find("a")->bits64, (std::vector<std::uint64_t>{(1ULL << 53) + 1, ~0ULL}));
  EXPECT_EQ(file->find("k")->unsigned_integer, ~0ULL);
  expect_refused([&] { (void)file->get_uint("k"); }, "big.gguf", "key 'k' is 18446744073709551615, too large for a size");
  Bytes deep;
  deep.header(0, 1).str("k").u32(9);
  for (int i = 0; i < 12; ++i) deep.u32(9).u64(1);
  deep.zeros(16);
  expect_bad(deep, "key 'k': arrays nested deeper than 8");
}

}  // namespace
}  // namespace kvevict
