#include "kvevict/model/serving/batch.h"

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

Batch::Batch(std::shared_ptr<const Model> model, const BatchOptions& options)
    : model_(std::move(model)), share_(options.share_prefix) {
  if (!model_) throw ContractError("batch: no model");
  const ModelConfig& c = model_->config();
  capacity_ = options.capacity == 0 ? c.context : options.capacity;
  positions_ = options.positions;
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
  options.positions = positions_;
  m.decoder = std::make_unique<Decoder>(model_, options);
  m.policies.attach(*m.decoder);
  const SequenceId id = next_id_++;
  members_.emplace(id, std::move(m));
  return id;
}

const Batch::Member& Batch::find(SequenceId id, const char* what) const {
  const auto it = members_.find(id);
  if (it == members_.end()) {
    const auto failed = removed_.find(id);
    throw InputError(fmt::format("batch: cannot {} sequence {}: {}", what, id,
                                 failed != removed_.end()
                                     ? fmt::format("it left the batch when its step at position {} failed",
                                                   failed->second)
                                 : id < next_id_ ? std::string("it has left")
                                                 : std::string("no sequence has that id")));
  }
  return it->second;
}

void Batch::leave(SequenceId id) {
  find(id, "remove");
  members_.erase(id);  // the decoder's store gives back its references
}

std::span<const float> Batch::step(SequenceId id, Token token) {
  Decoder& d = *find(id, "step").decoder;  // the decoder is owned, not const
  const std::uint32_t pos = d.position();
  // A step that fails leaves the sequence's caches out of step with its
  // policies; it leaves the batch, so that the blocks it held go back to the
  // pool and the others go on.
  auto preempt = [&] {
    members_.erase(id);
    removed_.emplace(id, pos);
    return fmt::format(" (sequence {} left the batch; its blocks are back in the pool)", id);
  };
  try {
    return d.step(token);
  } catch (const InputError& e) {
    const std::string what = e.what();
    throw InputError(fmt::format("sequence {}: {}{}", id, what, preempt()));
  } catch (const ContractError& e) {
    const std::string what = e.what();
    throw ContractError(fmt::format("sequence {}: {}{}", id, what, preempt()));
  } catch (...) {
    preempt();
    throw;
  }
}

const Decoder& Batch::decoder(SequenceId id) const { return *find(id, "read").decoder; }

Decoder& Batch::decoder(SequenceId id) { return *find(id, "read").decoder; }

std::vector<SequenceId> Batch::sequences() const {
  std::vector<SequenceId> out;
  out.reserve(members_.size());
  for (const auto& [id, m] : members_) out.push_back(id);
  return out;
}

}  // namespace kvevict
