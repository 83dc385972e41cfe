// Model::load: the one place that knows every file family. It looks at the
// path (a folder, a file's first bytes, its name) and hands it to that
// family's builder (model_builder.h), then applies the context asked for.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/model/decoder/model.h"
#include "model/arch/model_builder.h"
#include "model/format/kvm.h"

namespace kvevict {

namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file, what));
}

// The first bytes of a file (fewer when it is shorter); empty when it cannot be read.
std::string file_magic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string magic(8, '\0');
  if (!in) return {};
  in.read(magic.data(), 8);
  magic.resize(static_cast<std::size_t>(in.gcount()));
  return magic;
}

}  // namespace

namespace {

std::shared_ptr<const Model> load_any(const std::filesystem::path& path, const ModelOptions& options) {
  const std::string file = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return build_safetensors_model(path, options);
  if (!std::filesystem::exists(path, ec)) fail(file, "cannot be opened (does it exist?)");
  const std::string magic = file_magic(path);
  if (magic.rfind("GGUF", 0) == 0) return build_gguf_model(path, options);
  const std::string ext = path.extension().string();
  if (path.filename() == "config.json" || path.filename() == "tokenizer.json" ||
      path.filename() == "tokenizer_config.json") {
    fail(file, fmt::format("is one file of a safetensors model: give its folder ({})", path.parent_path().string()));
  }
  if (ext == ".safetensors" || ext == ".json") return build_safetensors_model(path, options);
  if (is_kvm_magic(magic)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(file, "cannot be opened (does it exist?)");
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) fail(file, "reading failed");
    return Model::parse(std::move(bytes), file);
  }
  fail(file, "not a kvevict model: it reads a .kvm file (magic KVEVMODL), a GGUF file (magic GGUF) or a "
             "safetensors model (a folder with config.json and model.safetensors)");
}

}  // namespace

std::shared_ptr<const Model> Model::load(const std::filesystem::path& path, const ModelOptions& options) {
  const std::shared_ptr<const Model> built = load_any(path, options);
  const bool kvm = built->config().format == "kvm";
  if (options.matmul == MatmulMode::kInt8 && !built->uses_kernels()) {
    throw ParameterError(fmt::format("matmul mode int8: {} ({}) multiplies float32 matrices one vector at a time, not "
                                     "by the weight kernels, so it has no 8-bit products (only exact applies)",
                                     path.string(), built->config().architecture));
  }
  if ((!kvm || options.context == 0) && options.matmul == MatmulMode::kExact) return built;
  auto model = std::const_pointer_cast<Model>(built);
  if (kvm && options.context != 0) apply_context(model->config_, options, path.string());
  model->matmul_ = options.matmul;
  return model;
}

std::shared_ptr<const Model> Model::parse(std::vector<char> bytes, const std::string& file) {
  return build_kvm_model(bytes, file);
}

}  // namespace kvevict
