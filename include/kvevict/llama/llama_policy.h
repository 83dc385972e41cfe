// A kvevict policy keeping llama.cpp's KV cache (docs/llama-cpp.md): every
// sequence of a llama_context held at `budget` positions by one
// SequenceBudget (core/sequence_budget.h) -- the granularity of llama.cpp's
// cells, which drop a position from every layer and KV head at once.
//
// What the policy sees comes from llama.cpp's own graph, through the
// context's eval callback (observe(), installed as cb_eval):
//   * kq_soft_max-<layer>: the attention weights after the softmax,
//     [n_kv cells, n_tokens, n_head] (only with flash attention off); each KV
//     head gets the mean of its query heads, as in kvevict's decoder;
//   * Kcur-<layer> and Vcur-<layer>: the new tokens' keys (after RoPE, as the
//     cache stores them) and values, for the key-aware policies;
//   * the SET_ROWS node that writes Kcur into the layer's K cache: its row
//     indices say which cell each token of the batch went to. Cells are
//     mapped to positions from that alone -- llama.cpp's slot search is not
//     copied, so a different search in another release still maps right.
// After each llama_decode, after_decode() steps every cache's policy
// instance with that step's weights over the positions held before the
// token, and removes the victims from every layer with
// llama_memory_seq_rm(seq, p, p + 1).
//
// A policy that needs the queries before RoPE (expected-attention) is
// refused: the graph names the projected and the rotated queries alike.
//
// The header does not include llama.h: an engine includes it beside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"
#include "kvevict/core/sequence_budget.h"

struct ggml_tensor;
struct llama_context;
struct llama_memory_i;
struct llama_model;

namespace kvevict {

// The model's attention shape, as llama.cpp reports it.
struct LlamaShape {
  std::uint32_t layers = 0;
  std::uint32_t heads = 0;     // query heads a layer
  std::uint32_t kv_heads = 0;  // KV heads a layer
  std::uint32_t head_dim = 0;
};
LlamaShape llama_shape(const llama_model* model);

// Refuses (InputError) a llama.cpp library of another release than the
// headers this was compiled against: llama.cpp has no stable ABI, and a
// struct laid out by one release and read by another gives wrong results,
// not an error. The headers' versions are the ones llama.cpp's and ggml's
// CMakeLists.txt set (cmake/LlamaCpp.cmake); the library's are
// llama_version() and ggml_version(). LlamaPolicy's constructor checks it;
// a program may call it first thing. The second form is the rule on given
// versions: ggml's equal, llama's equal but for a "-suffix" (0.4.0-dev).
void check_llama_cpp_release();
void check_llama_cpp_release(std::string_view library_llama, std::string_view library_ggml);

struct LlamaPolicyOptions {
  std::string policy{};       // a registered policy name
  ParamMap params{};          // its parameters (budget is `budget`)
  std::int64_t budget = 256;  // positions each sequence holds after each step
  std::uint32_t sequences = 1;  // seq ids 0 ... sequences - 1
  std::uint32_t context = 0;  // the context's n_ctx: cells the cache has (sizes the buffers)
  std::uint32_t batch = 1;    // the most tokens one llama_decode takes (n_batch)
  // Where the kept keys sit in rotary space. false: at their tokens'
  // positions (llama.cpp's own; a sequence's positions then have gaps where
  // victims were). true: at their index among the positions held, as
  // StreamingLLM places them -- after each eviction the survivors after a
  // victim are shifted down with llama_memory_seq_add (llama.cpp re-rotates
  // their keys before the next decode: its K-shift), and a sequence's next
  // token goes at the count it holds (next_position()).
  bool cache_positions = false;
};

class LlamaPolicy {
 public:
  // Throws ParameterError for an unknown policy or parameter, a policy that
  // needs the queries, a budget the SequenceBudget refuses, or a budget of
  // the context or more (a cache holds the budget and the new token).
  LlamaPolicy(const LlamaShape& shape, const LlamaPolicyOptions& options);
  ~LlamaPolicy();
  LlamaPolicy(const LlamaPolicy&) = delete;
  LlamaPolicy& operator=(const LlamaPolicy&) = delete;

  // The eval callback (ggml_backend_sched_eval_callback): give it to the
  // context as cb_eval, with cb_eval_user_data = this policy. `ask` true:
  // whether the scheduler should hand over the tensor once computed.
  static bool observe(ggml_tensor* t, bool ask, void* user);

  // After llama_decode(ctx, batch) of one token for each of `seqs` (batch
  // order; at most one token a sequence, at its next_position(), given in
  // `positions`):
  // steps every cache of each token's sequence with what the graph showed,
  // then evicts each sequence over its budget with llama_memory_seq_rm
  // (victims() says what went). Throws ContractError when the graph did not
  // show a layer's weights (flash attention on, or the callback not
  // installed), a sequence twice in one batch or out of order, or a cell the
  // mapping does not know.
  void after_decode(llama_context* ctx, std::span<const std::int32_t> seqs, std::span<const std::int32_t> positions);

  // Where sequence `seq`'s next token goes in llama.cpp: the count of tokens
  // it has read, or with cache_positions the count it holds.
  std::int32_t next_position(std::uint32_t seq) const;
  // The positions the last after_decode evicted from sequence `seq`, ascending
  // (the positions of the stream: with cache_positions too, the token's index
  // in what the sequence has read, not where llama.cpp held it).
  std::span<const Position> victims(std::uint32_t seq) const;
  // The positions sequence `seq` holds now, ascending.
  std::span<const Position> held(std::uint32_t seq) const;
  // Forgets sequence `seq` (after llama_memory_seq_rm of all of it): its
  // policies start again at position 0.
  void reset(std::uint32_t seq);

  const LlamaShape& shape() const noexcept { return shape_; }
  std::int64_t budget() const noexcept { return options_.budget; }
  // Seconds in observe() copying tensors and in after_decode() (the policy).
  double copy_seconds() const noexcept { return copy_seconds_; }
  double policy_seconds() const noexcept { return policy_seconds_; }

 private:
  struct Sequence;
  void take(ggml_tensor* t);
  // Sequence `seq`, or ContractError naming the sequences kept.
  Sequence& sequence_at(std::uint32_t seq) const;
  void step_sequence(std::uint32_t seq, std::uint32_t row, std::int32_t llama_position);
  static void remove_and_shift(llama_memory_i* memory, std::int32_t seq, std::span<const std::int32_t> slots,
                               std::size_t count);

  LlamaShape shape_;
  LlamaPolicyOptions options_;
  Signals signals_ = 0;
  std::vector<std::unique_ptr<Sequence>> sequences_;
  // What the last decode's graph showed, per layer: the weights
  // [n_kv, n_tokens, n_head], keys and values [head_dim, kv_heads, n_tokens].
  std::vector<std::vector<float>> weights_, keys_, values_;
  std::vector<std::uint32_t> n_kv_;      // per layer, the cells the weights cover
  std::vector<std::uint8_t> seen_;       // per layer, whether this decode showed its weights
  std::vector<std::int64_t> cells_;      // per batch token, the cell its key went to
  std::vector<std::int32_t> cells_i32_;  // the same as read, in a release that writes I32 indices
  std::uint32_t tokens_ = 0;             // tokens of the last decode
  struct CellHolder {
    std::int32_t seq = -1, pos = -1;  // -1: none of ours
  };
  std::vector<CellHolder> cell_holder_;  // per cell: the sequence and position it holds
  std::vector<float> attention_;         // one cache's weights over its held positions
  std::vector<float> key_, value_;
  double copy_seconds_ = 0.0;
  double policy_seconds_ = 0.0;
};

// The eval callback of a context made before its policy (the policy is
// sized by llama_n_ctx, known once the context exists): give the context
// LlamaPolicySlot::observe as cb_eval and the slot as cb_eval_user_data,
// then point the slot at the policy. An empty slot asks for no tensor.
struct LlamaPolicySlot {
  LlamaPolicy* policy = nullptr;
  static bool observe(ggml_tensor* t, bool ask, void* user);
};

}  // namespace kvevict
