// Replays language-neutral test-vector files (spec/vectors.md) through the
// registry. The tool's `vectors` command, the test suites and the bindings all
// use this one runner.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvevict {

struct VectorFailure {
  std::string file;
  std::string case_name;
  long step = -1;          // index into the case's steps; -1 for the case itself
  std::string expected;    // JSON text, empty when not applicable
  std::string actual;      // JSON text, or the error that ended the case
  std::string message;     // what went wrong, one line
};

struct VectorReport {
  std::size_t passed = 0;  // cases
  std::size_t failed = 0;  // cases
  std::vector<VectorFailure> failures;

  void merge(const VectorReport& other);
};

// Replays one file. A file that cannot be read, is not JSON, or lacks the
// top-level shape is one failed "case" named after the file (the run goes on
// with other files); a malformed case fails that case with what is wrong.
VectorReport run_vector_file(const std::filesystem::path& file);

// Replays vector-file text already in memory; `file_label` names it in failures.
VectorReport run_vector_text(std::string_view text, const std::string& file_label);

// Files named directly, and every *.vectors.json under a folder, sorted.
// Throws InputError for a path that does not exist.
std::vector<std::filesystem::path> collect_vector_files(const std::vector<std::filesystem::path>& paths);

// Replays the files under `paths`.
VectorReport run_vectors(const std::vector<std::filesystem::path>& paths);

// "file: case 'name' step 3: expected [2], got [1]" -- one line.
std::string describe(const VectorFailure& failure);

}  // namespace kvevict
