// Helpers shared by the test files: where the data lives, the canonical rows
// computed once, and a step-by-step driver that mirrors the harness.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvevict/eval/evaluate.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/core/policy.h"
#include "kvevict/eval/trace.h"

#include "kvevict/core/registry.h"

namespace kvevict::testing {

std::filesystem::path source_dir();

// A scratch folder under the system's temporary folder, named
// PREFIX-PID-TEST (ctest runs test programs side by side; TEST is the running
// test's name, left out outside a test), made empty, and removed with
// everything in it when this goes out of scope -- also when an assertion ends
// the test early, which a remove_all on the test's last line never reaches.
// A static one lives for the process: a cache its tests share.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& prefix);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  ScratchFolder(ScratchFolder&& other) noexcept;
  ScratchFolder& operator=(ScratchFolder&&) = delete;

  const std::filesystem::path& path() const { return path_; }
  operator const std::filesystem::path&() const { return path_; }  // NOLINT: a folder is its path
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};
// The model folder: KVEVICT_MODEL_DIR points the tests at a freshly trained
// model before it is committed; by default they check the committed one.
std::filesystem::path model_dir();
// The model in model_dir(), loaded once per process.
std::shared_ptr<const Model> committed_model();
// The registered policies a trace can feed (their signals: attention or
// none), catalogue order: the seven of the canonical compare and the peer's.
std::vector<const PolicyInfo*> attention_policies();
// The first `bytes` of model_dir()/heldout-sample.txt (all of it when shorter).
std::vector<std::uint8_t> heldout_prefix(std::size_t bytes);
// `f` throws an E whose message is exactly `want`.
template <typename E>
void expect_error(const std::function<void()>& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << want;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

// The peer's conformance folder, or nullopt (the test then skips, saying so).
std::optional<std::filesystem::path> conformance_dir();

// All seven policies at 256/512/1024 on decode-4096, computed once per process.
const std::vector<RunRow>& canonical_rows();
const RunRow& canonical_row(const std::string& policy, std::int64_t budget);

// One run of `policy` with `params` at `budget` over decode-4096.
RunRow run_one(const std::string& policy, ParamMap params, std::int64_t budget,
               std::optional<std::int64_t> steps = std::nullopt);

// Drives a policy over a trace like the harness and returns the positions the
// harness holds at the end (ascending).
std::vector<Position> held_after_run(Policy& policy, Trace& trace, std::int64_t budget,
                                     std::uint32_t steps);

}  // namespace kvevict::testing
