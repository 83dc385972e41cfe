// Model files: random-model and convert write them, tokenize and inspect
// read them.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli_options.h"
#include "commands.h"
#include "kvevict/core/errors.h"
#include "kvevict/model/arch/inspect.h"
#include "kvevict/model/arch/model_writer.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/kernels/weight_types.h"
#include "kvevict/model/vocab/vocab.h"

namespace kvevict::cli {

namespace {

struct RandomModelArgs {
  RandomModelSpec spec;
  std::string type = "f32";
  std::string out;
  std::string text = "model/heldout-sample.txt";
  std::string scaling;
  bool tied = false, untied = false, force = false;
};

int run_random_model(RandomModelArgs& f) {
  f.spec.type = parse_weight_type(f.type);
  if (f.tied) f.spec.tied = true;
  if (f.untied) f.spec.tied = false;
  f.spec.llama3_scaling = f.scaling == "llama3";
  f.spec.linear_scaling = f.scaling == "linear";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(f.text, ec)) {
    throw InputError(fmt::format("--tokenizer-text {}: not a readable file (the default is relative to the "
                                 "repository root: run from there or give --tokenizer-text FILE)",
                                 f.text));
  }
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  f.spec.tokenizer_text.assign(text.begin(), text.end());
  write_random_model(f.spec, f.out, f.force);
  const auto model = Model::load(f.out);
  std::cout << "wrote " << f.out << '\n' << describe_model(*model);
  return 0;
}

struct ConvertArgs {
  std::string model, out, type = "f32";
  bool force = false;
};

int run_convert(const ConvertArgs& f) {
  const WeightType type = parse_weight_type(f.type);
  write_gguf_of(*Model::load(f.model), f.out, type, f.force);
  std::cout << "wrote " << f.out << '\n' << describe_model(*Model::load(f.out));
  return 0;
}

struct TokenizeArgs {
  std::string model, text, literal;  // literal: --string
  bool no_bos = false, json = false;
};

int run_tokenize(const TokenizeArgs& f, const CLI::App* cmd) {
  if (f.text.empty() && cmd->count("--string") == 0) throw ParameterError("tokenize: give --text FILE or --string TEXT");
  const std::shared_ptr<const Vocabulary> vocab = load_vocabulary(f.model);
  std::string text = f.literal;
  if (!f.text.empty()) {
    std::ifstream file(f.text, std::ios::binary);
    if (!file) throw InputError(fmt::format("{}: cannot be opened (does it exist?)", f.text));
    text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  const std::vector<Token> tokens = vocab->encode(text, !f.no_bos);
  if (f.json) {
    const nlohmann::json out = {{"tokenizer", vocab->describe()}, {"tokens", tokens}, {"bytes", text.size()}};
    std::cout << out.dump() << '\n';
  } else {
    std::cout << fmt::format("{}\n", fmt::join(tokens, " "));
  }
  return 0;
}

struct InspectArgs {
  std::string model;
  bool json = false;
};

int run_inspect(const InspectArgs& f, const ModelLoad& context) {
  if (f.json) {
    std::cout << inspect_file_json(f.model) << '\n';
  } else {
    std::cout << describe_model(*open_model(f.model, context));
  }
  return 0;
}

}  // namespace

Command add_random_model_command(CLI::App& app) {
  auto f = std::make_shared<RandomModelArgs>();
  auto* cmd = app.add_subcommand(
      "random-model",
      "Write a tiny random Llama-family model (a GGUF file, or a safetensors folder with config.json and "
      "tokenizer.json) with a byte-level BPE tokenizer learned from a text: every model command runs on it "
      "without a download");
  cmd->add_option("--arch", f->spec.architecture, "llama, qwen2 or mistral")
      ->check(CLI::IsMember({"llama", "qwen2", "mistral"}))->capture_default_str();
  cmd->add_option("--format", f->spec.format, "gguf or safetensors")
      ->check(CLI::IsMember({"gguf", "safetensors"}))->capture_default_str();
  cmd->add_option("--type", f->type,
                  "the matrices' type: f32, f16, bf16, q8_0, q4_0, q5_0, q4_k, q6_k (safetensors: f32, f16, bf16)")
      ->capture_default_str();
  cmd->add_option("--out", f->out, "the .gguf file, or the folder for safetensors")->required();
  cmd->add_option("--layers", f->spec.layers, "layers (1 ... 64)")->capture_default_str();
  cmd->add_option("--width", f->spec.width, "embedding width (a whole number of the type's blocks: 256 for q4_k/q6_k)")
      ->capture_default_str();
  cmd->add_option("--heads", f->spec.heads, "query heads")->capture_default_str();
  cmd->add_option("--kv-heads", f->spec.kv_heads, "KV heads (grouped-query attention)")->capture_default_str();
  cmd->add_option("--ff", f->spec.ff, "feed-forward width")->capture_default_str();
  cmd->add_option("--context", f->spec.context, "trained context it declares (2 ... 65536)")->capture_default_str();
  cmd->add_option("--rope-theta", f->spec.rope_base, "rope's base (rope_theta, freq_base)")->capture_default_str();
  cmd->add_option("--seed", f->spec.seed, "the weights' random seed")->capture_default_str();
  cmd->add_option("--merges", f->spec.merges, "BPE merges learned for its tokenizer")->capture_default_str();
  cmd->add_option("--vocab", f->spec.vocab,
                  "tokens in all: 0 for the learned ones; more pads with unused tokens (a real model's embedding "
                  "rows, e.g. 49152 for SmolLM2)")
      ->capture_default_str();
  cmd->add_option("--tokenizer-text", f->text, "the text the tokenizer's merges are learned from")
      ->capture_default_str();
  cmd->add_flag("--tied", f->tied, "tie the output to the token embedding (the default for qwen2)");
  cmd->add_flag("--untied", f->untied, "give it its own output matrix (the default for llama and mistral)")
      ->excludes("--tied");
  cmd->add_option("--rope-scaling", f->scaling,
                  "llama3: Llama-3's rope scaling (low 1, high 4, original context 64); linear: every angle divided "
                  "by the factor")
      ->check(CLI::IsMember({"llama3", "linear"}));
  cmd->add_option("--rope-factor", f->spec.rope_factor, "with --rope-scaling: its factor")
      ->needs("--rope-scaling")->capture_default_str();
  cmd->add_flag("--biases", f->spec.biases,
                "give llama or mistral every bias llama.cpp reads: q, k, v, output, gate, up and down");
  cmd->add_flag("--force", f->force, "replace an existing file (or write into a non-empty folder)");
  return {cmd, [f] { return run_random_model(*f); }};
}

Command add_convert_command(CLI::App& app) {
  auto f = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand(
      "convert", "Write a model as a GGUF file with its matrices in one type: kvevict's own (.kvm, as architecture "
                 "kvevict-tiny; at f32 it decodes to the bit as the .kvm does) or a Llama-family GGUF re-quantized");
  cmd->add_option("--model", f->model, "a .kvm model or a Llama-family .gguf, e.g. model/kvevict-small.gguf")
      ->required();
  cmd->add_option("--out", f->out, "the .gguf file to write")->required();
  cmd->add_option("--type", f->type, "the matrices' type: f32, f16, bf16, q8_0, q4_0, q5_0, q4_k, q6_k (the rows "
                                     "must be whole blocks; a GGUF's rows that are not whole 256-element blocks go "
                                     "to q5_0 for q4_k and q8_0 for q6_k, as llama.cpp's quantizer writes them)")
      ->capture_default_str();
  cmd->add_flag("--force", f->force, "replace an existing file");
  return {cmd, [f] { return run_convert(*f); }};
}

Command add_tokenize_command(CLI::App& app) {
  auto f = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Tokenize a text with a model's own tokenizer and print the token ids");
  cmd->add_option("--model", f->model,
                  "a .gguf (a vocabulary alone will do), a tokenizer.json, a model folder, or a .kvm (bytes)")
      ->required();
  auto* text_opt = cmd->add_option("--text", f->text, "the file to tokenize");
  cmd->add_option("--string", f->literal, "or this text")->excludes(text_opt);
  cmd->add_flag("--no-bos", f->no_bos, "leave out the BOS the tokenizer would put first");
  cmd->add_flag("--json", f->json, "print {\"tokenizer\", \"tokens\", \"bytes\"}");
  return {cmd, [f, cmd] { return run_tokenize(*f, cmd); }};
}

Command add_inspect_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand(
      "inspect", "Show the settings kvevict runs a model with (or, with --json, the file's metadata and tensors as "
                 "written)");
  cmd->add_option("--model", f->model, kModelHelp)->required();
  cmd->add_flag("--json", f->json, "the file's own metadata and tensor list, as JSON (the weights are not read)");
  add_context_option(cmd, *context);
  return {cmd, [f, context] { return run_inspect(*f, *context); }};
}

}  // namespace kvevict::cli
