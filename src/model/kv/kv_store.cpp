#include "kvevict/model/kv/kv_store.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

constexpr std::uint64_t kMaxFloats = 1ULL << 30;  // per side (keys, values): 4 GiB

std::size_t floats_for(std::size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }

// A stored row's size in floats (kv_precision.h): fp16 d halves; int8 its
// scale, then d codes; int4 keys their group's index, then d/2 bytes of codes;
// int4 values lo and scale, then the codes.
std::uint32_t key_floats_of(KvPrecision p, std::uint32_t d) {
  switch (p) {
    case KvPrecision::kFp16:
      return static_cast<std::uint32_t>(floats_for(2 * std::size_t{d}));
    case KvPrecision::kInt8:
      return static_cast<std::uint32_t>(1 + floats_for(d));
    case KvPrecision::kInt4:
      return static_cast<std::uint32_t>(1 + floats_for(d / 2));
    case KvPrecision::kFp32:
      break;
  }
  return d;
}

std::uint32_t value_floats_of(KvPrecision p, std::uint32_t d) {
  if (p == KvPrecision::kInt4) return static_cast<std::uint32_t>(2 + floats_for(d / 2));
  return key_floats_of(p, d);
}

// Stored rows are read and written as bytes (a float buffer may be accessed
// through unsigned char; scales and indices go through memcpy).
unsigned char* bytes_of(float* row) noexcept { return reinterpret_cast<unsigned char*>(row); }
const unsigned char* bytes_of(const float* row) noexcept { return reinterpret_cast<const unsigned char*>(row); }

void put_half_row(const float* x, std::uint32_t d, unsigned char* out) noexcept {
  for (std::uint32_t i = 0; i < d; ++i) {
    const std::uint16_t h = to_half(x[i]);
    out[2 * i] = static_cast<unsigned char>(h & 0xFFU);
    out[2 * i + 1] = static_cast<unsigned char>(h >> 8);
  }
}

// Every half's float, made once (256 KiB): reading a row back is a lookup
// per number instead of from_half's branches. A store at fp16 makes it in
// its constructor, so no step pays for it.
const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) t[h] = from_half(static_cast<std::uint16_t>(h));
    return t;
  }();
  return table.data();
}

void get_half_row(const unsigned char* in, std::uint32_t d, float* out) noexcept {
  const float* table = half_table();
  for (std::uint32_t i = 0; i < d; ++i) out[i] = table[in[2 * i] | (in[2 * i + 1] << 8)];
}

void put_int8_row(const float* x, std::uint32_t d, std::span<std::int8_t> codes, unsigned char* out) noexcept {
  const float scale = quantize_int8({x, d}, codes.first(d));
  std::memcpy(out, &scale, sizeof scale);
  std::memcpy(out + sizeof scale, codes.data(), d);
}

void get_int8_row(const unsigned char* in, std::uint32_t d, float* out) noexcept {
  float scale = 0.0F;
  std::memcpy(&scale, in, sizeof scale);
  for (std::uint32_t i = 0; i < d; ++i) {
    signed char code = 0;
    std::memcpy(&code, in + sizeof scale + i, 1);
    out[i] = static_cast<float>(code) * scale;
  }
}

// An int4 value row: per token.
void put_int4_value(const float* x, std::uint32_t d, unsigned char* out) noexcept {
  const Int4Range r = int4_range(x, d, 1);
  std::memcpy(out, &r.lo, sizeof(float));
  std::memcpy(out + sizeof(float), &r.scale, sizeof(float));
  unsigned char* codes = out + 2 * sizeof(float);
  std::fill_n(codes, d / 2, static_cast<unsigned char>(0));
  for (std::uint32_t i = 0; i < d; ++i) int4_put(codes, i, int4_code(x[i], r));
}

void get_int4_value(const unsigned char* in, std::uint32_t d, float* out) noexcept {
  Int4Range r;
  std::memcpy(&r.lo, in, sizeof(float));
  std::memcpy(&r.scale, in + sizeof(float), sizeof(float));
  const unsigned char* codes = in + 2 * sizeof(float);
  for (std::uint32_t i = 0; i < d; ++i) out[i] = int4_value(int4_at(codes, i), r);
}

std::uint32_t int4_group_of(const unsigned char* key) noexcept {
  std::uint32_t g = 0;
  std::memcpy(&g, key, sizeof g);
  return g;
}

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

BlockPool::BlockPool(std::uint32_t head_dim, std::uint32_t block_size, std::uint64_t blocks, KvFormat format)
    : head_dim_(head_dim),
      block_size_(block_size),
      precision_(format.precision),
      key_floats_(key_floats_of(format.precision, head_dim)),
      value_floats_(value_floats_of(format.precision, head_dim)) {
  if (head_dim == 0) throw ParameterError("block pool: head_dim must be at least 1");
  if (block_size == 0) throw ParameterError("block pool: block_size must be at least 1");
  if (blocks == 0) throw ParameterError("block pool: a pool needs at least 1 block");
  check_format(format, head_dim);
  const std::uint32_t row = std::max(key_floats_, value_floats_);
  if (blocks >= kNone || blocks > kMaxFloats / block_size / row) {
    throw ParameterError(fmt::format("block pool: {} blocks of {} positions x {} floats is too large (at most 2^30 "
                                     "floats a side)",
                                     blocks, block_size, head_dim));
  }
  keys_.assign(blocks * block_size * key_floats_, 0.0F);
  values_.assign(blocks * block_size * value_floats_, 0.0F);
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
  const std::size_t key_bytes = std::size_t{block_size_} * key_floats_ * sizeof(float);
  const std::size_t value_bytes = std::size_t{block_size_} * value_floats_ * sizeof(float);
  for (std::uint32_t b = buckets_[bucket_of(cache, tokens, positions)]; b != kNone; b = next_[b]) {
    if (b == mine || cache_of_[b] != cache || tokens_of_[b] != tokens) continue;
    if (!std::equal(positions.begin(), positions.end(), positions_of_.begin() + std::ptrdiff_t{b} * block_size_)) {
      continue;
    }
    // Bitwise, so that sharing cannot change a sequence's numbers at all.
    if (std::memcmp(keys(b), keys(mine), key_bytes) == 0 && std::memcmp(values(b), values(mine), value_bytes) == 0) {
      return b;
    }
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

SequenceStore::SequenceStore(const StoreShape& shape, std::shared_ptr<BlockPool> pool, bool share_prefix,
                             KvFormat format)
    : shape_(shape), pool_(std::move(pool)), share_(share_prefix), format_(format) {
  if (shape.layers == 0 || shape.kv_heads == 0 || shape.head_dim == 0 || shape.capacity == 0) {
    throw ParameterError("store: layers, KV heads, head_dim and capacity must each be at least 1");
  }
  check_format(format, shape.head_dim);
  if (share_ && !pool_) throw ParameterError("store: prefix sharing needs a paged store (a block pool)");
  if (share_ && format.quantized()) {
    throw ParameterError(fmt::format("store: prefix sharing compares blocks bit for bit and needs fp32 rows, not {}",
                                     precision_name(format.precision)));
  }
  if (pool_ && pool_->head_dim() != shape.head_dim) {
    throw ParameterError(fmt::format("store: the pool's rows have {} floats; the model's heads have {}",
                                     pool_->head_dim(), shape.head_dim));
  }
  if (pool_ && pool_->precision() != format.precision) {
    throw ParameterError(fmt::format("store: the pool holds {} rows; this sequence's are {}",
                                     precision_name(pool_->precision()), precision_name(format.precision)));
  }
  residual_ = format.residual_window();
  key_floats_ = key_floats_of(format.precision, shape.head_dim);
  value_floats_ = value_floats_of(format.precision, shape.head_dim);
  const std::size_t d = shape.head_dim;
  const std::size_t row = std::max({d, std::size_t{key_floats_}, std::size_t{value_floats_}});
  if (!pool_ && std::size_t{shape.capacity} * row > kMaxFloats) {
    throw ParameterError(fmt::format("store: a cache of {} positions is too large", shape.capacity));
  }
  // int4 key groups: a group is made each time `residual_` positions have
  // arrived, so a store appended to at most `capacity` times between clears
  // (every decoder) never has more than capacity / residual alive.
  const std::size_t groups = format.precision == KvPrecision::kInt4 ? shape.capacity / residual_ : 0;
  caches_.resize(std::size_t{shape.layers} * shape.kv_heads);
  for (Cache& c : caches_) {
    if (pool_) {
      c.table.assign((shape.capacity + pool_->block_size() - 1) / pool_->block_size(), 0);
    } else {
      c.keys.assign(std::size_t{shape.capacity} * key_floats_, 0.0F);
      c.values.assign(std::size_t{shape.capacity} * value_floats_, 0.0F);
    }
    c.positions.assign(shape.capacity, 0);
    c.marked.assign(shape.capacity, 0);
    // A window longer than the cache never fills: its rows stay at fp32.
    const std::size_t window = std::min(residual_, shape.capacity);
    c.residual_keys.assign(window * d, 0.0F);
    c.residual_values.assign(window * d, 0.0F);
    c.group_lo.assign(groups * d, 0.0F);
    c.group_scale.assign(groups * d, 0.0F);
    c.group_rows.assign(groups, 0);
    c.free_groups.assign(groups, 0);
  }
  if (pool_ || format.quantized()) {
    gather_keys_.assign(std::size_t{shape.capacity} * d, 0.0F);
    gather_values_.assign(std::size_t{shape.capacity} * d, 0.0F);
  }
  if (format.precision == KvPrecision::kFp16) half_table();
  if (format.quantized()) {
    stage_keys_.assign(d, 0.0F);
    stage_values_.assign(d, 0.0F);
    codes_.assign(d, 0);
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
  const std::size_t row = key_floats_;
  if (!pool_) return c.keys.data() + std::size_t{slot} * row;
  const std::uint32_t bs = pool_->block_size();
  return pool_->keys(c.table[slot / bs]) + std::size_t{slot % bs} * row;
}

float* SequenceStore::value_row(Cache& c, std::uint32_t slot) noexcept {
  const std::size_t row = value_floats_;
  if (!pool_) return c.values.data() + std::size_t{slot} * row;
  const std::uint32_t bs = pool_->block_size();
  return pool_->values(c.table[slot / bs]) + std::size_t{slot % bs} * row;
}

std::uint64_t SequenceStore::blocks_of(const Cache& c) const noexcept {
  const std::uint32_t bs = pool_->block_size();
  return (std::uint64_t{c.count} + bs - 1) / bs;
}

std::uint64_t SequenceStore::cache_bytes(const Cache& c) const noexcept {
  const std::uint64_t row = (std::uint64_t{key_floats_} + value_floats_) * sizeof(float);
  const std::uint64_t full = 2ULL * shape_.head_dim * sizeof(float);  // an fp32 key and value
  const std::uint64_t stored = pool_ ? blocks_of(c) * pool_->block_size() : c.count - c.pending;
  return stored * row + std::uint64_t{c.pending} * full + std::uint64_t{c.live_groups} * full;
}

void SequenceStore::recount(const Cache& c, std::uint64_t before) noexcept {
  const std::uint64_t now = cache_bytes(c);
  stats_.bytes_held = stats_.bytes_held - before + now;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.bytes_held);
  stats_.peak_cache_bytes = std::max(stats_.peak_cache_bytes, now);
}

void SequenceStore::quantize_rows(Cache& c, std::uint32_t cache) {
  const std::uint32_t d = shape_.head_dim;
  const std::span<std::int8_t> codes(codes_);
  if (residual_ == 0) {  // fp16 / int8 without a window: the appended row alone
    const std::uint32_t slot = c.count - 1;
    unsigned char* k = bytes_of(key_row(c, slot));
    unsigned char* v = bytes_of(value_row(c, slot));
    if (format_.precision == KvPrecision::kFp16) {
      put_half_row(stage_keys_.data(), d, k);
      put_half_row(stage_values_.data(), d, v);
    } else {
      put_int8_row(stage_keys_.data(), d, codes, k);
      put_int8_row(stage_values_.data(), d, codes, v);
    }
    return;
  }
  const std::uint32_t first = c.count - c.pending;
  std::uint32_t group = 0;
  if (format_.precision == KvPrecision::kInt4) {
    if (c.free_group_count == 0) {
      throw ContractError(fmt::format("store: cache {} has no free int4 key group ({} are alive): more than its "
                                      "capacity of {} positions appended since it was cleared",
                                      cache, c.live_groups, shape_.capacity));
    }
    group = c.free_groups[--c.free_group_count];
    ++c.live_groups;
    c.group_rows[group] = c.pending;
    // Each channel's range over the group's tokens.
    for (std::uint32_t ch = 0; ch < d; ++ch) {
      const Int4Range r = int4_range(c.residual_keys.data() + ch, c.pending, d);
      c.group_lo[std::size_t{group} * d + ch] = r.lo;
      c.group_scale[std::size_t{group} * d + ch] = r.scale;
    }
  }
  for (std::uint32_t j = 0; j < c.pending; ++j) {
    const float* x = c.residual_keys.data() + std::size_t{j} * d;
    const float* y = c.residual_values.data() + std::size_t{j} * d;
    unsigned char* k = bytes_of(key_row(c, first + j));
    unsigned char* v = bytes_of(value_row(c, first + j));
    switch (format_.precision) {
      case KvPrecision::kFp16:
        put_half_row(x, d, k);
        put_half_row(y, d, v);
        break;
      case KvPrecision::kInt8:
        put_int8_row(x, d, codes, k);
        put_int8_row(y, d, codes, v);
        break;
      case KvPrecision::kInt4: {
        std::memcpy(k, &group, sizeof group);
        unsigned char* packed = k + sizeof group;
        std::fill_n(packed, d / 2, static_cast<unsigned char>(0));
        for (std::uint32_t ch = 0; ch < d; ++ch) {
          const Int4Range r{c.group_lo[std::size_t{group} * d + ch], c.group_scale[std::size_t{group} * d + ch]};
          int4_put(packed, ch, int4_code(x[ch], r));
        }
        put_int4_value(y, d, v);
        break;
      }
      case KvPrecision::kFp32:
        break;
    }
  }
  c.pending = 0;
}

void SequenceStore::decode_key(Cache& c, std::uint32_t slot, float* out) noexcept {
  const std::uint32_t d = shape_.head_dim;
  const float* row = key_row(c, slot);
  const unsigned char* k = bytes_of(row);
  switch (format_.precision) {
    case KvPrecision::kFp16:
      get_half_row(k, d, out);
      break;
    case KvPrecision::kInt8:
      get_int8_row(k, d, out);
      break;
    case KvPrecision::kInt4: {
      const std::size_t g = int4_group_of(k);
      const unsigned char* packed = k + sizeof(std::uint32_t);
      for (std::uint32_t ch = 0; ch < d; ++ch) {
        out[ch] = int4_value(int4_at(packed, ch), {c.group_lo[g * d + ch], c.group_scale[g * d + ch]});
      }
      break;
    }
    case KvPrecision::kFp32:
      break;
  }
}

void SequenceStore::decode_value(Cache& c, std::uint32_t slot, float* out) noexcept {
  const std::uint32_t d = shape_.head_dim;
  const float* row = value_row(c, slot);
  const unsigned char* v = bytes_of(row);
  switch (format_.precision) {
    case KvPrecision::kFp16:
      get_half_row(v, d, out);
      break;
    case KvPrecision::kInt8:
      get_int8_row(v, d, out);
      break;
    case KvPrecision::kInt4:
      get_int4_value(v, d, out);
      break;
    case KvPrecision::kFp32:
      break;
  }
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
    const std::size_t bs = pool_->block_size();
    std::copy_n(pool_->keys(block), bs * key_floats_, pool_->keys(copy));
    std::copy_n(pool_->values(block), bs * value_floats_, pool_->values(copy));
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
  const std::uint64_t before = cache_bytes(c);
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
  std::pair<float*, float*> rows{key_row(c, slot), value_row(c, slot)};
  if (format_.quantized() && residual_ == 0) {
    rows = {stage_keys_.data(), stage_values_.data()};
  } else if (format_.quantized()) {
    const std::size_t at = std::size_t{c.pending} * shape_.head_dim;
    rows = {c.residual_keys.data() + at, c.residual_values.data() + at};
    ++c.pending;
  }
  recount(c, before);
  return rows;
}

void SequenceStore::seal(std::uint32_t cache, std::uint64_t tokens) {
  Cache& c = caches_[cache];
  if (format_.quantized() && (residual_ == 0 || c.pending == residual_)) {
    const std::uint64_t before = cache_bytes(c);
    quantize_rows(c, cache);
    recount(c, before);
  }
  if (!share_) return;
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
  const std::size_t d = shape_.head_dim;
  if (format_.quantized()) {
    const std::uint32_t stored = c.count - c.pending;
    for (std::uint32_t i = 0; i < stored; ++i) {
      decode_key(c, i, gather_keys_.data() + i * d);
      decode_value(c, i, gather_values_.data() + i * d);
    }
    std::copy_n(c.residual_keys.data(), std::size_t{c.pending} * d, gather_keys_.data() + stored * d);
    std::copy_n(c.residual_values.data(), std::size_t{c.pending} * d, gather_values_.data() + stored * d);
    return {gather_keys_.data(), gather_values_.data()};
  }
  if (!pool_) return {c.keys.data(), c.values.data()};
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
  const std::uint32_t n = c.count;
  const std::uint64_t bytes_before = cache_bytes(c);
  if (format_.quantized()) {
    // Before any row moves (and before whole blocks go): the evicted int4
    // keys leave their groups, and the residual window keeps its survivors,
    // in order, as the last slots. A quantized store never shares, so the
    // paged check below cannot refuse after this.
    const std::uint32_t d = shape_.head_dim;
    const std::uint32_t stored = n - c.pending;
    if (format_.precision == KvPrecision::kInt4) {
      for (std::uint32_t i = 0; i < stored; ++i) {
        if (c.marked[i] == 0) continue;
        const std::uint32_t g = int4_group_of(bytes_of(key_row(c, i)));
        if (--c.group_rows[g] == 0) {
          c.free_groups[c.free_group_count++] = g;
          --c.live_groups;
        }
      }
    }
    std::uint32_t kept = 0;
    for (std::uint32_t j = 0; j < c.pending; ++j) {
      if (c.marked[stored + j] != 0) continue;
      if (kept != j) {
        std::copy_n(c.residual_keys.data() + std::size_t{j} * d, d, c.residual_keys.data() + std::size_t{kept} * d);
        std::copy_n(c.residual_values.data() + std::size_t{j} * d, d,
                    c.residual_values.data() + std::size_t{kept} * d);
      }
      ++kept;
    }
    c.pending = kept;
  }
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
      std::copy_n(key_row(c, i), key_floats_, key_row(c, out));
      std::copy_n(value_row(c, i), value_floats_, value_row(c, out));
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
  recount(c, bytes_before);
  return n - out;
}

void SequenceStore::clear() noexcept {
  for (Cache& c : caches_) {
    if (pool_) {
      const std::uint32_t bs = pool_->block_size();
      for (std::uint32_t b = 0; std::size_t{b} * bs < c.count; ++b) pool_->release(c.table[b]);
    }
    c.count = 0;
    c.pending = 0;
    c.live_groups = 0;
    c.free_group_count = static_cast<std::uint32_t>(c.free_groups.size());
    // Group 0 is taken first (the stack's top).
    for (std::size_t g = 0; g < c.free_groups.size(); ++g) {
      c.free_groups[g] = static_cast<std::uint32_t>(c.free_groups.size() - 1 - g);
    }
    std::fill(c.group_rows.begin(), c.group_rows.end(), 0U);
  }
  stats_ = StoreStats{};
  if (pool_) {
    stats_.block_size = pool_->block_size();
    stats_.pool_blocks = pool_->blocks();
  }
}

}  // namespace kvevict
