// safetensors: writer -> reader round trips (one file, a folder, an index
// over shards) and the reader refusing bad files with one-line messages
// naming the file and the problem.

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/safetensors.h"
#include "kvevict/model/kernels/weight_types.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, under one per process (ctest runs programs in parallel).
fs::path test_folder(const std::string& name) {
  static const testing::ScratchFolder root("kvevict-safetensors-test");  // removed as the process exits
  const fs::path dir = root / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

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

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A raw file: the header's length as given (or its real one), the header, the data.
fs::path raw_file(const fs::path& path, const std::string& header, std::size_t data_bytes,
                  std::uint64_t length = ~0ULL) {
  if (length == ~0ULL) length = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &length, 8);
  bytes += header;
  bytes.append(data_bytes, '\0');
  write_bytes(path, bytes);
  return path;
}

std::vector<std::uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<std::uint8_t> u16_bytes(const std::vector<std::uint16_t>& v) {
  std::vector<std::uint8_t> out;
  for (const std::uint16_t x : v) {
    out.push_back(static_cast<std::uint8_t>(x & 0xFF));
    out.push_back(static_cast<std::uint8_t>(x >> 8));
  }
  return out;
}

std::vector<SafetensorsEntry> three_tensors() {
  return {
      {"model.embed_tokens.weight", "F32", {2, 3}, f32_bytes({1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f})},
      {"model.norm.weight", "F16", {3}, u16_bytes({0x3C00, 0xC000, 0x3800})},  // 1, -2, 0.5
      {"lm_head.weight", "BF16", {1, 2}, u16_bytes({0x3F80, 0xC040})},          // 1, -3
  };
}

void check_three(const Safetensors& st, const std::string& file) {
  ASSERT_EQ(st.tensors().size(), 3U);
  const SafetensorsTensor* embed = st.tensor("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, "F32");
  EXPECT_EQ(embed->shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(embed->elements, 6U);
  EXPECT_EQ(embed->bytes, 24U);
  EXPECT_EQ(embed->file, file);
  std::vector<float> out(6);
  st.to_floats(*embed, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f}));
  const SafetensorsTensor* norm = st.tensor("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  st.to_floats(*norm, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.5f);
  const SafetensorsTensor* head = st.tensor("lm_head.weight");
  ASSERT_NE(head, nullptr);
  st.to_floats(*head, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(st.tensor("nothing"), nullptr);
}

TEST(SafetensorsRoundTrip, OneFile) {
  const fs::path dir = test_folder("one");
  const fs::path path = dir / "model.safetensors";
  write_safetensors(path, three_tensors(), {{"format", "pt"}});
  // The header is padded with spaces to a multiple of 8.
  std::ifstream in(path, std::ios::binary);
  std::uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  EXPECT_EQ(length % 8, 0U);
  const auto st = Safetensors::open(path);
  check_three(*st, path.string());
  EXPECT_EQ(st->metadata().at("format"), "pt");
  // Offsets ascending, in the order given, back to back.
  const auto& t = st->tensors();
  EXPECT_EQ(t[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(t[1].data, t[0].data + 24);
  EXPECT_EQ(t[2].data, t[1].data + 6);
  EXPECT_EQ(fs::file_size(path), 8 + length + 24 + 6 + 4);
  // The folder holding it opens too.
  check_three(*Safetensors::open(dir), path.string());
  // No overwrite unless asked.
  expect_refused([&] { write_safetensors(path, three_tensors()); }, path.string(), "already exists");
  write_safetensors(path, three_tensors(), {}, true);
  EXPECT_TRUE(Safetensors::open(path)->metadata().empty());
}

TEST(SafetensorsRoundTrip, IndexOverShards) {
  const fs::path dir = test_folder("sharded");
  auto all = three_tensors();
  write_safetensors(dir / "model-00001-of-00002.safetensors", {all[0], all[1]}, {{"format", "pt"}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {all[2]});
  write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {"total_size": 34}, "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00001-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors"}})");
  const auto st = Safetensors::open(dir / "model.safetensors.index.json");
  ASSERT_EQ(st->tensors().size(), 3U);
  EXPECT_EQ(st->tensor("lm_head.weight")->file, (dir / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ(st->metadata().at("format"), "pt");
  std::vector<float> out(6);
  st->to_floats(*st->tensor("model.embed_tokens.weight"), out.data());
  EXPECT_EQ(out[3], 3.25f);
  // The folder prefers the index.
  EXPECT_EQ(Safetensors::open(dir)->tensors().size(), 3U);
}

TEST(SafetensorsRoundTrip, OtherDtypesReadButNotAsFloats) {
  const fs::path dir = test_folder("dtypes");
  const fs::path path = raw_file(dir / "ids.safetensors",
                                 R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16);
  const auto st = Safetensors::open(path);
  ASSERT_EQ(st->tensors().size(), 1U);
  EXPECT_EQ(st->tensors()[0].dtype, "I64");
  std::vector<float> out(2);
  expect_refused([&] { st->to_floats(st->tensors()[0], out.data()); }, path.string(),
                 "tensor 'ids': dtype I64 cannot be read as floats");
}

// ---- bad files ----------------------------------------------------------------

TEST(SafetensorsBadFiles, HeaderLength) {
  const fs::path dir = test_folder("length");
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const fs::path big = raw_file(dir / "big.safetensors", header, 4, 1ULL << 40);
  expect_refused([&] { Safetensors::open(big); }, big.string(), "bad header length 1099511627776");
  const fs::path tiny = dir / "tiny.safetensors";
  write_bytes(tiny, "abc");
  expect_refused([&] { Safetensors::open(tiny); }, tiny.string(), "not a safetensors file (only 3 bytes)");
}

TEST(SafetensorsBadFiles, BadJson) {
  const fs::path dir = test_folder("json");
  const fs::path bad = raw_file(dir / "bad.safetensors", "{\"a\": [1,\n 2", 0);
  expect_refused([&] { Safetensors::open(bad); }, bad.string(), "the header is not valid JSON");
  const fs::path array = raw_file(dir / "array.safetensors", "[1, 2]", 0);
  expect_refused([&] { Safetensors::open(array); }, array.string(), "the header is not a JSON object");
  const fs::path meta = raw_file(dir / "meta.safetensors", R"({"__metadata__":{"n":1}})", 0);
  expect_refused([&] { Safetensors::open(meta); }, meta.string(), "__metadata__ 'n' is not a string");
  const fs::path negative =
      raw_file(dir / "negative.safetensors", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  expect_refused([&] { Safetensors::open(negative); }, negative.string(), "tensor 'a': shape holds -1");
}

TEST(SafetensorsBadFiles, Offsets) {
  const fs::path dir = test_folder("offsets");
  const fs::path out_of_range =
      raw_file(dir / "range.safetensors", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4);
  expect_refused([&] { Safetensors::open(out_of_range); }, out_of_range.string(),
                 "tensor 'a': data_offsets [0, 8) out of range (the data has 4 bytes)");
  const fs::path backwards =
      raw_file(dir / "backwards.safetensors", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4);
  expect_refused([&] { Safetensors::open(backwards); }, backwards.string(), "out of range");
  const fs::path mismatch =
      raw_file(dir / "mismatch.safetensors", R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", 8);
  expect_refused([&] { Safetensors::open(mismatch); }, mismatch.string(),
                 "tensor 'a': data_offsets [0, 8) hold 8 bytes, its shape and dtype take 6");
  const fs::path overflow = raw_file(
      dir / "overflow.safetensors",
      R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4);
  expect_refused([&] { Safetensors::open(overflow); }, overflow.string(), "tensor 'a': the shape's size overflows");
  const fs::path no_pair =
      raw_file(dir / "pair.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4);
  expect_refused([&] { Safetensors::open(no_pair); }, no_pair.string(), "not a [begin, end] pair");
  // Two tensors sharing bytes would read as each other's weights.
  const fs::path overlap = raw_file(
      dir / "overlap.safetensors",
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      16);
  expect_refused([&] { Safetensors::open(overlap); }, overlap.string(),
                 "tensors 'a' (data_offsets [0, 16)) and 'b' (from 8) overlap");
}

TEST(SafetensorsBadFiles, UnknownDtype) {
  const fs::path dir = test_folder("dtype");
  const fs::path path =
      raw_file(dir / "dtype.safetensors", R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1);
  expect_refused([&] { Safetensors::open(path); }, path.string(), "tensor 'a': unknown dtype 'F7'");
}

TEST(SafetensorsBadFiles, Shards) {
  const fs::path dir = test_folder("shards");
  auto all = three_tensors();
  write_safetensors(dir / "a.safetensors", {all[0], all[1]});
  write_safetensors(dir / "b.safetensors", {all[1], all[2]});
  const fs::path index = dir / "model.safetensors.index.json";
  write_bytes(index, R"({"weight_map": {"model.embed_tokens.weight": "a.safetensors",
      "lm_head.weight": "missing.safetensors"}})");
  expect_refused([&] { Safetensors::open(index); }, index.string(), "missing shard 'missing.safetensors'");
  write_bytes(index, R"({"weight_map": {"model.norm.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}})");
  expect_refused([&] { Safetensors::open(index); }, index.string(),
                 "tensor 'model.norm.weight' is in two shards, 'a.safetensors' and 'b.safetensors'");
  write_bytes(index, R"({"weight_map": {"lm_head.weight": "a.safetensors"}})");
  expect_refused([&] { Safetensors::open(index); }, index.string(),
                 "tensor 'lm_head.weight' is not in its shard 'a.safetensors'");
  write_bytes(index, R"({"weight_map": {"lm_head.weight": "../b.safetensors"}})");
  expect_refused([&] { Safetensors::open(index); }, index.string(), "is not a file name inside the index's folder");
  write_bytes(index, R"({"weights": {}})");
  expect_refused([&] { Safetensors::open(index); }, index.string(), "has no \"weight_map\" object");
  write_bytes(index, R"({"weight_map": )");
  expect_refused([&] { Safetensors::open(index); }, index.string(), "the index is not valid JSON");
  const fs::path empty = test_folder("empty");
  expect_refused([&] { Safetensors::open(empty); }, empty.string(),
                 "holds neither model.safetensors nor model.safetensors.index.json");
  expect_refused([&] { Safetensors::open(empty / "none.safetensors"); }, (empty / "none.safetensors").string(),
                 "cannot open");
}

}  // namespace
}  // namespace kvevict
