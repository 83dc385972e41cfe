#include "kvevict/model/kv_store.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

constexpr std::uint64_t kMaxFloats = 1ULL << 30;  // per side (keys, values): 4 GiB

// splitmix64's finaliser: every input bit reaches every output bit.
std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

// ---- the pool ---------------------------------------------------------------------

BlockPool::BlockPool(std::uint32_t head_dim, std::uint32_t block_size, std::uint64_t blocks)
    : head_dim_(head_dim), block_size_(block_size) {
  if (head_dim == 0) throw ParameterError("block pool: head_dim must be at least 1");
  if (block_size == 0) throw ParameterError("block pool: block_size must be at least 1");
  if (blocks == 0) throw ParameterError("block pool: a pool needs at least 1 block");
  if (blocks >= kNone || blocks > kMaxFloats / block_size / head_dim) {
    throw ParameterError(fmt::format("block pool: {} blocks of {} positions x {} floats is too large (at most 2^30 "
                                     "floats a side)",
                                     blocks, block_size, head_dim));
  }
  keys_.assign(blocks * block_size * head_dim, 0.0F);
  values_.assign(blocks * block_size * head_dim, 0.0F);
  free_list_.resize(blocks);
  for (std::uint64_t i = 0; i < blocks; ++i) free_list_[i] = static_cast<std::uint32_t>(blocks - 1 - i);
  free_count_ = blocks;
  refcount_.assign(blocks, 0);
  buckets_.assign(std::bit_ceil(blocks), kNone);
  next_.assign(blocks, kNone);
  is_published_.assign(blocks, 0);
  cache_of_.assign(blocks, 0);
  tokens_of_.assign(blocks, 0);
  positions_of_.assign(blocks * block_size, 0);
  stats_.block_size = block_size;
  stats_.blocks = blocks;
}

void BlockPool::reset_peaks() noexcept {
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_saved = stats_.saved;
}

bool BlockPool::try_take(std::uint32_t& block) noexcept {
  if (free_count_ == 0) return false;
  block = free_list_[--free_count_];
  refcount_[block] = 1;
  ++stats_.in_use;
  ++stats_.references;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  count_saved();
  return true;
}

void BlockPool::retain(std::uint32_t block) noexcept {
  ++refcount_[block];
  ++stats_.references;
  count_saved();
}

void BlockPool::release(std::uint32_t block) noexcept {
  --refcount_[block];
  --stats_.references;
  if (refcount_[block] == 0) {
    if (is_published_[block] != 0) unpublish(block);
    free_list_[free_count_++] = block;
    --stats_.in_use;
  }
  count_saved();
}

void BlockPool::count_saved() noexcept {
  stats_.saved = stats_.references - stats_.in_use;
  stats_.peak_saved = std::max(stats_.peak_saved, stats_.saved);
}

std::size_t BlockPool::bucket_of(std::uint32_t cache, std::uint64_t tokens,
                                 std::span<const Position> positions) const noexcept {
  std::uint64_t h = mix(tokens ^ mix(cache + 0x9E3779B97F4A7C15ULL));
  for (const Position p : positions) h = mix(h ^ static_cast<std::uint64_t>(p));
  return static_cast<std::size_t>(h & (buckets_.size() - 1));
}

std::uint32_t BlockPool::find_equal(std::uint32_t cache, std::uint64_t tokens, std::span<const Position> positions,
                                    std::uint32_t mine) noexcept {
  const std::size_t rows = std::size_t{block_size_} * head_dim_ * sizeof(float);
  for (std::uint32_t b = buckets_[bucket_of(cache, tokens, positions)]; b != kNone; b = next_[b]) {
    if (b == mine || cache_of_[b] != cache || tokens_of_[b] != tokens) continue;
    if (!std::equal(positions.begin(), positions.end(), positions_of_.begin() + std::ptrdiff_t{b} * block_size_)) {
      continue;
    }
    // Bitwise, so that sharing cannot change a sequence's numbers at all.
    if (std::memcmp(keys(b), keys(mine), rows) == 0 && std::memcmp(values(b), values(mine), rows) == 0) return b;
  }
  return kNone;
}

void BlockPool::publish(std::uint32_t block, std::uint32_t cache, std::uint64_t tokens,
                        std::span<const Position> positions) noexcept {
  cache_of_[block] = cache;
  tokens_of_[block] = tokens;
  std::copy(positions.begin(), positions.end(), positions_of_.begin() + std::ptrdiff_t{block} * block_size_);
  const std::size_t bucket = bucket_of(cache, tokens, positions);
  next_[block] = buckets_[bucket];
  buckets_[bucket] = block;
  is_published_[block] = 1;
  ++stats_.published;
}

void BlockPool::unpublish(std::uint32_t block) noexcept {
  const std::span<const Position> positions(positions_of_.data() + std::size_t{block} * block_size_, block_size_);
  std::uint32_t* link = &buckets_[bucket_of(cache_of_[block], tokens_of_[block], positions)];
  while (*link != block) link = &next_[*link];
  *link = next_[block];
  next_[block] = kNone;
  is_published_[block] = 0;
  --stats_.published;
}

// ---- one sequence's caches ---------------------------------------------------------

SequenceStore::SequenceStore(const StoreShape& shape, std::shared_ptr<BlockPool> pool, bool share_prefix)
    : shape_(shape), pool_(std::move(pool)), share_(share_prefix) {
  if (shape.layers == 0 || shape.kv_heads == 0 || shape.head_dim == 0 || shape.capacity == 0) {
    throw ParameterError("store: layers, KV heads, head_dim and capacity must each be at least 1");
  }
  if (share_ && !pool_) throw ParameterError("store: prefix sharing needs a paged store (a block pool)");
  if (pool_ && pool_->head_dim() != shape.head_dim) {
    throw ParameterError(fmt::format("store: the pool's rows have {} floats; the model's heads have {}",
                                     pool_->head_dim(), shape.head_dim));
  }
  const std::size_t d = shape.head_dim;
  if (!pool_ && std::size_t{shape.capacity} * d > kMaxFloats) {
    throw ParameterError(fmt::format("store: a cache of {} positions is too large", shape.capacity));
  }
  caches_.resize(std::size_t{shape.layers} * shape.kv_heads);
  for (Cache& c : caches_) {
    if (pool_) {
      c.table.assign((shape.capacity + pool_->block_size() - 1) / pool_->block_size(), 0);
    } else {
      c.keys.assign(std::size_t{shape.capacity} * d, 0.0F);
      c.values.assign(std::size_t{shape.capacity} * d, 0.0F);
    }
    c.positions.assign(shape.capacity, 0);
    c.marked.assign(shape.capacity, 0);
  }
  if (pool_) {
    gather_keys_.assign(std::size_t{shape.capacity} * d, 0.0F);
    gather_values_.assign(std::size_t{shape.capacity} * d, 0.0F);
  }
  clear();
}

SequenceStore::~SequenceStore() { clear(); }

std::span<const std::uint32_t> SequenceStore::blocks(std::uint32_t cache) const noexcept {
  if (!pool_) return {};
  const Cache& c = caches_[cache];
  return {c.table.data(), (c.count + pool_->block_size() - 1) / pool_->block_size()};
}

float* SequenceStore::key_row(Cache& c, std::uint32_t slot) noexcept {
  const std::size_t d = shape_.head_dim;
  if (!pool_) return c.keys.data() + std::size_t{slot} * d;
  const std::uint32_t bs = pool_->block_size();
  return pool_->keys(c.table[slot / bs]) + std::size_t{slot % bs} * d;
}

float* SequenceStore::value_row(Cache& c, std::uint32_t slot) noexcept {
  const std::size_t d = shape_.head_dim;
  if (!pool_) return c.values.data() + std::size_t{slot} * d;
  const std::uint32_t bs = pool_->block_size();
  return pool_->values(c.table[slot / bs]) + std::size_t{slot % bs} * d;
}

void SequenceStore::add_reference() noexcept {
  ++stats_.blocks_in_use;
  stats_.peak_blocks = std::max(stats_.peak_blocks, stats_.blocks_in_use);
}

void SequenceStore::drop_reference(std::uint32_t block) noexcept {
  pool_->release(block);
  --stats_.blocks_in_use;
}

void SequenceStore::take(Cache& c, std::uint32_t cache, std::uint32_t b, Position pos) {
  if (!pool_->try_take(c.table[b])) {
    throw InputError(fmt::format("decoder: the block pool is exhausted at position {} (layer {}, KV head {}): "
                                 "all {} blocks are in use",
                                 pos, cache / shape_.kv_heads, cache % shape_.kv_heads, pool_->blocks()));
  }
  add_reference();
}

void SequenceStore::own(Cache& c, std::uint32_t b, std::uint32_t cache) {
  const std::uint32_t block = c.table[b];
  if (pool_->refcount(block) > 1) {
    std::uint32_t copy = 0;
    if (!pool_->try_take(copy)) {
      throw InputError(fmt::format("decoder: the block pool is exhausted: layer {}, KV head {} must copy a shared "
                                   "block before changing it and all {} blocks are in use",
                                   cache / shape_.kv_heads, cache % shape_.kv_heads, pool_->blocks()));
    }
    const std::size_t n = std::size_t{pool_->block_size()} * shape_.head_dim;
    std::copy_n(pool_->keys(block), n, pool_->keys(copy));
    std::copy_n(pool_->values(block), n, pool_->values(copy));
    pool_->release(block);  // others still hold it
    c.table[b] = copy;
    ++pool_->stats_.copies;
  } else if (pool_->is_published_[block] != 0) {
    pool_->unpublish(block);  // its bytes are about to change
  }
}

std::pair<float*, float*> SequenceStore::append(std::uint32_t cache, Position pos) {
  Cache& c = caches_[cache];
  const std::uint32_t slot = c.count;
  if (slot >= shape_.capacity) {
    throw ContractError(fmt::format("store: cache {} is full ({} positions)", cache, shape_.capacity));
  }
  if (pool_) {
    const std::uint32_t bs = pool_->block_size();
    if (slot % bs == 0) {
      take(c, cache, slot / bs, pos);
    } else {
      own(c, slot / bs, cache);
    }
  }
  c.positions[slot] = pos;
  c.count = slot + 1;
  ++stats_.positions_held;
  stats_.peak_positions = std::max(stats_.peak_positions, stats_.positions_held);
  stats_.peak_cache = std::max<std::uint64_t>(stats_.peak_cache, c.count);
  return {key_row(c, slot), value_row(c, slot)};
}

void SequenceStore::seal(std::uint32_t cache, std::uint64_t tokens) noexcept {
  if (!share_) return;
  Cache& c = caches_[cache];
  const std::uint32_t bs = pool_->block_size();
  if (c.count == 0 || c.count % bs != 0) return;
  const std::uint32_t b = c.count / bs - 1;
  const std::span<const Position> positions(c.positions.data() + std::size_t{b} * bs, bs);
  const std::uint32_t mine = c.table[b];
  const std::uint32_t equal = pool_->find_equal(cache, tokens, positions, mine);
  if (equal == BlockPool::kNone) {
    pool_->publish(mine, cache, tokens, positions);
    return;
  }
  pool_->retain(equal);
  c.table[b] = equal;
  pool_->release(mine);
  ++pool_->stats_.shared;
}

std::pair<const float*, const float*> SequenceStore::rows(std::uint32_t cache) noexcept {
  Cache& c = caches_[cache];
  if (!pool_) return {c.keys.data(), c.values.data()};
  const std::size_t d = shape_.head_dim;
  const std::uint32_t bs = pool_->block_size();
  const std::uint32_t n = c.count;
  for (std::uint32_t b = 0; std::size_t{b} * bs < n; ++b) {
    const std::size_t len = std::min<std::size_t>(bs, n - std::size_t{b} * bs) * d;
    const std::size_t to = std::size_t{b} * bs * d;
    std::copy_n(pool_->keys(c.table[b]), len, gather_keys_.data() + to);
    std::copy_n(pool_->values(c.table[b]), len, gather_values_.data() + to);
  }
  return {gather_keys_.data(), gather_values_.data()};
}

std::optional<SequenceStore::BadVictim> SequenceStore::try_mark(std::uint32_t cache,
                                                                std::span<const Position> victims) noexcept {
  Cache& c = caches_[cache];
  const std::uint32_t n = c.count;
  std::fill_n(c.marked.begin(), n, std::uint8_t{0});
  for (const Position victim : victims) {
    const auto* found = std::lower_bound(c.positions.data(), c.positions.data() + n, victim);
    const auto at = static_cast<std::size_t>(found - c.positions.data());
    const bool held = at != n && *found == victim;
    if (!held || c.marked[at] != 0) {
      std::fill_n(c.marked.begin(), n, std::uint8_t{0});
      return BadVictim{victim, held};
    }
    c.marked[at] = 1;
  }
  return std::nullopt;
}

void SequenceStore::mark(std::uint32_t cache, std::span<const Position> victims, std::string_view who,
                         Position pos) {
  if (const auto bad = try_mark(cache, victims)) {
    throw ContractError(fmt::format("{}: victim {} at position {} (layer {}, KV head {}) is {}", who, bad->position,
                                    pos, cache / shape_.kv_heads, cache % shape_.kv_heads,
                                    bad->repeated ? "named twice" : "not held"));
  }
}

std::uint32_t SequenceStore::remove_marked(std::uint32_t cache) {
  Cache& c = caches_[cache];
  const std::uint32_t d = shape_.head_dim;
  const std::uint32_t n = c.count;
  std::uint32_t slots = n;
  std::uint32_t kept_blocks = 0;
  if (pool_) {
    const std::uint32_t bs = pool_->block_size();
    // First, without changing anything: the shared blocks compaction would
    // write into must be copied, and the pool must have the blocks for it
    // (counting the ones this removal frees before the copies are made).
    std::uint64_t available = pool_->free_blocks();
    std::uint32_t survivors = 0;
    std::uint32_t before_gap = std::numeric_limits<std::uint32_t>::max();  // survivors before the first victim
    for (std::uint32_t b = 0; std::size_t{b} * bs < n; ++b) {
      const std::uint32_t begin = b * bs;
      const std::uint32_t end = std::min(n, begin + bs);
      const bool all = std::all_of(c.marked.begin() + begin, c.marked.begin() + end, [](auto m) { return m != 0; });
      if (all) {
        if (pool_->refcount(c.table[b]) == 1) ++available;
        continue;
      }
      for (std::uint32_t i = begin; i < end; ++i) {
        if (c.marked[i] == 0) {
          ++survivors;
        } else if (before_gap == std::numeric_limits<std::uint32_t>::max()) {
          before_gap = survivors;
        }
      }
    }
    if (before_gap < survivors) {  // survivors from slot before_gap on move
      std::uint64_t copies = 0;
      std::uint32_t kept = 0;
      for (std::uint32_t b = 0; std::size_t{b} * bs < n; ++b) {
        const std::uint32_t begin = b * bs;
        const std::uint32_t end = std::min(n, begin + bs);
        if (std::all_of(c.marked.begin() + begin, c.marked.begin() + end, [](auto m) { return m != 0; })) continue;
        if (kept >= before_gap / bs && kept <= (survivors - 1) / bs && pool_->refcount(c.table[b]) > 1) ++copies;
        ++kept;
      }
      if (copies > available) {
        throw InputError(fmt::format("decoder: the block pool is exhausted: layer {}, KV head {} must copy {} shared "
                                     "blocks to close the gaps eviction left, and {} are free",
                                     cache / shape_.kv_heads, cache % shape_.kv_heads, copies, available));
      }
    }
    // Whole marked blocks go without moving a row.
    slots = 0;
    for (std::uint32_t b = 0; std::size_t{b} * bs < n; ++b) {
      const std::uint32_t begin = b * bs;
      const std::uint32_t end = std::min(n, begin + bs);
      const bool all = std::all_of(c.marked.begin() + begin, c.marked.begin() + end, [](auto m) { return m != 0; });
      if (all) {
        drop_reference(c.table[b]);
        continue;
      }
      if (slots != begin) {  // every kept block before it is full: its slots start at kept_blocks * bs
        c.table[kept_blocks] = c.table[b];
        for (std::uint32_t i = begin; i < end; ++i) {
          c.positions[slots + (i - begin)] = c.positions[i];
          c.marked[slots + (i - begin)] = c.marked[i];
        }
      }
      ++kept_blocks;
      slots += end - begin;
    }
  }
  std::uint32_t out = 0;
  for (std::uint32_t i = 0; i < slots; ++i) {
    if (c.marked[i] != 0) continue;
    if (out != i) {
      if (pool_) own(c, out / pool_->block_size(), cache);  // checked above: cannot throw
      std::copy_n(key_row(c, i), d, key_row(c, out));
      std::copy_n(value_row(c, i), d, value_row(c, out));
      c.positions[out] = c.positions[i];
      ++stats_.rows_moved;
    }
    ++out;
  }
  if (pool_) {
    const std::uint32_t bs = pool_->block_size();
    for (std::uint32_t b = (out + bs - 1) / bs; b < kept_blocks; ++b) drop_reference(c.table[b]);
  }
  stats_.positions_held -= n - out;
  c.count = out;
  return n - out;
}

void SequenceStore::clear() noexcept {
  for (Cache& c : caches_) {
    if (pool_) {
      const std::uint32_t bs = pool_->block_size();
      for (std::uint32_t b = 0; std::size_t{b} * bs < c.count; ++b) pool_->release(c.table[b]);
    }
    c.count = 0;
  }
  stats_ = StoreStats{};
  if (pool_) {
    stats_.block_size = pool_->block_size();
    stats_.pool_blocks = pool_->blocks();
  }
}

}  // namespace kvevict
