// Writing output files (the report's page and SVGs, recorded attention): a
// target is checked before any work, and a file is written whole or not at all.
#pragma once

#include <filesystem>
#include <string_view>

namespace kvevict {

// Refuses, with an InputError naming the file, a target that could not be
// written: a folder, a missing parent folder, or an existing file without
// `overwrite`. Writes nothing.
void check_output_file(const std::filesystem::path& file, bool overwrite);

// Writes `content` to `file` through `file`.tmp and a rename, so a failure
// leaves nothing half-written (checks as check_output_file first).
void write_file_atomically(const std::filesystem::path& file, std::string_view content,
                           bool overwrite);

}  // namespace kvevict
