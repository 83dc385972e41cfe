#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>

#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/npy.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

// A temporary folder per test, removed afterwards.
class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvevict-npy-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes an .npy with the given header dict and raw data bytes.
  fs::path write(const std::string& name, const std::string& dict, const std::string& data,
                 const std::string& magic = std::string("\x93NUMPY\x01\x00", 8)) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    const fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    out << magic;
    out.put(static_cast<char>(header.size() & 0xFF));
    out.put(static_cast<char>(header.size() >> 8));
    out << header << data;
    return p;
  }

  template <class T>
  static std::string bytes(const std::vector<T>& v) {
    return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
  }

  std::string error_of(const fs::path& p) {
    try {
      auto heads = open_trace_heads(p.string());
      for (auto& h : heads) {
        for (std::uint32_t t = 0; t < h->steps(); ++t) h->next();
      }
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
};

// A 4-position matrix: row t covers 0 ... t-1; the upper triangle is ignored.
const std::vector<float> kMatrix{
    9, 9, 9, 9,           //
    1, 9, 9, 9,           // step 1
    0.25F, 0.75F, 9, 9,   // step 2
    0.5F, 0.25F, 0.25F, 9  // step 3
};

TEST_F(Npy, Float32RowsAreTheSteps) {
  const auto p = write("a.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }", bytes(kMatrix));
  NpyTrace trace(p, 0);
  EXPECT_EQ(trace.length(), 4U);
  EXPECT_EQ(trace.steps(), 3U);
  auto s1 = trace.next();
  ASSERT_EQ(s1.size(), 1U);
  EXPECT_EQ(s1[0], 1.0F);
  trace.next();
  auto s3 = trace.next();
  EXPECT_EQ((std::vector<float>(s3.begin(), s3.end())), (std::vector<float>{0.5F, 0.25F, 0.25F}));
  EXPECT_THROW(trace.next(), InputError);
  trace.rewind();
  EXPECT_EQ(trace.next().size(), 1U);
}

TEST_F(Npy, Float16AndFloat64AreConverted) {
  // float16: 1.0 = 0x3C00, 0.25 = 0x3400, 0.75 = 0x3A00, 0.5 = 0x3800
  const std::vector<std::uint16_t> half{0, 0, 0, 0x3C00, 0, 0, 0x3400, 0x3A00, 0};
  const auto p16 = write("h.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (3, 3), }", bytes(half));
  NpyTrace t16(p16, 0);
  EXPECT_EQ(t16.next()[0], 1.0F);
  const auto s2 = t16.next();
  EXPECT_EQ(s2[0], 0.25F);
  EXPECT_EQ(s2[1], 0.75F);
  const std::vector<double> dbl{0, 0, 0, 1.0, 0, 0, 0.5, 0.5, 0};
  const auto p64 = write("d.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 3), }", bytes(dbl));
  NpyTrace t64(p64, 0);
  t64.next();
  EXPECT_EQ(t64.next()[1], 0.5F);
}

TEST_F(Npy, GeneratedTracesRoundTripBitForBit) {
  DecodeTrace trace;
  const fs::path p = dir_ / "decode.npy";
  write_npy_trace(trace, 300, p, false);
  NpyTrace back(p, 0);
  EXPECT_EQ(trace_hash(back, 300), 1432877681U);  // the spec's 300-step prefix hash
  EXPECT_THROW(write_npy_trace(trace, 300, p, false), InputError);  // never overwritten silently
  EXPECT_NO_THROW(write_npy_trace(trace, 10, p, true));
  EXPECT_EQ(NpyTrace(p, 0).length(), 11U);
  EXPECT_FALSE(fs::exists(dir_ / "decode.npy.tmp"));
}

TEST_F(Npy, ReplayedRunsMatchTheGeneratedTrace) {
  DecodeTrace trace;
  const fs::path p = dir_ / "decode.npy";
  write_npy_trace(trace, 400, p, false);
  EvaluateOptions from_file;
  from_file.trace = p.string();
  EvaluateOptions generated;
  generated.steps = 400;
  const std::vector<RunSpec> specs{{"scissorhands", {{"recentWindow", 16}}, 64}, {"tova", {}, 100}};
  const auto a = evaluate(specs, from_file);
  const auto b = evaluate(specs, generated);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(a[i].totals.total_retained_mass, b[i].totals.total_retained_mass);
    EXPECT_EQ(a[i].totals.total_heavy_hits, b[i].totals.total_heavy_hits);
    EXPECT_EQ(a[i].metrics.retained_attention_mass, b[i].metrics.retained_attention_mass);
  }
}

TEST_F(Npy, SeveralHeadsRunAsSeparateInstancesAndAverage) {
  // Head 0 is kMatrix; head 1 reverses the preference at step 3.
  std::vector<float> two = kMatrix;
  const std::vector<float> head1{9, 9, 9, 9, 1, 9, 9, 9, 0.75F, 0.25F, 9, 9, 0.0625F, 0.25F, 0.6875F, 9};
  two.insert(two.end(), head1.begin(), head1.end());
  const auto p = write("heads.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4, 4), }", bytes(two));
  EvaluateOptions options;
  options.trace = p.string();
  const auto rows = evaluate({{"tova", {}, 2}}, options);
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_EQ(rows[0].heads, 2U);
  ASSERT_EQ(rows[0].head_metrics.size(), 2U);
  // Budget 2, TOVA. Head 0: step 1 holds {0}: mass 1; evicts 0 after step 2?
  // Step 1: held {0}, mass 1. Admit 1: {0,1} fits. Step 2: mass 1. Admit 2:
  // {0,1,2} > 2: last weights 0 -> 0.25, 1 -> 0.75: 0 goes. Step 3 held {1,2}:
  // head 0 mass 0.25 + 0.25 = 0.5; head 1 (0 -> 0.75, 1 -> 0.25: 1 goes) holds
  // {0, 2}: 0.0625 + 0.6875 = 0.75.
  EXPECT_EQ(rows[0].head_metrics[0].retained_attention_mass, round6(2.5 / 3));
  EXPECT_EQ(rows[0].head_metrics[1].retained_attention_mass, round6(2.75 / 3));
  EXPECT_EQ(rows[0].metrics.retained_attention_mass, round6((2.5 / 3 + 2.75 / 3) / 2));
  EXPECT_EQ(rows[0].metrics.eviction_calls, 4);  // 2 per head
}

TEST_F(Npy, BadFilesAreNamedWithTheProblem) {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }";
  const auto name = [&](const char* n) { return (dir_ / n).string(); };
  EXPECT_EQ(error_of(write("magic.npy", ok_dict, bytes(kMatrix), std::string("\x93NUMPX\x01\x00", 8))),
            name("magic.npy") + ": not a .npy file (wrong magic)");
  EXPECT_EQ(error_of(write("int.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 4), }", bytes(kMatrix))),
            name("int.npy") + ": unsupported dtype '<i4': use float16, float32 or float64, little-endian");
  EXPECT_EQ(error_of(write("big.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (4, 4), }", bytes(kMatrix))),
            name("big.npy") + ": unsupported dtype '>f4': use float16, float32 or float64, little-endian");
  EXPECT_EQ(error_of(write("f.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 4), }", bytes(kMatrix))),
            name("f.npy") + ": Fortran order is not supported: save the array in C order");
  EXPECT_EQ(error_of(write("rect.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 8), }", bytes(kMatrix))),
            name("rect.npy") + ": shape [..., 2, 8] is not square: row t must cover positions 0 ... N-1");
  EXPECT_EQ(error_of(write("1d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (16,), }", bytes(kMatrix))),
            name("1d.npy") + ": shape has 1 dimensions: expected [N, N] or [H, N, N]");
  EXPECT_EQ(error_of(write("short.npy", ok_dict, bytes(kMatrix).substr(0, 40))),
            name("short.npy") + ": the file is truncated: shape needs 64 bytes of data, found 40");
  EXPECT_EQ(error_of(write("tiny.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }", bytes(kMatrix))),
            name("tiny.npy") + ": N (1) must be at least 2: there is no decode step");
  std::vector<float> nan = kMatrix;
  nan[9] = NAN;  // row 2, column 1
  EXPECT_EQ(error_of(write("nan.npy", ok_dict, bytes(nan))),
            name("nan.npy") + ": head 0 row 2 column 1 is NaN: weights must be finite and at least 0");
  EXPECT_EQ(error_of(write("nokey.npy", "{'descr': '<f4', 'shape': (4, 4), }", bytes(kMatrix))),
            name("nokey.npy") + ": the .npy header lacks 'descr', 'fortran_order' or 'shape'");
  EXPECT_EQ(error_of(dir_ / "missing.npy"), name("missing.npy") + ": cannot be opened");
}

// A shape whose byte count wraps around 2^64 used to pass the truncation
// check: (8192, 16777216, 16777216) of 8-byte items is 2^13 * 2^24 * 2^24 * 2^3
// = 2^64 bytes, which is 0 in 64 bits, so a 192-byte file was accepted and then
// asked for 8,192 traces of 16,777,216 positions (192 MiB of buffers each).
TEST_F(Npy, AShapeWhoseSizeWrapsIsRefusedNamingFileAndShape) {
  const auto p = write("wrap.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (8192, 16777216, 16777216), }",
                       std::string(64, '\0'));
  ASSERT_EQ(fs::file_size(p), 192U);  // the file from the report: 128 bytes of header, 64 of data
  const std::string want = p.string() +
                           ": shape (8192, 16777216, 16777216) of 8-byte items is too large: its data would "
                           "end beyond the largest file offset (2^63 - 1 bytes)";
  EXPECT_EQ(error_of(p), want);
  try {
    read_npy_header(p);
    ADD_FAILURE() << "read_npy_header accepted the shape";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
  // Sizes that fit are still accepted as far as the header goes: the same
  // shape with 2 heads is 2^52 bytes, and only the truncation check refuses it.
  const auto fits = write("fits.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 16777216, 16777216), }",
                          std::string(64, '\0'));
  EXPECT_EQ(error_of(fits), fits.string() +
                                ": the file is truncated: shape needs 4503599627370496 bytes of data, found 64");
}

// The row offset wrapped the same way, so a head past the wrap read another
// head's rows. (65536, 16777216, 16777216) of float16: each head is
// 2^24 * 2^24 * 2 = 2^49 bytes and the whole 2^65 bytes, 0 in 64 bits, so the
// old truncation check passed; head 32768 starts at 32768 * 2^49 = 2^64, which
// wrapped to head 0, and its row 1 was read from head 0's row 1 (at byte
// 2^24 * 2 = 2^25 of the data). The file is sparse: 32 MiB long, 4 KiB stored.
TEST_F(Npy, ARowOffsetThatWouldWrapIsRefusedBeforeAnyRowIsRead) {
  const auto p = write("rows.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (65536, 16777216, 16777216), }",
                       "");
  const std::uint64_t data_offset = fs::file_size(p);
  ASSERT_EQ(data_offset, 128U);
  {
    std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(data_offset + (std::uint64_t{1} << 25)));
    const char one[2] = {0x00, 0x3C};  // float16 1.0, little-endian: head 0 row 1 column 0
    f.write(one, 2);
  }
  const std::string want = p.string() +
                           ": shape (65536, 16777216, 16777216) of 2-byte items is too large: its data would "
                           "end beyond the largest file offset (2^63 - 1 bytes)";
  try {
    NpyTrace trace(p, 32768);
    const auto row = trace.next();
    ADD_FAILURE() << "head 32768 row 1 was read: " << row.size() << " weight(s), the first " << row[0];
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

}  // namespace
}  // namespace kvevict
