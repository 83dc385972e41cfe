// The architecture builders behind Model::load (loader.cpp; internal to the
// model layer): one per architecture, each turning a file's tensors and
// settings into a Model's weights, configuration and vocabulary.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/model/decoder/model.h"

namespace kvevict {

// Sets config.trained_context and the context to run at (ModelOptions);
// throws InputError naming `file` for a context over the trained one.
void apply_context(ModelConfig& config, const ModelOptions& options, const std::string& file);

// kvevict-tiny: a whole .kvm file's bytes (tiny_builder.cpp).
std::shared_ptr<const Model> build_kvm_model(const std::vector<char>& bytes, const std::string& file);
// A GGUF file of a Llama-family architecture (llama, qwen2, mistral).
std::shared_ptr<const Model> build_gguf_model(const std::filesystem::path& file, const ModelOptions& options);
// A Hugging Face model: a folder with config.json, model.safetensors (or its
// index) and tokenizer.json; or the .safetensors / index file inside one.
std::shared_ptr<const Model> build_safetensors_model(const std::filesystem::path& path, const ModelOptions& options);

}  // namespace kvevict

namespace kvevict {

// Llama-3's rope scaling as a divisor of each of the head_dim / 2 angles
// (HF's llama3 rule; what a GGUF's rope_freqs.weight holds).
std::vector<float> llama3_divisors(std::uint32_t head_dim, double base, double factor, double low, double high,
                                   double original);

}  // namespace kvevict
