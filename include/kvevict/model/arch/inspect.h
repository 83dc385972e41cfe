// What a model file holds, for `kvevict inspect` and the docs' "run it on
// your model": the settings kvevict runs it with, and the file's own
// metadata and tensors as written, without loading the weights.
#pragma once

#include <filesystem>
#include <string>

#include "kvevict/model/decoder/model.h"

namespace kvevict {

// The file as written, as JSON text: a GGUF's {"format": "gguf", "version",
// "alignment", "metadata": {key: value (arrays as lists)}, "tensors":
// [{"name", "ne", "type", "type_id", "offset"}]}; a safetensors model's
// {"format": "safetensors", "config": {...}, "tensors": [{"name", "shape",
// "dtype"}]}; a .kvm's {"format": "kvm", "config": {...}}. Long token lists
// are given whole. Throws InputError for a file kvevict does not read.
std::string inspect_file_json(const std::filesystem::path& path, int indent = 2);

// The settings a loaded model runs with, one "name: value" line each
// (architecture, format, weights, sizes, rope, tokenizer, and the bytes one
// position of KV costs the whole model at fp32).
std::string describe_model(const Model& model);

}  // namespace kvevict
