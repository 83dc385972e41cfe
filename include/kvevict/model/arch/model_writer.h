// Writes tiny random Llama-family models in the files engines read -- a GGUF
// file, or a Hugging Face folder (config.json, model.safetensors,
// tokenizer.json) -- with a byte-level BPE tokenizer learned from a text.
// For trying every model command without a download, and for the tests that
// check kvevict's forward pass against an independent reference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "kvevict/model/kernels/weight_types.h"

namespace kvevict {

struct RandomModelSpec {
  std::string architecture = "llama";  // llama, qwen2 or mistral
  std::string format = "gguf";         // gguf or safetensors
  WeightType type = WeightType::kF32;  // the matrices' type (safetensors: F32, F16 or BF16)
  std::uint32_t layers = 2;
  std::uint32_t width = 256;
  std::uint32_t heads = 4;
  std::uint32_t kv_heads = 2;
  std::uint32_t ff = 512;
  std::uint32_t context = 256;
  float rope_base = 10000.0F;
  // Tied output embedding; unset: qwen2 ties (as Qwen2.5-0.5B), llama and mistral do not.
  std::optional<bool> tied;
  // Llama-3 rope scaling (factor 8, low 1, high 4, original context 64: small
  // enough that a tiny model's positions reach every regime).
  bool llama3_scaling = false;
  bool linear_scaling = false;  // linear rope scaling by rope_factor
  double rope_factor = 8.0;     // the scaling's factor (llama3 or linear)
  // Every bias llama.cpp's llama builder reads (q, k, v, output, gate, up,
  // down; config.json's attention_bias and mlp_bias): llama and mistral only.
  bool biases = false;
  std::uint32_t seed = 1;
  std::string tokenizer_text;  // the text the BPE merges are learned from
  std::uint32_t merges = 200;
  // Tokens in all (embedding rows): 0 for the learned ones (258 + merges at
  // most); more pads with unused tokens, as a real model's shape needs
  // (SmolLM2's 49,152).
  std::uint32_t vocab = 0;
};

// Checks the spec (ParameterError, one rule each: sizes, heads dividing,
// rows a whole number of the type's blocks, safetensors types) and writes
// `out` (a .gguf file, or a folder for safetensors). Refuses (InputError) to
// replace an existing file or a non-empty folder unless `overwrite`.
void write_random_model(const RandomModelSpec& spec, const std::filesystem::path& out, bool overwrite = false);

class Model;
// Writes a model as a GGUF file with its matrices in `type` (norms and
// biases F32):
//  * kvevict's own model (a .kvm, loaded) as architecture "kvevict-tiny" --
//    its fused q|k|v matrices as blk.N.attn_qkv.weight, GELU's up and down,
//    the tied embedding, the byte vocabulary implied. At F32 it decodes to
//    the bit as the .kvm does.
//  * a Llama-family model read from a GGUF file (kvevict-small's Q8_0 and
//    Q4_0 forms are made this way): the same tensors and names, each matrix
//    decoded and encoded again (a K type's rows that are not whole 256-element
//    blocks as llama.cpp's quantizer writes them: Q4_K as Q5_0, Q6_K as
//    Q8_0), its vocabulary and settings; rope scaling as rope_freqs.weight.
// Throws ParameterError for any other model (a safetensors folder: its q and
// k rows are in Hugging Face's rotary layout, not GGUF's) or rows that are not
// a whole number of the type's blocks.
void write_gguf_of(const Model& model, const std::filesystem::path& out, WeightType type = WeightType::kF32,
                   bool overwrite = false);

}  // namespace kvevict
