// kvevict-tiny (a .kvm file): the byte-level architecture kvevict trained
// first. Its weights are float32 views into the file's own floats, and its
// products stay Eigen's (Model::uses_kernels() is false).
#include <utility>

#include "kvevict/model/vocab/vocab.h"
#include "model/arch/model_builder.h"
#include "model/format/kvm.h"

namespace kvevict {

std::shared_ptr<const Model> build_kvm_model(const std::vector<char>& bytes, const std::string& file) {
  KvmFile kvm = read_kvm(bytes, file);
  Model::Parts parts;
  ModelConfig& c = parts.config;
  c.vocab = kvm.vocab;
  c.layers = kvm.layers;
  c.heads = kvm.heads;
  c.kv_heads = kvm.kv_heads;
  c.width = kvm.width;
  c.ff = kvm.ff;
  c.context = kvm.context;
  c.trained_context = kvm.context;
  c.rope_base = kvm.rope_base;
  c.norm_eps = kvm.norm_eps;
  parts.path = file;
  parts.parameters = kvm.weights.size();
  parts.kernels = false;
  parts.vocab = Vocabulary::bytes();

  const float* base = kvm.weights.data();  // moved into the model below: the buffer stays where it is
  std::size_t k = 0;
  auto matrix = [&](std::uint32_t rows, std::uint32_t cols) {
    return WeightMatrix{WeightType::kF32, rows, cols, reinterpret_cast<const std::uint8_t*>(base + kvm.offsets[k++])};
  };
  const std::uint32_t d = c.head_dim();
  parts.embed = matrix(c.vocab, c.width);
  parts.output = parts.embed;
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    Model::Layer layer{};
    layer.attn_norm = base + kvm.offsets[k++];
    layer.q = matrix((c.heads + 2 * c.kv_heads) * d, c.width);  // q, k and v as one product
    layer.proj = matrix(c.width, c.width);
    layer.mlp_norm = base + kvm.offsets[k++];
    layer.up = matrix(c.ff, c.width);
    layer.down = matrix(c.width, c.ff);
    parts.layers.push_back(layer);
  }
  parts.final_norm = base + kvm.offsets[k];
  parts.data = std::move(kvm.weights);
  return Model::from_parts(std::move(parts));
}

}  // namespace kvevict
