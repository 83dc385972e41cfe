// The KV store (docs/serving.md): where a decoder keeps each cache's keys and
// values, apart from the weights (model.h) and the step that fills them.
//
// BlockPool   fixed-size blocks of keys and values, a free list and a
//             reference count per block; one pool may serve many sequences.
//             Full blocks can be published by their cache, tokens and
//             positions, so a second sequence that makes the same block
//             references it instead of holding a copy (prefix sharing).
// SequenceStore  one sequence's caches (layers x KV heads): contiguous
//             buffers of its own, or block tables into a pool. Rows are
//             appended at the end, read back in order, and removed by marks
//             (eviction), which compacts the survivors in order.
//
// Sharing never changes what a sequence sees: a block is shared only when its
// bytes equal the block the sequence made itself (checked, not assumed), a
// shared block is copied before a sequence changes it (copy on write), and
// dropping a shared block drops only that sequence's reference. Sizes are
// fixed at construction; appending, reading and evicting never allocate.
//
// A store keeps its positions at one precision (kv_precision.h): fp32 rows
// as computed, or fp16, int8 or int4 codes with their scales. A quantized
// row is written once -- when it arrives, or when the residual window it
// waits in fills -- and read back through rows(); eviction and compaction
// move codes and scales and never re-quantize what stays. Prefix sharing
// needs fp32 rows (it compares blocks bit for bit).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kvevict/core/policy.h"
#include "kvevict/model/kv/kv_precision.h"

namespace kvevict {

// What one sequence's store holds, measured (not computed from budgets).
struct StoreStats {
  std::uint32_t block_size = 0;       // 0: contiguous
  std::uint64_t pool_blocks = 0;      // paged: blocks in the pool
  std::uint64_t blocks_in_use = 0;    // paged: blocks this sequence references now (a shared one counts here too)
  std::uint64_t peak_blocks = 0;      // paged: the most referenced at once since construction or clear()
  std::uint64_t positions_held = 0;   // every cache together, now
  std::uint64_t peak_positions = 0;   // the most held at once since construction or clear()
  std::uint64_t peak_cache = 0;       // the most positions any one cache held at once
  std::uint64_t rows_moved = 0;       // key/value rows copied to close the gaps evictions left
  // Bytes of keys and values held, every cache together (kv_precision.h):
  // contiguous, the rows held; paged, the blocks referenced; both, the
  // residual window's fp32 rows and int4's live key groups (lo and scale per
  // channel). Now, and the most at once; and the most any one cache held.
  std::uint64_t bytes_held = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t peak_cache_bytes = 0;
};

// What a pool holds, measured: physical blocks, and what sharing saved.
struct PoolStats {
  std::uint32_t block_size = 0;
  std::uint64_t blocks = 0;          // in the pool
  std::uint64_t in_use = 0;          // blocks with at least one reference, now
  std::uint64_t peak_in_use = 0;     // the most at once since construction or reset_peaks()
  std::uint64_t references = 0;      // block references held by every cache of every sequence, now
  std::uint64_t saved = 0;           // references - in_use: blocks sharing saves now
  std::uint64_t peak_saved = 0;      // the most saved at once
  std::uint64_t shared = 0;          // times a sequence took a published block instead of its own copy
  std::uint64_t copies = 0;          // shared blocks copied before a sequence changed them
  std::uint64_t published = 0;       // blocks published now
};

class BlockPool {
 public:
  // Throws ParameterError for a zero size or a pool over 2^30 floats a side.
  // Its rows hold `format`'s precision (the residual window is each
  // sequence's own).
  BlockPool(std::uint32_t head_dim, std::uint32_t block_size, std::uint64_t blocks, KvFormat format = {});
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  std::uint32_t head_dim() const noexcept { return head_dim_; }
  std::uint32_t block_size() const noexcept { return block_size_; }
  KvPrecision precision() const noexcept { return precision_; }
  std::uint64_t blocks() const noexcept { return refcount_.size(); }
  std::uint64_t free_blocks() const noexcept { return free_count_; }
  std::uint32_t refcount(std::uint32_t block) const noexcept { return refcount_[block]; }
  const PoolStats& stats() const noexcept { return stats_; }
  // Starts the peaks from now (the pool need not be empty).
  void reset_peaks() noexcept;

 private:
  friend class SequenceStore;
  static constexpr std::uint32_t kNone = 0xFFFFFFFFU;

  float* keys(std::uint32_t block) noexcept { return keys_.data() + std::size_t{block} * block_size_ * key_floats_; }
  float* values(std::uint32_t block) noexcept {
    return values_.data() + std::size_t{block} * block_size_ * value_floats_;
  }
  bool try_take(std::uint32_t& block) noexcept;
  void retain(std::uint32_t block) noexcept;
  void release(std::uint32_t block) noexcept;
  void count_saved() noexcept;
  // Prefix sharing: a published block by (cache, tokens, positions) whose
  // bytes equal `mine`'s; kNone when there is none.
  std::uint32_t find_equal(std::uint32_t cache, std::uint64_t tokens, std::span<const Position> positions,
                           std::uint32_t mine) noexcept;
  void publish(std::uint32_t block, std::uint32_t cache, std::uint64_t tokens,
               std::span<const Position> positions) noexcept;
  void unpublish(std::uint32_t block) noexcept;
  std::size_t bucket_of(std::uint32_t cache, std::uint64_t tokens, std::span<const Position> positions) const noexcept;

  std::uint32_t head_dim_;
  std::uint32_t block_size_;
  KvPrecision precision_;
  std::uint32_t key_floats_;    // a stored key row, in floats (head_dim at fp32)
  std::uint32_t value_floats_;
  std::vector<float> keys_;    // [blocks, block_size, key_floats]
  std::vector<float> values_;
  std::vector<std::uint32_t> free_list_;  // a stack; block 0 is taken first from a new pool
  std::uint64_t free_count_ = 0;
  std::vector<std::uint32_t> refcount_;
  // Published blocks, chained per hash bucket (no allocation after construction).
  std::vector<std::uint32_t> buckets_;    // head of each chain
  std::vector<std::uint32_t> next_;       // next block in the chain
  std::vector<std::uint8_t> is_published_;
  std::vector<std::uint32_t> cache_of_;
  std::vector<std::uint64_t> tokens_of_;
  std::vector<Position> positions_of_;    // [blocks, block_size]
  PoolStats stats_;
};

// The shape of one sequence's store.
struct StoreShape {
  std::uint32_t layers = 0;
  std::uint32_t kv_heads = 0;   // caches = layers x kv_heads; cache h = layer * kv_heads + kv_head
  std::uint32_t head_dim = 0;
  std::uint32_t capacity = 0;   // positions per cache
};

class SequenceStore {
 public:
  // Contiguous when `pool` is null: one [capacity, head_dim] buffer per cache.
  // Otherwise block tables into `pool` (whose head_dim must match), taking a
  // block when a cache's last one is full. With `share_prefix`, each block a
  // cache fills is published, or swapped for an equal published one.
  // Rows at `format`'s precision (a pool's must be the same). Throws
  // ParameterError for a mismatched pool, sharing without one or with a
  // quantized format, and check_format()'s rules.
  SequenceStore(const StoreShape& shape, std::shared_ptr<BlockPool> pool, bool share_prefix, KvFormat format = {});
  ~SequenceStore();  // gives back every reference
  SequenceStore(const SequenceStore&) = delete;
  SequenceStore& operator=(const SequenceStore&) = delete;

  const StoreShape& shape() const noexcept { return shape_; }
  std::uint32_t caches() const noexcept { return static_cast<std::uint32_t>(caches_.size()); }
  bool paged() const noexcept { return pool_ != nullptr; }
  const KvFormat& format() const noexcept { return format_; }
  // Positions of cache `cache` in the residual window (at fp32, the newest).
  std::uint32_t pending(std::uint32_t cache) const noexcept { return caches_[cache].pending; }
  // Bytes cache `cache` holds now (StoreStats::bytes_held's share).
  std::uint64_t bytes(std::uint32_t cache) const noexcept { return cache_bytes(caches_[cache]); }
  BlockPool* pool() const noexcept { return pool_.get(); }
  std::uint32_t count(std::uint32_t cache) const noexcept { return caches_[cache].count; }
  std::span<const Position> positions(std::uint32_t cache) const noexcept {
    return {caches_[cache].positions.data(), caches_[cache].count};
  }
  // Paged: the pool blocks cache `cache` references, in order.
  std::span<const std::uint32_t> blocks(std::uint32_t cache) const noexcept;

  // Appends position `pos` to cache `cache` and returns its key and value rows
  // to fill (head_dim floats each, fp32: the stored rows, or where a
  // quantized store takes them from). Takes a block (or copies a shared last
  // block) first when needed; throws InputError, changing nothing, when the
  // pool has none free. Throws ContractError past the capacity.
  std::pair<float*, float*> append(std::uint32_t cache, Position pos);
  // After the appended rows are written: a quantized store stores them
  // (at once, or with the residual window once it fills); with sharing, a
  // block the append filled is published under (cache, `tokens`, its
  // positions), or swapped for an equal published one. `tokens` identifies
  // every token fed so far. Throws ContractError when int4 has no free key
  // group (more groups alive than capacity / residual: a store appended to
  // past its capacity between clears).
  void seal(std::uint32_t cache, std::uint64_t tokens);

  // The cache's held rows, contiguous ([count, head_dim] fp32 each): its own
  // buffers, or the pool's rows copied through the block table; a quantized
  // store's read back from their codes (the residual window's as they are).
  std::pair<const float*, const float*> rows(std::uint32_t cache) noexcept;

  // Marks `victims` for removal. The first victim not held, or named twice,
  // is returned instead, with nothing marked.
  struct BadVictim {
    Position position;
    bool repeated;  // false: not held
  };
  std::optional<BadVictim> try_mark(std::uint32_t cache, std::span<const Position> victims) noexcept;
  // Marks `victims` (held, no repeats) for removal. Throws ContractError
  // "WHO: victim V at position P (layer L, KV head K) is not held" (or
  // "named twice"), changing nothing. `who` and `pos` only name the error.
  void mark(std::uint32_t cache, std::span<const Position> victims, std::string_view who, Position pos);
  // Removes the marked positions: whole marked blocks drop their reference
  // without moving a row, the survivors are compacted in order (a shared
  // block copied before it is written) and trailing empty blocks dropped.
  // Returns the positions removed. Throws InputError, changing nothing, when
  // the copies need more free blocks than the pool has.
  std::uint32_t remove_marked(std::uint32_t cache);

  // Drops every reference and position; the stats start again.
  void clear() noexcept;
  StoreStats stats() const noexcept { return stats_; }

 private:
  struct Cache {
    std::vector<float> keys;    // contiguous: [capacity, key_floats]
    std::vector<float> values;  // [capacity, value_floats]
    std::vector<std::uint32_t> table;  // paged: the pool block of each logical block
    std::vector<Position> positions;   // [capacity], ascending in slots 0 ... count-1
    std::vector<std::uint8_t> marked;  // [capacity]
    std::uint32_t count = 0;
    // Quantized: the residual window's rows at fp32 ([residual, head_dim]),
    // the last `pending` slots'.
    std::vector<float> residual_keys;
    std::vector<float> residual_values;
    std::uint32_t pending = 0;
    // int4: key groups, lo and scale per channel ([groups, head_dim]), the
    // held rows each references, and the free ones (a stack).
    std::vector<float> group_lo;
    std::vector<float> group_scale;
    std::vector<std::uint32_t> group_rows;
    std::vector<std::uint32_t> free_groups;
    std::uint32_t free_group_count = 0;
    std::uint32_t live_groups = 0;
  };
  std::uint64_t cache_bytes(const Cache& c) const noexcept;
  void recount(const Cache& c, std::uint64_t before) noexcept;
  void quantize_rows(Cache& c, std::uint32_t cache);  // the residual window (or the staged row) into codes
  void decode_key(Cache& c, std::uint32_t slot, float* out) noexcept;
  void decode_value(Cache& c, std::uint32_t slot, float* out) noexcept;
  float* key_row(Cache& c, std::uint32_t slot) noexcept;
  float* value_row(Cache& c, std::uint32_t slot) noexcept;
  // Makes logical block `b` of the cache this sequence's own before a write:
  // copies it when shared, withdraws it from publication when not.
  void own(Cache& c, std::uint32_t b, std::uint32_t cache);
  std::uint64_t blocks_of(const Cache& c) const noexcept;
  void take(Cache& c, std::uint32_t cache, std::uint32_t b, Position pos);
  void drop_reference(std::uint32_t block) noexcept;
  void add_reference() noexcept;

  StoreShape shape_;
  std::shared_ptr<BlockPool> pool_;
  bool share_ = false;
  KvFormat format_;
  std::uint32_t residual_ = 0;     // the window in effect
  std::uint32_t key_floats_ = 0;   // a stored row, in floats
  std::uint32_t value_floats_ = 0;
  std::vector<Cache> caches_;
  std::vector<float> gather_keys_;  // [capacity, head_dim]: one cache's rows read through its table or decoded
  std::vector<float> gather_values_;
  std::vector<float> stage_keys_;   // quantized without a residual window: the appended row before it is stored
  std::vector<float> stage_values_;
  std::vector<std::int8_t> codes_;  // int8 scratch, [head_dim]
  StoreStats stats_;
};

}  // namespace kvevict
