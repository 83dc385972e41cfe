#include "kvevict/model/batch.h"

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

Batch::Batch(std::shared_ptr<const Model> model, const BatchOptions& options)
    : model_(std::move(model)), share_(options.share_prefix) {
  if (!model_) throw ContractError("batch: no model");
  const ModelConfig& c = model_->config();
  capacity_ = options.capacity == 0 ? c.context : options.capacity;
  if (capacity_ > c.context) {
    throw InputError(fmt::format("batch: capacity {} is over the model's context of {} positions", capacity_,
                                 c.context));
  }
  if (options.block_size == 0) throw ParameterError("batch: block_size (0) must be at least 1");
  if (options.pool_blocks < c.head_count()) {
    throw ParameterError(fmt::format("batch: a pool of {} blocks cannot hold one sequence, which needs {} (one per "
                                     "cache: {} layers x {} KV heads)",
                                     options.pool_blocks, c.head_count(), c.layers, c.kv_heads));
  }
  pool_ = std::make_shared<BlockPool>(c.head_dim(), options.block_size, options.pool_blocks);
}

SequenceId Batch::join(const RunSpec* spec, const PagedOptions& paged) {
  const ModelConfig& c = model_->config();
  if (pool_->free_blocks() < c.head_count()) {
    throw InputError(fmt::format("batch: no room to join: {} of the pool's {} blocks are free and a sequence needs "
                                 "{} to read its first token (one per cache)",
                                 pool_->free_blocks(), pool_->blocks(), c.head_count()));
  }
  if (spec != nullptr && paged.blocks() && paged.block_size != pool_->block_size()) {
    throw ParameterError(fmt::format("batch: block mode evicts blocks of {} positions; the pool's blocks hold {}",
                                     paged.block_size, pool_->block_size()));
  }
  Member m;
  if (spec != nullptr) m.policies = DecoderPolicies(*spec, c, paged);
  DecoderOptions options;
  options.capacity = capacity_;
  options.pool = pool_;
  options.share_prefix = share_;
  m.decoder = std::make_unique<Decoder>(model_, options);
  m.policies.attach(*m.decoder);
  const SequenceId id = next_id_++;
  members_.emplace(id, std::move(m));
  return id;
}

Batch::Member& Batch::find(SequenceId id, const char* what) {
  const auto it = members_.find(id);
  if (it == members_.end()) {
    throw InputError(fmt::format("batch: cannot {} sequence {}: {}", what, id,
                                 id < next_id_ ? "it has left" : "no sequence has that id"));
  }
  return it->second;
}

const Batch::Member& Batch::find(SequenceId id, const char* what) const {
  return const_cast<Batch*>(this)->find(id, what);  // NOLINT: the same lookup, read-only
}

void Batch::leave(SequenceId id) {
  find(id, "remove");
  members_.erase(id);  // the decoder's store gives back its references
}

std::span<const float> Batch::step(SequenceId id, std::uint8_t token) {
  Member& m = find(id, "step");
  try {
    return m.decoder->step(token);
  } catch (const InputError& e) {
    throw InputError(fmt::format("sequence {}: {}", id, e.what()));
  } catch (const ContractError& e) {
    throw ContractError(fmt::format("sequence {}: {}", id, e.what()));
  }
}

const Decoder& Batch::decoder(SequenceId id) const { return *find(id, "read").decoder; }

std::vector<SequenceId> Batch::sequences() const {
  std::vector<SequenceId> out;
  out.reserve(members_.size());
  for (const auto& [id, m] : members_) out.push_back(id);
  return out;
}

}  // namespace kvevict
