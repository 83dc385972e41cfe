// A Model's parts: each builder (src/model/arch/) fills Model::Parts from
// its file and hands them over here.
#include "kvevict/model/decoder/model.h"

#include <initializer_list>
#include <utility>

namespace kvevict {

std::shared_ptr<const Model> Model::from_parts(Parts parts) {
  std::shared_ptr<Model> model(new Model());
  model->config_ = std::move(parts.config);
  model->path_ = std::move(parts.path);
  model->data_ = std::move(parts.data);  // a vector's move keeps its buffer: the pointers stay valid
  model->blocks_ = std::move(parts.blocks);
  model->parameters_ = parts.parameters;
  model->kernels_ = parts.kernels;
  model->vocab_ = std::move(parts.vocab);
  model->embed_ = parts.embed;
  model->output_ = parts.output;
  model->final_norm_ = parts.final_norm;
  model->layers_ = std::move(parts.layers);
  return model;
}

std::uint64_t Model::weight_bytes_per_token() const noexcept {
  std::uint64_t bytes = embed_.row_bytes() + output_.bytes();
  for (const Layer& l : layers_) {
    for (const WeightMatrix* w : {&l.q, &l.k, &l.v, &l.proj, &l.gate, &l.up, &l.down}) bytes += w->bytes();
  }
  return bytes;
}

}  // namespace kvevict
