// load_vocabulary: the reader a path needs, chosen by what the file is.
#include "kvevict/model/vocab/vocab.h"

#include <array>
#include <fstream>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"

namespace kvevict {

std::shared_ptr<const Vocabulary> load_vocabulary(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path json = path / "tokenizer.json";
    if (!std::filesystem::exists(json, ec)) {
      throw InputError(fmt::format("{}: the folder holds no tokenizer.json", file));
    }
    return Vocabulary::from_tokenizer_json(json);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot be opened (does it exist?)", file));
  std::array<char, 8> magic{};
  in.read(magic.data(), magic.size());
  const std::string_view head(magic.data(), static_cast<std::size_t>(in.gcount()));
  if (head.substr(0, 4) == "GGUF") return Vocabulary::from_gguf(*GgufFile::open(path));
  if (head == "KVEVMODL") return Vocabulary::bytes();
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  if (path.extension() == ".json" || (first != std::string_view::npos && head[first] == '{')) {
    return Vocabulary::from_tokenizer_json(path);
  }
  throw InputError(fmt::format(
      "{}: not a vocabulary: kvevict reads a .gguf file (magic GGUF), a tokenizer.json (or a model folder holding "
      "one) or a .kvm model (magic KVEVMODL)",
      file));
}

}  // namespace kvevict
