// Keys, values and queries recorded beside an attention trace, replayed
// (eval/signal_files.h; `kvevict record --keys`, `run/compare --keys`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <fstream>
#include <map>

#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/npy.h"
#include "kvevict/eval/signal_files.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' lacks '" << part << "'";
}
using testing::committed_model;
using testing::heldout_prefix;

class SignalFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The process id too: ctest runs this binary several times at once (one
    // run per SIMD target), and a shared folder made them remove each other's files.
    dir_ = fs::temp_directory_path() /
           ("kvevict-signals-" + std::to_string(::getpid()) + "-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // An [N, N] trace whose row t spreads its weight evenly over positions 0 ... t-1.
  std::string uniform_trace(const std::string& name, std::uint64_t heads, std::uint64_t n) const {
    std::vector<float> data(heads * n * n, 0.0F);
    for (std::uint64_t h = 0; h < heads; ++h) {
      for (std::uint64_t t = 1; t < n; ++t) {
        for (std::uint64_t i = 0; i < t; ++i) data[(h * n + t) * n + i] = 1.0F / static_cast<float>(t);
      }
    }
    std::vector<std::uint64_t> shape{n, n};
    if (heads != 1) shape.insert(shape.begin(), heads);
    write_npy_floats(shape, data, path(name), false);
    return path(name);
  }

  std::string rows(const std::string& name, std::vector<std::uint64_t> shape, std::vector<float> data) const {
    write_npy_floats(shape, data, path(name), false);
    return path(name);
  }

  static std::string error_of(const std::vector<RunSpec>& specs, const EvaluateOptions& options) {
    try {
      evaluate(specs, options);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
};

// Keys with norms 5, 1, 2, 0.5: at budget 3 KNorm's one eviction (step 3)
// takes position 0, the largest norm -- which it can only know from on_origin.
TEST_F(SignalFilesTest, AHandMadeKeysFileGivesKNormTheVictimWorkedOutByHand) {
  EvaluateOptions options;
  options.trace = uniform_trace("attention.npy", 1, 4);
  options.signals.keys = rows("keys.npy", {4, 2}, {3.0F, 4.0F, 1.0F, 0.0F, 0.0F, 2.0F, 0.5F, 0.0F});
  std::map<std::uint32_t, std::vector<Position>> victims;
  std::vector<Position> kept;
  options.observe = [&](const StepView& v) {
    if (!v.victims.empty()) victims[v.step].assign(v.victims.begin(), v.victims.end());
    kept.assign(v.kept.begin(), v.kept.end());
  };
  const std::vector<RunRow> rows_out = evaluate({{"knorm", {}, 3}}, options);
  ASSERT_EQ(rows_out.size(), 1U);
  EXPECT_EQ(victims.size(), 1U);
  EXPECT_EQ(victims[3], (std::vector<Position>{0}));
  EXPECT_EQ(kept, (std::vector<Position>{1, 2, 3}));
  // headDim is read from the file and shown among the effective parameters.
  bool shown = false;
  for (const auto& [k, v] : rows_out.front().params) shown = shown || (k == "headDim" && v == 2);
  EXPECT_TRUE(shown);
  // Retained mass is the attention trace's: steps 1 and 2 keep everything,
  // step 3 (measured before the eviction) too.
  EXPECT_DOUBLE_EQ(rows_out.front().metrics.retained_attention_mass, 1.0);
}

// The same keys as float16 and float64: the same decision.
TEST_F(SignalFilesTest, Float16AndFloat64KeysAreAccepted) {
  const std::string trace = uniform_trace("attention.npy", 1, 4);
  // float16 of 3, 4, 1, 0, 0, 2, 0.5, 0 and float64 of the same.
  const std::uint16_t half[] = {0x4200, 0x4400, 0x3C00, 0, 0, 0x4000, 0x3800, 0};
  const double wide[] = {3, 4, 1, 0, 0, 2, 0.5, 0};
  for (const auto& [descr, bytes] :
       {std::pair{std::string("<f2"), std::string(reinterpret_cast<const char*>(half), sizeof half)},
        std::pair{std::string("<f8"), std::string(reinterpret_cast<const char*>(wide), sizeof wide)}}) {
    std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (4, 2), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    const std::string file = path("keys" + descr.substr(1) + ".npy");
    {
      std::ofstream out(file, std::ios::binary);
      out << std::string("\x93NUMPY\x01\x00", 8);
      out.put(static_cast<char>(header.size()));
      out.put(0);
      out << header << bytes;
    }
    EvaluateOptions options;
    options.trace = trace;
    options.signals.keys = file;
    std::vector<Position> kept;
    options.observe = [&](const StepView& v) { kept.assign(v.kept.begin(), v.kept.end()); };
    evaluate({{"knorm", {}, 3}}, options);
    EXPECT_EQ(kept, (std::vector<Position>{1, 2, 3})) << descr;
  }
}

// The replay of recorded keys holds exactly what the same policy holds inside
// the decoder, in every cache after every step. The recording is the full
// cache's (as recorded attention is), and a layer's keys depend on what the
// layers below it evicted: so the decoder runs the policy on one layer's
// caches at a time, which leaves every key as recorded.
TEST_F(SignalFilesTest, ReplayingRecordedKeysHoldsWhatTheDecoderHolds) {
  const auto model = committed_model();
  const ModelConfig& cfg = model->config();
  const std::vector<std::uint8_t> text = heldout_prefix(96);
  RecordFiles files;
  files.attention = path("attention.npy");
  files.keys = path("keys.npy");
  files.values = path("values.npy");
  files.queries = path("queries.npy");
  const std::uint32_t n = record_signals(*model, text, files);
  ASSERT_EQ(n, 96U);
  const std::int64_t budget = 24;
  for (const char* name : {"knorm", "keydiff"}) {
    // The decoder's side: one policy per cache of one layer, what it holds after each step.
    std::vector<std::vector<std::vector<Position>>> held(cfg.head_count());
    std::uint64_t evicted = 0;
    for (std::uint32_t layer = 0; layer < cfg.layers; ++layer) {
      Decoder decoder(model, n);
      std::vector<std::unique_ptr<Policy>> built;
      const ParamMap params = head_params({name, {}, budget}, cfg, layer);
      for (std::uint32_t kv = 0; kv < cfg.kv_heads; ++kv) {
        built.push_back(make_policy(name, params));
        decoder.set_policy(layer * cfg.kv_heads + kv, built.back().get(), budget);
      }
      for (std::uint32_t t = 0; t < n; ++t) {
        decoder.step(text[t]);
        for (std::uint32_t kv = 0; kv < cfg.kv_heads; ++kv) {
          const auto p = decoder.held(layer * cfg.kv_heads + kv);
          held[layer * cfg.kv_heads + kv].emplace_back(p.begin(), p.end());
        }
      }
      evicted += decoder.evicted();
    }
    ASSERT_GT(evicted, 0U);
    // The replay's side, from the files.
    EvaluateOptions options;
    options.trace = files.attention.string();
    options.signals.keys = files.keys.string();
    options.signals.values = files.values.string();
    options.signals.queries = files.queries.string();
    std::size_t compared = 0;
    options.observe = [&](const StepView& v) {
      const std::vector<Position> kept(v.kept.begin(), v.kept.end());
      ASSERT_EQ(kept, held[v.head][v.step]) << name << ": cache " << v.head << " step " << v.step;
      ++compared;
    };
    const std::vector<RunRow> rows_out = evaluate({{name, {}, budget}}, options);
    EXPECT_EQ(compared, std::size_t{cfg.head_count()} * (n - 1)) << name;
    EXPECT_EQ(rows_out.front().totals.evicted, static_cast<std::int64_t>(evicted)) << name;
  }
}

TEST_F(SignalFilesTest, RecordedFilesHoldWhatTheDecoderStoresAndTheAttentionIsRecordAttentions) {
  const auto model = committed_model();
  const ModelConfig& cfg = model->config();
  const std::vector<std::uint8_t> text = heldout_prefix(40);
  RecordFiles files;
  files.attention = path("attention.npy");
  files.keys = path("keys.npy");
  files.values = path("values.npy");
  files.queries = path("queries.npy");
  ASSERT_EQ(record_signals(*model, text, files), 40U);
  ASSERT_EQ(record_attention(*model, text, path("plain.npy"), false), 40U);
  const auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(slurp(files.attention), slurp(path("plain.npy")));
  const NpyHeader k = read_npy_header(files.keys, NpyLayout::kRows);
  const NpyHeader q = read_npy_header(files.queries, NpyLayout::kRows);
  EXPECT_EQ(k.shape, (std::vector<std::uint64_t>{cfg.head_count(), 40, cfg.head_dim()}));
  EXPECT_EQ(read_npy_header(files.values, NpyLayout::kRows).shape, k.shape);
  EXPECT_EQ(q.shape, (std::vector<std::uint64_t>{cfg.head_count(), 40, std::uint64_t{cfg.group()} * cfg.head_dim()}));
  // The keys and values are the full cache's rows as stored.
  Decoder decoder(model, 40);
  for (const std::uint8_t b : text) decoder.step(b);
  const std::string keys = slurp(files.keys);
  const std::string values = slurp(files.values);
  const std::size_t per_head = std::size_t{40} * cfg.head_dim() * sizeof(float);
  for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
    const auto [kr, vr] = decoder.held_rows(h);
    EXPECT_EQ(std::memcmp(keys.data() + k.data_offset + h * per_head, kr, per_head), 0) << "cache " << h;
    EXPECT_EQ(std::memcmp(values.data() + k.data_offset + h * per_head, vr, per_head), 0) << "cache " << h;
  }
  // Never over an existing file without overwrite, and nothing is written then.
  RecordFiles again = files;
  again.attention = path("new.npy");
  try {
    record_signals(*model, text, again);
    ADD_FAILURE() << "overwrote keys.npy";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(std::string(e.what()), "keys.npy: already exists (pass --force to replace it)"));
  }
  EXPECT_FALSE(fs::exists(path("new.npy")));
  again.overwrite = true;
  again.queries = again.keys;
  try {
    record_signals(*model, text, again);
    ADD_FAILURE() << "two outputs in one file";
  } catch (const ParameterError& e) {
    EXPECT_TRUE(has(std::string(e.what()), "--keys and --queries both name"));
  }
}

TEST_F(SignalFilesTest, EveryBadInputIsRefusedNamingTheFileAndTheProblem) {
  EvaluateOptions options;
  options.trace = uniform_trace("attention.npy", 2, 5);
  const std::vector<float> keys2x5x3(2 * 5 * 3, 1.0F);
  const std::vector<RunSpec> knorm{{"knorm", {}, 3}};

  // A key-aware policy without its keys: the signal and the flag.
  EXPECT_EQ(error_of(knorm, options),
            "knorm reads the new token's key (key), which a trace (attention weights only) does not supply: give "
            "--keys FILE.npy (kvevict record --keys writes it)");
  // Missing file.
  options.signals.keys = path("nope.npy");
  EXPECT_TRUE(has(error_of(knorm, options), "nope.npy: no such file (given as --keys, the keys)"));
  // Wrong head count.
  options.signals.keys = rows("three-heads.npy", {3, 5, 3}, std::vector<float>(3 * 5 * 3, 1.0F));
  EXPECT_TRUE(has(error_of(knorm, options), "three-heads.npy: 3 heads; the trace"));
  options.signals.keys = rows("one-head.npy", {5, 3}, std::vector<float>(5 * 3, 1.0F));
  EXPECT_TRUE(has(error_of(knorm, options), "one-head.npy: shape (5, 3) has one head; the trace"));
  // Wrong N.
  options.signals.keys = rows("short.npy", {2, 4, 3}, std::vector<float>(2 * 4 * 3, 1.0F));
  EXPECT_TRUE(has(error_of(knorm, options), "short.npy: N = 4 positions; the trace"));
  // Wrong dims: values of another headDim, queries not a whole number of heads.
  options.signals.keys = rows("keys.npy", {2, 5, 3}, keys2x5x3);
  options.signals.values = rows("values.npy", {2, 5, 4}, std::vector<float>(2 * 5 * 4, 1.0F));
  EXPECT_TRUE(has(error_of(knorm, options), "values.npy: headDim 4 differs from"));
  options.signals.values.clear();
  options.signals.queries = rows("queries.npy", {2, 5, 7}, std::vector<float>(2 * 5 * 7, 1.0F));
  EXPECT_TRUE(has(error_of(knorm, options), "queries.npy: 7 floats per position is not groups x headDim for headDim 3"));
  options.signals.queries.clear();
  // A 4-D file, and headDim set against the file.
  const std::string four_d = rows("four.npy", {1, 2, 5, 3}, std::vector<float>(30, 1.0F));
  options.signals.keys = four_d;
  EXPECT_TRUE(has(error_of(knorm, options), "four.npy: shape has 4 dimensions: expected [N, D] or [H, N, D]"));
  options.signals.keys = path("keys.npy");
  EXPECT_EQ(error_of({{"knorm", {{"headDim", 8}}, 3}}, options),
            "KNorm: headDim 8 is set, but the recorded keys and values have 3 floats (leave headDim out: it is read "
            "from the files)");
  // Not finite.
  std::vector<float> bad = keys2x5x3;
  bad[(1 * 5 + 2) * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
  options.signals.keys = rows("nan.npy", {2, 5, 3}, bad);
  EXPECT_TRUE(has(error_of(knorm, options), "nan.npy: head 1 position 2 component 1 is NaN: keys must be finite"));
  // A generated trace has no recorded keys.
  options.trace = "decode-4096";
  options.signals.keys = path("keys.npy");
  EXPECT_TRUE(has(error_of(knorm, options), "give --trace FILE.npy"));
}

TEST_F(SignalFilesTest, AllIsWhatTheFilesFeedAndANamedPolicyIsCheckedAsInEvaluate) {
  SignalFiles none;
  SignalFiles keys;
  keys.keys = "k.npy";
  const std::vector<std::string> seven = replay_policy_list("all", none);
  const std::vector<std::string> more = replay_policy_list("all", keys);
  EXPECT_EQ(seven, policy_names(kSignalAttention));
  EXPECT_NE(std::find(more.begin(), more.end(), "knorm"), more.end());
  EXPECT_NE(std::find(more.begin(), more.end(), "keydiff"), more.end());
  EXPECT_EQ(more.size(), policy_names(kSignalAttention | kSignalKey).size());
  EXPECT_EQ(replay_policy_list("h2o,knorm", keys), (std::vector<std::string>{"h2o", "knorm"}));
  testing::expect_error<ParameterError>(
      [&] { replay_policy_list("h2o,knorm", none); },
      "knorm reads the new token's key (key), which a trace (attention weights only) does not supply: give --keys "
      "FILE.npy (kvevict record --keys writes it)");
}

}  // namespace
}  // namespace kvevict
