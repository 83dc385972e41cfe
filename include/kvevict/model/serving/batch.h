// Many sequences decoding over one block pool (docs/serving.md): continuous
// batching, where a sequence joins or leaves between steps, each with its own
// block tables and its own policies (or layer budgets), all taking blocks from
// one BlockPool. With prefix sharing on, sequences that make the same full
// block (same cache, tokens and positions, equal bytes) hold one copy of it
// (kv_store.h); eviction never changes what another sequence sees.
//
// Each sequence is a Decoder on the shared pool, so its logits equal its solo
// run's to the bit whatever the batch around it: sharing only ever replaces a
// block by one with the same bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/paged.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/kv/kv_store.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"

namespace kvevict {

struct BatchOptions {
  std::uint32_t capacity = 0;     // positions per cache of each sequence (0: the model's context)
  std::uint32_t block_size = 16;  // positions per pool block, >= 1
  std::uint64_t pool_blocks = 0;  // blocks in the pool, at least one sequence's caches (layers x KV heads)
  bool share_prefix = true;
  // Where every sequence's kept keys sit in rotary space (rope.h).
  PositionMode positions = PositionMode::kOriginal;
};

using SequenceId = std::uint64_t;

class Batch {
 public:
  // Throws ParameterError for a block size of 0 or a pool that cannot give
  // one sequence a block per cache; InputError for a capacity over the context.
  Batch(std::shared_ptr<const Model> model, const BatchOptions& options);

  // A new sequence with the full cache (spec null) or `spec`'s policy per
  // cache (block mode: paged.block_size must be the pool's; layer mode:
  // budgets shared per layer). Ids count up from 0 and are never reused.
  // Throws InputError when the pool has fewer free blocks than the sequence
  // has caches (it could not read its first token), and what building the
  // policies throws; the batch is unchanged.
  SequenceId join(const RunSpec* spec = nullptr, const PagedOptions& paged = {});
  // The sequence leaves; its blocks' references go back to the pool.
  void leave(SequenceId id);
  // Feeds sequence `id` its next token (Decoder::step). A failure (the pool
  // exhausted, a policy's error) is rethrown naming the sequence, which
  // leaves the batch (its blocks go back to the pool: preemption), so the
  // others go on; asking for it later says so.
  std::span<const float> step(SequenceId id, Token token);

  const Decoder& decoder(SequenceId id) const;
  // For Decoder::drop() (compression after a chunk of a prompt).
  Decoder& decoder(SequenceId id);
  std::vector<SequenceId> sequences() const;
  std::size_t size() const noexcept { return members_.size(); }
  const BlockPool& pool() const noexcept { return *pool_; }
  const ModelConfig& config() const noexcept { return model_->config(); }
  std::uint32_t capacity() const noexcept { return capacity_; }
  bool share_prefix() const noexcept { return share_; }

 private:
  struct Member {
    DecoderPolicies policies;  // before the decoder: destroyed after it
    std::unique_ptr<Decoder> decoder;
  };
  const Member& find(SequenceId id, const char* what) const;

  std::shared_ptr<const Model> model_;
  std::shared_ptr<BlockPool> pool_;
  std::uint32_t capacity_ = 0;
  PositionMode positions_ = PositionMode::kOriginal;
  bool share_ = true;
  std::map<SequenceId, Member> members_;
  std::map<SequenceId, std::uint32_t> removed_;  // sequences whose step failed -> that step's position
  SequenceId next_id_ = 0;
};

}  // namespace kvevict
