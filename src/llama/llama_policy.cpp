#include "kvevict/llama/llama_policy.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "llama.h"

namespace kvevict {

namespace {

// "<name>-<layer>" -> layer, or -1 when `full` is not that name.
int layer_of(std::string_view full, std::string_view name) {
  if (full.size() <= name.size() + 1 || full.substr(0, name.size()) != name || full[name.size()] != '-') return -1;
  int layer = 0;
  for (const char c : full.substr(name.size() + 1)) {
    if (c < '0' || c > '9') return -1;
    layer = layer * 10 + (c - '0');
    if (layer > 1 << 20) return -1;
  }
  return layer;
}

// The SET_ROWS node that writes a batch's keys into layer 0's K cache
// ("cache_k_l0", or a reshape of it): its row indices are the cells.
bool writes_first_k_cache(const ggml_tensor* t) {
  if (t->op != GGML_OP_SET_ROWS || t->src[1] == nullptr || t->src[2] == nullptr) return false;
  const std::string_view dest = t->src[2]->name;
  return dest == "cache_k_l0" || dest.starts_with("cache_k_l0 ");
}

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

struct LlamaPolicy::Sequence {
  Sequence(const std::string& policy, const ParamMap& params, std::int64_t caches, std::int64_t positions)
      : budget(policy, params, SequenceBudgetParams{.caches = caches, .budget = positions, .keep_newest = true}) {
    held.reserve(static_cast<std::size_t>(positions) + 1);
    cells.reserve(held.capacity());
    victims.reserve(held.capacity());
    victim_slots.reserve(held.capacity());
  }
  SequenceBudget budget;
  std::vector<Position> held;        // ascending
  std::vector<std::int64_t> cells;   // the cell of each held position
  std::vector<Position> victims;     // the last step's
  std::vector<llama_pos> victim_slots;  // with cache positions: where llama.cpp held each victim
  std::int64_t next = 0;             // the stream position of the next token
};

void check_llama_cpp_release(std::string_view library_llama, std::string_view library_ggml) {
  const std::string_view headers_llama = KVEVICT_LLAMA_CPP_HEADERS_LLAMA, headers_ggml = KVEVICT_LLAMA_CPP_HEADERS_GGML;
  const bool llama_same = library_llama.substr(0, headers_llama.size()) == headers_llama &&
                          (library_llama.size() == headers_llama.size() || library_llama[headers_llama.size()] == '-');
  if (!llama_same || library_ggml != headers_ggml) {
    throw InputError(fmt::format("llama.cpp's library is llama {} with ggml {}, but this program was built against "
                                 "the headers of llama {} with ggml {}: they must be one release (reinstall "
                                 "deps/llama-cpp from its lock file and rebuild)",
                                 library_llama, library_ggml, headers_llama, headers_ggml));
  }
}

void check_llama_cpp_release() { check_llama_cpp_release(llama_version(), ggml_version()); }

LlamaShape llama_shape(const llama_model* model) {
  LlamaShape s;
  s.layers = static_cast<std::uint32_t>(llama_model_n_layer(model));
  s.heads = static_cast<std::uint32_t>(llama_model_n_head(model));
  s.kv_heads = static_cast<std::uint32_t>(llama_model_n_head_kv(model));
  s.head_dim = s.heads == 0 ? 0 : static_cast<std::uint32_t>(llama_model_n_embd(model)) / s.heads;
  return s;
}

LlamaPolicy::LlamaPolicy(const LlamaShape& shape, const LlamaPolicyOptions& options)
    : shape_(shape), options_(options) {
  check_llama_cpp_release();
  if (shape.layers == 0 || shape.heads == 0 || shape.kv_heads == 0 || shape.heads % shape.kv_heads != 0 ||
      shape.head_dim == 0) {
    throw ParameterError(fmt::format("llama: a model of {} layers, {} heads over {} KV heads of {} is not one a "
                                     "policy can keep",
                                     shape.layers, shape.heads, shape.kv_heads, shape.head_dim));
  }
  const PolicyInfo& info = find_policy(options.policy);
  signals_ = info.signals;
  if ((signals_ & kSignalQueries) != 0) {
    throw ParameterError(fmt::format("llama: {} needs the queries before RoPE, which llama.cpp's graph names alike "
                                     "before and after (Qcur); use a policy that reads attention or keys",
                                     info.name));
  }
  if (info.has_param("layer") && info.has_param("numLayers")) {
    throw ParameterError(fmt::format("llama: {}'s budget differs by layer, and llama.cpp's cells hold the same "
                                     "positions in every layer",
                                     info.name));
  }
  if (options.sequences < 1 || options.sequences > 256) {
    throw ParameterError(fmt::format("llama: sequences ({}) must be 1 ... 256", options.sequences));
  }
  if (options.context < 2 || options.budget < 1 || options.budget + 1 > std::int64_t{options.context}) {
    throw ParameterError(fmt::format("{}: budget ({}) must be 1 ... {}: a cache holds the budget and the new token, "
                                     "within the context of {} cells",
                                     info.name, options.budget, std::int64_t{options.context} - 1, options.context));
  }
  if (options.batch < 1 || options.batch > options.context) {
    throw ParameterError(fmt::format("llama: batch ({}) must be 1 ... the context ({})", options.batch,
                                     options.context));
  }
  ParamMap params = options.params;
  std::erase_if(params, [](const auto& kv) { return kv.first == "budget"; });
  if (info.has_param("headDim")) set_param(params, "headDim", shape.head_dim);
  if (info.has_param("groups")) set_param(params, "groups", shape.heads / shape.kv_heads);
  options_.params = params;  // as every sequence's instances take them (reset() too)
  const std::int64_t caches = std::int64_t{shape.layers} * shape.kv_heads;
  for (std::uint32_t s = 0; s < options.sequences; ++s) {
    sequences_.push_back(std::make_unique<Sequence>(std::string(info.name), params, caches, options.budget));
  }
  const std::size_t cells = options.context;
  weights_.assign(shape.layers, std::vector<float>(cells * options.batch * shape.heads, 0.0F));
  if ((signals_ & kSignalKey) != 0) {
    keys_.assign(shape.layers, std::vector<float>(std::size_t{shape.head_dim} * shape.kv_heads * options.batch));
  }
  if ((signals_ & kSignalValue) != 0) {
    values_.assign(shape.layers, std::vector<float>(std::size_t{shape.head_dim} * shape.kv_heads * options.batch));
  }
  n_kv_.assign(shape.layers, 0);
  seen_.assign(shape.layers, 0);
  cells_.assign(options.batch, -1);
  cells_i32_.assign(options.batch, -1);
  cell_holder_.assign(cells, CellHolder{});
  attention_.assign(static_cast<std::size_t>(options.budget) + 1, 0.0F);
  key_.assign(shape.head_dim, 0.0F);
  value_.assign(shape.head_dim, 0.0F);
}

LlamaPolicy::~LlamaPolicy() = default;

bool LlamaPolicy::observe(ggml_tensor* t, bool ask, void* user) {
  auto* self = static_cast<LlamaPolicy*>(user);
  const std::string_view name = t->name;
  const bool wanted = layer_of(name, "kq_soft_max") >= 0 || writes_first_k_cache(t) ||
                      (!self->keys_.empty() && layer_of(name, "Kcur") >= 0) ||
                      (!self->values_.empty() && layer_of(name, "Vcur") >= 0);
  if (ask) return wanted;
  if (wanted) self->take(t);
  return true;  // go on computing
}

bool LlamaPolicySlot::observe(ggml_tensor* t, bool ask, void* user) {
  auto* slot = static_cast<LlamaPolicySlot*>(user);
  return slot->policy == nullptr ? false : LlamaPolicy::observe(t, ask, slot->policy);
}

// Copies what a computed tensor shows into this decode's buffers; a tensor
// larger than they were sized for (a batch or context above the options')
// is left out, and after_decode then refuses the step naming it.
void LlamaPolicy::take(ggml_tensor* t) {
  const auto start = std::chrono::steady_clock::now();
  const std::string_view name = t->name;
  if (writes_first_k_cache(t)) {
    const ggml_tensor* idx = t->src[1];
    const auto n = static_cast<std::size_t>(idx->ne[0]);
    tokens_ = static_cast<std::uint32_t>(std::min<std::size_t>(n, cells_.size() + 1));
    if (n <= cells_.size()) {
      if (idx->type == GGML_TYPE_I64) {
        ggml_backend_tensor_get(idx, cells_.data(), 0, n * sizeof(std::int64_t));
      } else {
        ggml_backend_tensor_get(idx, cells_i32_.data(), 0, n * sizeof(std::int32_t));
        std::copy_n(cells_i32_.begin(), n, cells_.begin());
      }
    }
  } else if (const int l = layer_of(name, "kq_soft_max"); l >= 0 && static_cast<std::uint32_t>(l) < shape_.layers) {
    const auto bytes = ggml_nbytes(t);
    if (t->type == GGML_TYPE_F32 && ggml_is_contiguous(t) && bytes <= weights_[l].size() * sizeof(float) &&
        t->ne[2] == shape_.heads) {
      ggml_backend_tensor_get(t, weights_[l].data(), 0, bytes);
      n_kv_[l] = static_cast<std::uint32_t>(t->ne[0]);
      seen_[l] = 1;
    }
  } else {
    const bool key = layer_of(name, "Kcur") >= 0;
    const int layer = key ? layer_of(name, "Kcur") : layer_of(name, "Vcur");
    std::vector<std::vector<float>>& into = key ? keys_ : values_;
    if (layer >= 0 && static_cast<std::uint32_t>(layer) < shape_.layers && t->type == GGML_TYPE_F32 &&
        ggml_is_contiguous(t) && ggml_nbytes(t) <= into[layer].size() * sizeof(float)) {
      ggml_backend_tensor_get(t, into[layer].data(), 0, ggml_nbytes(t));
    }
  }
  copy_seconds_ += since(start);
}

// With cache positions: removes the cells at cache positions `slots`
// (ascending) of a sequence that held `count`, and shifts each run of
// survivors down by the victims before it, so the survivors sit at
// 0 ... count - |slots| - 1 again. Runs are shifted lowest first: a run
// moved down never lands in the range of a run still to move.
void LlamaPolicy::remove_and_shift(llama_memory_t memory, std::int32_t seq, std::span<const llama_pos> slots,
                                   std::size_t count) {
  for (const llama_pos p : slots) {
    if (!llama_memory_seq_rm(memory, seq, p, p + 1)) {
      throw ContractError(fmt::format("llama: llama_memory_seq_rm refused cache position {} of sequence {}", p, seq));
    }
  }
  for (std::size_t j = 0; j < slots.size(); ++j) {
    const llama_pos from = slots[j] + 1;
    const auto to = j + 1 < slots.size() ? slots[j + 1] : static_cast<llama_pos>(count);
    if (from < to) llama_memory_seq_add(memory, seq, from, to, -static_cast<llama_pos>(j + 1));
  }
}

void LlamaPolicy::after_decode(llama_context* ctx, std::span<const std::int32_t> seqs,
                               std::span<const std::int32_t> positions) {
  const auto start = std::chrono::steady_clock::now();
  if (seqs.size() != positions.size()) {
    throw ContractError(fmt::format("llama: {} sequence ids for {} positions", seqs.size(), positions.size()));
  }
  if (seqs.size() != tokens_) {
    throw ContractError(fmt::format("llama: the decode wrote {} tokens to the cache; after_decode was given {} (is "
                                    "the eval callback installed, and one token a sequence?)",
                                    tokens_, seqs.size()));
  }
  for (std::uint32_t l = 0; l < shape_.layers; ++l) {
    if (seen_[l] == 0) {
      throw ContractError(fmt::format("llama: llama.cpp's graph showed no attention weights for layer {} "
                                      "(kq_soft_max-{}): flash attention must be off and the eval callback installed",
                                      l, l));
    }
  }
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i] < 0 || static_cast<std::uint32_t>(seqs[i]) >= sequences_.size()) {
      throw ContractError(fmt::format("llama: sequence {} is not one of the {} this policy keeps", seqs[i],
                                      sequences_.size()));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (seqs[j] == seqs[i]) throw ContractError(fmt::format("llama: sequence {} has two tokens in one decode", seqs[i]));
    }
  }
  llama_memory_t memory = llama_get_memory(ctx);
  if (options_.cache_positions && !llama_memory_can_shift(memory)) {
    throw ContractError("llama: this context's memory cannot shift positions (llama_memory_can_shift is false), "
                        "which cache positions need");
  }
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const auto seq = static_cast<std::uint32_t>(seqs[i]);
    step_sequence(seq, static_cast<std::uint32_t>(i), positions[i]);
    const Sequence& s = *sequences_[seq];
    if (options_.cache_positions) {
      remove_and_shift(memory, seqs[i], s.victim_slots, s.held.size() + s.victim_slots.size());
      continue;
    }
    for (const Position v : s.victims) {
      if (!llama_memory_seq_rm(memory, seqs[i], static_cast<llama_pos>(v), static_cast<llama_pos>(v) + 1)) {
        throw ContractError(fmt::format("llama: llama_memory_seq_rm refused position {} of sequence {}", v, seq));
      }
    }
  }
  std::fill(seen_.begin(), seen_.end(), 0);
  tokens_ = 0;
  policy_seconds_ += since(start);
}

std::int32_t LlamaPolicy::next_position(std::uint32_t seq) const {
  const Sequence& s = sequence_at(seq);
  return static_cast<std::int32_t>(options_.cache_positions ? static_cast<std::int64_t>(s.held.size()) : s.next);
}

void LlamaPolicy::step_sequence(std::uint32_t seq, std::uint32_t row, std::int32_t llama_position) {
  Sequence& s = *sequences_[seq];
  if (llama_position != next_position(seq)) {
    throw ContractError(fmt::format("llama: sequence {}'s token is at position {}; the next is {}", seq,
                                    llama_position, next_position(seq)));
  }
  // The policy sees stream positions; with cache positions llama.cpp holds
  // the token at its index instead.
  const auto pos = static_cast<std::int32_t>(s.next);
  const std::int64_t cell = cells_[row];
  if (cell < 0 || static_cast<std::size_t>(cell) >= cell_holder_.size()) {
    throw ContractError(fmt::format("llama: the token of sequence {} went to cell {}, outside the {} cells", seq, cell,
                                    cell_holder_.size()));
  }
  if (const CellHolder holder = cell_holder_[static_cast<std::size_t>(cell)]; holder.pos >= 0) {
    throw ContractError(fmt::format("llama: the token at position {} of sequence {} went to cell {}, which holds "
                                    "position {} of sequence {}: the cell map no longer matches llama.cpp's cache",
                                    pos, seq, cell, holder.pos, holder.seq));
  }
  const std::size_t held = s.held.size();
  const std::uint32_t group = shape_.heads / shape_.kv_heads;
  for (std::uint32_t l = 0; l < shape_.layers; ++l) {
    const std::size_t n_kv = n_kv_[l];
    const std::size_t plane = n_kv * tokens_;  // one head's [n_kv, n_tokens]
    for (std::uint32_t g = 0; g < shape_.kv_heads; ++g) {
      // The cache's weights over the positions it held before this token,
      // ascending: each the mean of the group's query heads at its cell.
      for (std::size_t k = 0; k < held; ++k) {
        const auto c = static_cast<std::size_t>(s.cells[k]);
        if (c >= n_kv) {
          throw ContractError(fmt::format("llama: position {} of sequence {} sits in cell {}, past the {} cells layer "
                                          "{}'s weights cover",
                                          s.held[k], seq, c, n_kv, l));
        }
        float sum = 0.0F;
        for (std::uint32_t q = 0; q < group; ++q) sum += weights_[l][c + row * n_kv + (g * group + q) * plane];
        attention_[k] = sum / static_cast<float>(group);
      }
      StepInputs in{.attention = std::span<const float>(attention_.data(), held)};
      const std::size_t d = shape_.head_dim;
      if (!keys_.empty()) {
        std::copy_n(keys_[l].data() + (std::size_t{row} * shape_.kv_heads + g) * d, d, key_.data());
        in.key = key_;
      }
      if (!values_.empty()) {
        std::copy_n(values_[l].data() + (std::size_t{row} * shape_.kv_heads + g) * d, d, value_.data());
        in.value = value_;
      }
      const std::size_t cache = std::size_t{l} * shape_.kv_heads + g;
      if (held == 0) {
        s.budget.on_origin(cache, in);
      } else {
        s.budget.on_step(cache, pos, in);
      }
    }
  }
  s.held.push_back(pos);
  s.cells.push_back(cell);
  cell_holder_[static_cast<std::size_t>(cell)] = {static_cast<std::int32_t>(seq), pos};
  ++s.next;
  s.victims.clear();
  s.victim_slots.clear();
  if (held == 0 || static_cast<std::int64_t>(s.held.size()) <= options_.budget) return;
  for (const Position v : s.budget.evict(options_.budget)) s.victims.push_back(v);
  // Keep the survivors (and their cells) in order; free the victims' cells.
  std::size_t out = 0;
  for (std::size_t k = 0; k < s.held.size(); ++k) {
    if (std::binary_search(s.victims.begin(), s.victims.end(), s.held[k])) {
      cell_holder_[static_cast<std::size_t>(s.cells[k])] = CellHolder{};
      s.victim_slots.push_back(static_cast<llama_pos>(k));  // held in order: its index is its cache position
      continue;
    }
    s.held[out] = s.held[k];
    s.cells[out] = s.cells[k];
    ++out;
  }
  s.held.resize(out);
  s.cells.resize(out);
}

LlamaPolicy::Sequence& LlamaPolicy::sequence_at(std::uint32_t seq) const {
  if (seq >= sequences_.size()) {
    throw ContractError(fmt::format("llama: sequence {} is not one of the {} this policy keeps", seq, sequences_.size()));
  }
  return *sequences_[seq];
}

std::span<const Position> LlamaPolicy::victims(std::uint32_t seq) const { return sequence_at(seq).victims; }

std::span<const Position> LlamaPolicy::held(std::uint32_t seq) const { return sequence_at(seq).held; }

void LlamaPolicy::reset(std::uint32_t seq) {
  Sequence& s = sequence_at(seq);
  for (const std::int64_t c : s.cells) {
    cell_holder_[static_cast<std::size_t>(c)] = CellHolder{};
  }
  const auto caches = static_cast<std::int64_t>(s.budget.caches());
  sequences_[seq] =
      std::make_unique<Sequence>(std::string(find_policy(options_.policy).name), options_.params, caches, options_.budget);
}

}  // namespace kvevict
