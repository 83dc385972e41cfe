#include "kvevict/eval/vectors.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "vectors_paged.h"

namespace kvevict {

using nlohmann::json;

namespace {

// A malformed piece of a vector file; ends the case (or the file).
class Malformed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::int64_t as_integer(const json& v, std::string_view what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t{INT64_MAX}) {
      throw Malformed(fmt::format("{} ({}) is too large", what, v.dump()));
    }
    return v.get<std::int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      return static_cast<std::int64_t>(d);
    }
  }
  throw Malformed(fmt::format("{} must be an integer, got {}", what, v.dump()));
}

// Numbers that are whole come out as JSON integers, so messages read naturally.
json number(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9.0e15) {
    return static_cast<std::int64_t>(x);
  }
  return x;
}

bool equal(const json& expected, const json& actual, double tolerance) {
  if (expected.is_number() && actual.is_number()) {
    const double e = expected.get<double>();
    const double a = actual.get<double>();
    if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a);
    if (std::isinf(e) || std::isinf(a)) return e == a;
    return std::fabs(e - a) <= tolerance;
  }
  if (expected.is_array() && actual.is_array()) {
    if (expected.size() != actual.size()) return false;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (!equal(expected[i], actual[i], tolerance)) return false;
    }
    return true;
  }
  if (expected.is_object() && actual.is_object()) {
    if (expected.size() != actual.size()) return false;
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      if (!actual.contains(it.key()) || !equal(it.value(), actual.at(it.key()), tolerance)) {
        return false;
      }
    }
    return true;
  }
  // Booleans never equal numbers: the type checks above already excluded them.
  if (expected.type() != actual.type()) return false;
  return expected == actual;
}

ParamMap params_of(const json& c) {
  ParamMap params;
  if (!c.contains("params")) return params;
  const json& p = c.at("params");
  if (!p.is_object()) throw Malformed("'params' must be an object");
  for (auto it = p.begin(); it != p.end(); ++it) {
    params.emplace_back(it.key(), as_integer(it.value(), "params." + it.key()));
  }
  return params;
}

std::vector<float> attention_of(const json& a) {
  if (!a.is_array()) throw Malformed("onDecodeStep's attention must be an array or null");
  std::vector<float> w;
  w.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number()) {
      throw Malformed(fmt::format("attention weight {} must be a number, got {}", i, a[i].dump()));
    }
    w.push_back(static_cast<float>(a[i].get<double>()));
  }
  return w;
}

// onStep's and onOrigin's signals object: {"attention": [...]|null, "key":
// [...], "value": [...], "queries": [...]}, every field optional (absent: not
// given). `storage` keeps the float32 copies the spans in the result view.
StepInputs step_inputs_of(const json& signals, std::vector<std::vector<float>>& storage) {
  if (!signals.is_object()) throw Malformed("a step's signals must be an object {attention, key, value, queries}");
  StepInputs in;
  storage.clear();
  storage.reserve(4);
  for (auto it = signals.begin(); it != signals.end(); ++it) {
    const std::string& field = it.key();
    if (field != "attention" && field != "key" && field != "value" && field != "queries") {
      throw Malformed(fmt::format("unknown signal '{}' (known: attention, key, value, queries)", field));
    }
    if (field == "attention" && it.value().is_null()) continue;  // absent: no information
    if (!it.value().is_array()) throw Malformed(fmt::format("signal '{}' must be an array of numbers", field));
    std::vector<float>& values = storage.emplace_back();
    for (std::size_t i = 0; i < it.value().size(); ++i) {
      if (!it.value()[i].is_number()) {
        throw Malformed(fmt::format("signal '{}' component {} must be a number, got {}", field, i,
                                    it.value()[i].dump()));
      }
      values.push_back(static_cast<float>(it.value()[i].get<double>()));
    }
    const std::span<const float> view(values);
    if (field == "attention") in.attention = view;
    if (field == "key") in.key = view;
    if (field == "value") in.value = view;
    if (field == "queries") in.queries = view;
  }
  return in;
}

// Executes one step and returns its result (null for onDecodeStep).
json execute(const PolicyInfo& info, Policy& policy, const json& step) {
  if (!step.is_object()) throw Malformed("a step must be an object");
  if (!step.contains("call") || !step.at("call").is_string()) {
    throw Malformed("a step needs a string 'call'");
  }
  const std::string call = step.at("call").get<std::string>();
  const json args = step.contains("args") ? step.at("args") : json::array();
  if (!args.is_array()) throw Malformed("'args' must be an array");

  if (call == "onDecodeStep") {
    if (args.size() != 2) throw Malformed("onDecodeStep takes [pos, attention|null]");
    const std::int64_t pos = as_integer(args[0], "onDecodeStep's position");
    if (args[1].is_null()) {
      policy.on_decode_step(pos, std::nullopt);
    } else {
      const std::vector<float> w = attention_of(args[1]);
      policy.on_decode_step(pos, std::span<const float>(w));
    }
    return nullptr;
  }
  if (call == "onStep") {
    if (args.size() != 2) throw Malformed("onStep takes [pos, {attention, key, value, queries}]");
    const std::int64_t pos = as_integer(args[0], "onStep's position");
    std::vector<std::vector<float>> storage;
    policy.on_step(pos, step_inputs_of(args[1], storage));
    return nullptr;
  }
  if (call == "onOrigin") {
    if (args.size() != 1) throw Malformed("onOrigin takes [{key, value, queries}]");
    std::vector<std::vector<float>> storage;
    policy.on_origin(step_inputs_of(args[0], storage));
    return nullptr;
  }
  if (call == "evict") {
    if (args.size() != 1) throw Malformed("evict takes [budget]");
    json victims = json::array();
    for (const Position v : policy.evict(as_integer(args[0], "evict's budget"))) victims.push_back(v);
    return victims;
  }
  if (call == "keptCount") {
    if (!args.empty()) throw Malformed("keptCount takes no arguments");
    return policy.kept_count();
  }
  const QueryInfo* query = info.find_query(call);
  if (query == nullptr) {
    throw Malformed(fmt::format("{} has no method '{}'", info.name, call));
  }
  if (args.size() != query->arity) {
    throw Malformed(fmt::format("{} takes {} argument(s), got {}", call, query->arity, args.size()));
  }
  std::vector<std::int64_t> ints;
  for (std::size_t i = 0; i < args.size(); ++i) {
    ints.push_back(as_integer(args[i], fmt::format("{}'s argument {}", call, i + 1)));
  }
  return number(query->call(policy, ints));
}

void run_case(const std::string& file, const PolicyInfo& info, const json& c, std::size_t index,
              VectorReport& report) {
  std::string name = fmt::format("#{}", index + 1);
  const std::size_t failures_before = report.failures.size();
  long step_index = -1;
  auto fail = [&](std::string expected, std::string actual, std::string message) {
    report.failures.push_back({file, name, step_index, std::move(expected), std::move(actual),
                               std::move(message)});
  };
  try {
    if (!c.is_object()) throw Malformed("a case must be an object");
    if (c.contains("name")) {
      if (!c.at("name").is_string()) throw Malformed("'name' must be a string");
      name = c.at("name").get<std::string>();
    }
    double tolerance = 1e-9;
    if (c.contains("tolerance")) {
      if (!c.at("tolerance").is_number() || c.at("tolerance").get<double>() < 0) {
        throw Malformed("'tolerance' must be a number >= 0");
      }
      tolerance = c.at("tolerance").get<double>();
    }
    if (c.contains("seed")) {
      const std::int64_t seed = as_integer(c.at("seed"), "seed");
      if (seed < 0 || seed > std::int64_t{UINT32_MAX}) throw Malformed("seed must fit in 32 bits");
    }
    if (!c.contains("steps") || !c.at("steps").is_array()) throw Malformed("a case needs a 'steps' array");
    // A case with "blocks" or "layer" replays through a BlockEvictor or a
    // LayerBudget (docs/paged.md); otherwise through the policy itself.
    const ParamMap params = params_of(c);
    const auto paged = detail::paged_subject(info, params, c);
    const std::unique_ptr<Policy> policy = paged ? nullptr : info.make(params);
    const json& steps = c.at("steps");
    for (std::size_t s = 0; s < steps.size(); ++s) {
      step_index = static_cast<long>(s);
      if (paged && (!steps[s].is_object() || !steps[s].contains("call") || !steps[s].at("call").is_string())) {
        throw Malformed("a step must be an object with a string 'call'");
      }
      const json actual = paged ? paged(steps[s]) : execute(info, *policy, steps[s]);
      if (steps[s].contains("expect") && !equal(steps[s].at("expect"), actual, tolerance)) {
        fail(steps[s].at("expect").dump(), actual.dump(),
             fmt::format("{} did not match", steps[s].at("call").get<std::string>()));
      }
    }
  } catch (const Malformed& e) {
    fail("", "", fmt::format("malformed: {}", e.what()));
  } catch (const detail::PagedMalformed& e) {
    fail("", "", fmt::format("malformed: {}", e.what()));
  } catch (const std::exception& e) {
    fail("", e.what(), "threw");
  }
  if (report.failures.size() == failures_before) {
    ++report.passed;
  } else {
    ++report.failed;
  }
}

}  // namespace

void VectorReport::merge(const VectorReport& other) {
  passed += other.passed;
  failed += other.failed;
  failures.insert(failures.end(), other.failures.begin(), other.failures.end());
}

namespace {
VectorReport file_failure(const std::string& file, const std::string& message) {
  VectorReport report;
  report.failures.push_back({file, "(file)", -1, "", "", message});
  report.failed = 1;
  return report;
}
}  // namespace

VectorReport run_vector_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return file_failure(path.string(), "cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return file_failure(path.string(), "cannot be read");
  return run_vector_text(text.str(), path.string());
}

VectorReport run_vector_text(std::string_view text, const std::string& file) {
  VectorReport report;
  auto file_failure = [&](const std::string& message) { return kvevict::file_failure(file, message); };
  json doc;
  // Vector files are shallow; refusing deep nesting keeps the recursive
  // comparison and printing of values bounded whatever a file holds.
  static constexpr int kMaxDepth = 32;
  const json::parser_callback_t depth_guard = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) throw Malformed(fmt::format("nests deeper than {} levels", kMaxDepth));
    return true;
  };
  try {
    doc = json::parse(text, depth_guard);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number too large for a double.
    return file_failure(fmt::format("is not valid JSON: {}", e.what()));
  } catch (const Malformed& e) {
    return file_failure(e.what());
  }
  if (!doc.is_object()) return file_failure("the top level must be an object");
  if (!doc.contains("policy") || !doc.at("policy").is_string()) {
    return file_failure("needs a string 'policy' such as \"kv-cache/scissorhands\"");
  }
  if (!doc.contains("version") || doc.at("version") != 1) return file_failure("'version' must be 1");
  std::string policy = doc.at("policy").get<std::string>();
  constexpr std::string_view kPrefix = "kv-cache/";
  if (policy.rfind(kPrefix, 0) != 0) {
    return file_failure(fmt::format("policy '{}' must start with '{}'", policy, kPrefix));
  }
  policy = policy.substr(kPrefix.size());
  const PolicyInfo* info = nullptr;
  try {
    info = &find_policy(policy);
  } catch (const ParameterError& e) {
    return file_failure(e.what());
  }
  if (!doc.contains("cases") || !doc.at("cases").is_array()) {
    return file_failure("needs a 'cases' array");
  }
  const json& cases = doc.at("cases");
  for (std::size_t i = 0; i < cases.size(); ++i) run_case(file, *info, cases[i], i, report);
  return report;
}

std::vector<std::filesystem::path> collect_vector_files(const std::vector<std::filesystem::path>& paths) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  for (const fs::path& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::recursive_directory_iterator(p)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_regular_file() && name.size() > 13 &&
            name.compare(name.size() - 13, 13, ".vectors.json") == 0) {
          found.push_back(entry.path());
        }
      }
      if (found.empty()) throw InputError(fmt::format("{}: no *.vectors.json files in this folder", p.string()));
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      out.push_back(p);
    } else {
      throw InputError(fmt::format("{}: no such file or folder", p.string()));
    }
  }
  return out;
}

VectorReport run_vectors(const std::vector<std::filesystem::path>& paths) {
  VectorReport report;
  for (const auto& file : collect_vector_files(paths)) report.merge(run_vector_file(file));
  return report;
}

std::string describe(const VectorFailure& f) {
  std::string where = f.step >= 0 ? fmt::format("case '{}' step {}", f.case_name, f.step)
                                  : fmt::format("case '{}'", f.case_name);
  if (f.case_name == "(file)") where = "file";
  std::string line = fmt::format("{}: {}: {}", f.file, where, f.message);
  if (!f.expected.empty()) line += fmt::format("; expected {}, got {}", f.expected, f.actual);
  else if (!f.actual.empty()) line += fmt::format(": {}", f.actual);
  return line;
}

}  // namespace kvevict
