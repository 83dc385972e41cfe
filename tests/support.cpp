#include "support.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <system_error>

#include "kvevict/model/evaluation/perplexity.h"

namespace kvevict::testing {

std::filesystem::path model_dir() {
  const char* dir = std::getenv("KVEVICT_MODEL_DIR");
  return dir != nullptr && *dir != '\0' ? std::filesystem::path(dir) : source_dir() / "model";
}

std::shared_ptr<const Model> committed_model() {
  static const std::shared_ptr<const Model> model = Model::load(model_dir() / "kvevict-tiny.kvm");
  return model;
}

std::vector<std::uint8_t> heldout_prefix(std::size_t bytes) {
  std::vector<std::uint8_t> text = read_text(model_dir() / "heldout-sample.txt");
  text.resize(std::min(bytes, text.size()));
  return text;
}

std::filesystem::path source_dir() { return KVEVICT_SOURCE_DIR; }

ScratchFolder::ScratchFolder(const std::string& prefix) {
  std::string name = prefix + "-" + std::to_string(::getpid());
  if (const auto* test = ::testing::UnitTest::GetInstance()->current_test_info(); test != nullptr) {
    name += std::string("-") + test->test_suite_name() + "." + test->name();
  }
  std::replace(name.begin(), name.end(), '/', '_');  // a parameterised test's name has slashes
  path_ = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchFolder::ScratchFolder(ScratchFolder&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }

ScratchFolder::~ScratchFolder() {
  if (path_.empty()) return;
  std::error_code ignored;  // a destructor must not throw; what is left is only litter
  std::filesystem::remove_all(path_, ignored);
}

std::optional<std::filesystem::path> conformance_dir() {
  const std::filesystem::path dir = KVEVICT_CONFORMANCE_DIR;
  if (std::filesystem::is_directory(dir)) return dir;
  return std::nullopt;
}

const std::vector<RunRow>& canonical_rows() {
  static const std::vector<RunRow> rows = compare(CompareRequest{}, EvaluateOptions{});
  return rows;
}

const RunRow& canonical_row(const std::string& policy, std::int64_t budget) {
  for (const RunRow& r : canonical_rows()) {
    if (r.policy == policy && r.budget == budget) return r;
  }
  throw std::runtime_error("no canonical row for " + policy);
}

RunRow run_one(const std::string& policy, ParamMap params, std::int64_t budget,
               std::optional<std::int64_t> steps) {
  EvaluateOptions options;
  options.steps = steps;
  return evaluate({{policy, std::move(params), budget}}, options).front();
}

std::vector<Position> held_after_run(Policy& policy, Trace& trace, std::int64_t budget,
                                     std::uint32_t steps) {
  std::vector<Position> kept{0};
  std::vector<float> attn;
  trace.rewind();
  for (std::uint32_t t = 1; t <= steps; ++t) {
    const auto w = trace.next();
    attn.clear();
    for (const Position p : kept) attn.push_back(w[p]);
    policy.on_decode_step(t, std::span<const float>(attn));
    kept.push_back(t);
    if (std::ssize(kept) > budget) {
      for (const Position v : policy.evict(budget)) std::erase(kept, v);
    }
  }
  return kept;
}

std::vector<const PolicyInfo*> attention_policies() {
  std::vector<const PolicyInfo*> out;
  for (const PolicyInfo* info : policies()) {
    if ((info->signals & ~kSignalAttention) == 0) out.push_back(info);
  }
  return out;
}

}  // namespace kvevict::testing
