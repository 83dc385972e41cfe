// One sequence through a model (model.h), token by token, with a real KV
// cache per layer and KV head (kv_store.h). When a KV head has a policy, the
// policy sees exactly what the harness would give it -- the softmax weights
// over the positions that cache still holds, ascending (with grouped-query
// attention, the mean of its query heads' weights: one decision per cache, as
// an engine must make it) -- and the positions it names are physically
// removed from that cache's keys and values. Where a kept key sits in rotary
// space is DecoderOptions::positions (rope.h): at its token's position (the
// default) or at its index among the positions held.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kvevict/core/policy.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/kv/kv_store.h"

namespace kvevict {

class LayerBudget;
class SequenceBudget;

// Which logits a prefill computes: every prompt token's (what perplexity
// scores) or the last token's only (what a server needs before it decodes;
// llama.cpp's default). The output head is a fifth of a small model's
// weights (SmolLM2-135M's, Llama-3.2-1B's): kLast reads it once a pass
// instead of once a token.
enum class PromptLogits { kEvery, kLast };
// "all" or "last" (the tool's --prompt-logits); ParameterError naming the
// value otherwise.
PromptLogits parse_prompt_logits(std::string_view name);

struct DecoderOptions {
  // Positions per cache, at most the model's context (0: the context).
  std::uint32_t capacity = 0;
  // 0: the contiguous store, one [capacity, head_dim] buffer per cache.
  // >= 1: a paged store -- one pool of fixed-size blocks of block_size
  // positions per decoder, a free list, and a block table per cache; a block
  // is taken from the free list when a cache's last block is full and given
  // back when eviction empties it.
  std::uint32_t block_size = 0;
  // Paged: blocks in the pool (0: enough for every cache at capacity). A
  // cache that needs a block when none is free throws InputError from step(),
  // which (as any step that fails part-way) leaves the decoder refusing
  // further steps until reset().
  std::uint32_t pool_blocks = 0;
  // A pool shared with other decoders (a batch, docs/serving.md): the caches
  // take their blocks from it; block_size must then be 0 or the pool's and
  // pool_blocks 0. The decoder gives back every reference it holds when it
  // is reset or destroyed.
  std::shared_ptr<BlockPool> pool{};
  // With a paged store: publish each block a cache fills, or reference an
  // equal block another decoder on the pool published (kv_store.h).
  bool share_prefix = false;
  // The precision keys and values are stored at and the residual window
  // (kv_precision.h, docs/paged.md "Fewer bits a position"). fp32, the
  // default, is the store as it always was, to the bit. A shared pool must
  // hold the same precision; prefix sharing needs fp32.
  KvFormat kv{};
  // Where kept keys and the query sit in rotary space (rope.h): their
  // tokens' positions, or their indices among the positions held.
  PositionMode positions = PositionMode::kOriginal;
  // Threads the weight products share (0: every core this process may use).
  // A product's result does not depend on them (matmul.h); kvevict-tiny's
  // products run on the calling thread whatever this says.
  int threads = 0;
  // The most tokens one prefill() call takes through the layers together,
  // its scratch (and a logits row a token) sized at construction (0: 64).
  std::uint32_t prefill_chunk = 0;
};

// One sequence through the model. All buffers are sized at construction for
// `capacity` positions (at most the model's context), so step() never
// allocates; a policy's own buffers are its own.
//
// On a paged store, attention reads each cache's held rows through its block
// table into one scratch buffer per decoder and runs the same arithmetic as
// the contiguous store, so the logits (and every policy's decisions) are
// identical to the bit for the same held positions. After an eviction, blocks
// whose positions all went are returned to the free list without moving a
// row (whole-block eviction: a BlockEvictor per cache, as make_run_policy
// builds, moves none); the survivors of partly-emptied blocks are compacted
// in order and trailing empty blocks returned.
// Where a decoder's steps spend their time (Decoder::set_profile): seconds,
// summed over the steps since the profile was given.
struct DecodeProfile {
  double projections = 0.0;  // matrix-vector products (qkv, output, MLP up and down, logits) and the norms
  double activation = 0.0;   // the MLP's GELU (an erf a hidden unit)
  double attention = 0.0;    // RoPE, storing the key and value, scores, softmax, the values' weighted sum
  double policies = 0.0;     // the policies' steps and evictions, and the store's removal of the victims
  double total = 0.0;        // whole steps (the rest is residual adds, copies and bookkeeping)
  std::uint64_t tokens = 0;
};

class Decoder {
 public:
  explicit Decoder(std::shared_ptr<const Model> model, std::uint32_t capacity = 0);
  // Throws InputError for a capacity over the context, ParameterError for a
  // pool too small to hold one block per cache.
  Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Gives cache `h` (= layer * kv_heads + kv_head) a policy and the budget it is
  // held to; null removes it. Only before the first step.
  void set_policy(std::uint32_t h, Policy* policy, std::int64_t budget);

  // Gives layer `layer`'s KV heads one budget shared by them: each step every
  // KV head's weights go to `budget`->on_decode_step(kv_head, ...), and once
  // the layer holds more than `layer_budget` positions, budget->evict()'s
  // victims leave each cache. The LayerBudget must have config().kv_heads
  // heads (ParameterError) and the layer's caches no policy of their own
  // (ContractError); null removes it. Only before the first step.
  void set_layer_budget(std::uint32_t layer, LayerBudget* budget, std::int64_t layer_budget);

  // Gives every cache of the sequence one budget (docs/paged.md,
  // "Granularity"): each step every cache's signals go to
  // budget->on_step(cache, ...), and once the whole token has passed every
  // layer, if the caches hold more than budget->budget() positions,
  // budget->evict()'s one victim set leaves every cache -- so all of them
  // always hold the same positions, as an engine's cells do. The
  // SequenceBudget must have one cache per (layer, KV head) (ParameterError)
  // and no cache a policy or layer budget of its own (ContractError); null
  // removes it. Only before the first step. prefill() then takes its tokens
  // through the layers one at a time (the eviction after a token comes
  // before the next token's first layer).
  void set_sequence_budget(SequenceBudget* budget);

  // Feeds the next token (position = tokens fed so far) and returns the
  // logits for the token after it; valid until the next call. Runs without
  // end while every cache's policy holds it within the capacity (position
  // is the token's index in the sequence, past the capacity and the trained
  // context too; DecoderOptions::positions says which angles its key gets).
  // Throws InputError when a cache without a policy (the full cache) is
  // full or for a token outside the vocabulary (changing nothing), ContractError when a
  // policy breaks the contract (a victim not held, or the budget not met),
  // and whatever a policy throws. A step that throws after it has begun
  // leaves the heads out of step (those before the failure have admitted the
  // token, and their policies cannot be rolled back), so every later step
  // throws ContractError, naming the failed one, until reset().
  std::span<const float> step(Token token);

  // Feeds tokens.size() tokens (at most DecoderOptions::prefill_chunk) as
  // one pass through the layers: each layer's products take every token at
  // once (matrix-matrix), then attention and the policies run token by token
  // in order, as step() would, and their keys and values join the caches.
  // Returns the logits after each token, [tokens x vocab]; valid until the
  // next call. The same as step() on each token in turn, to the bit (the
  // caches, the policies' calls and the logits; tested), so perplexity can
  // score every row. Throws as step() does; InputError, changing nothing,
  // for more tokens than the chunk or when a cache without a policy would
  // pass the capacity within them. With PromptLogits::kLast only the last
  // token's row is computed and returned ([vocab], the same to the bit);
  // everything else is as with kEvery.
  std::span<const float> prefill(std::span<const Token> tokens, PromptLogits logits = PromptLogits::kEvery);

  // Steps decoders[i] on tokens[i] for every i as one pass through the
  // layers: each weight is read once for them all (many runs over the same
  // text, or sequences in a batch). Each decoder's logits are then its own
  // last_logits(), valid until that decoder steps again (each holds its
  // own). The decoders must share one model and be distinct; each
  // is checked as step() checks it before any moves (InputError or
  // ContractError naming the decoder's index). The same as step() on each in
  // turn, to the bit. Threads: the first decoder's.
  static void step_together(std::span<Decoder* const> decoders, std::span<const Token> tokens);
  // Feeds the same tokens (at most decoders[0]'s prefill_chunk) to every
  // decoder as one pass through the layers: each weight is read once for
  // decoders x tokens vectors (many runs over one text: perplexity's windows,
  // a task's prompt). Attention and each decoder's policies run token by
  // token, decoder by decoder, as step() would. Returns every decoder's
  // logits after each token, decoder-major [decoders x tokens x vocab],
  // valid until decoders[0] leads another pass; each decoder's
  // last_logits() are its own, as after step_together(). The same as step()
  // on each decoder and token in turn, to the bit. A decoder with a
  // sequence budget takes the tokens one pass a token (its eviction comes
  // after each token's last layer). Checks and threads as step_together();
  // InputError, changing nothing, for more tokens than the chunk. With
  // PromptLogits::kLast only each decoder's row after the last token is
  // computed and returned, [decoders x vocab] (the same to the bit; a task's
  // prompt, whose answer reads the last row only).
  static std::span<const float> prefill_together(std::span<Decoder* const> decoders, std::span<const Token> tokens,
                                                 PromptLogits logits = PromptLogits::kEvery);
  // Tokens a prefill_together pass of `decoders` decoders best takes: about
  // 64 vectors a weight read (1 at 64 decoders or more). Measured on a
  // SmolLM2-135M-shaped Q8_0, four policies and the full cache over 256
  // positions on one core: 1.32x the run-tokens/s of a token a pass
  // (step_together); 128 vectors gained nothing more and hold twice the
  // logits. At most the default prefill_chunk.
  static std::uint32_t together_pass_tokens(std::size_t decoders) noexcept {
    return decoders >= 64 ? 1U : static_cast<std::uint32_t>(64 / std::max<std::size_t>(decoders, 1));
  }
  // The logits after the last token fed (by step, prefill, step_together or
  // prefill_together).
  std::span<const float> last_logits() const noexcept;

  // Removes `positions` (each held, no repeats, any order) from cache `h`'s
  // keys and values at once: compression after a prefill. Only for a cache
  // without a policy (a policy's state would no longer match what is held);
  // throws ContractError naming the first bad position, changing nothing.
  void drop(std::uint32_t h, std::span<const Position> positions);

  // Back to an empty cache, usable again after a failed step (policies are
  // not reset: give new ones).
  void reset();

  // Times every later step's parts into `profile` (null: no timing, the
  // default; the clock is read about ten times a layer when given).
  void set_profile(DecodeProfile* profile) noexcept { profile_ = profile; }

  std::uint32_t position() const noexcept { return fed_; }  // tokens fed so far
  const ModelConfig& config() const noexcept;

  // Positions cache `h` holds now, ascending (after this step's eviction).
  std::span<const Position> held(std::uint32_t h) const noexcept;
  // The positions cache `h` was attended over on the last step (ascending,
  // the newest token last) and the softmax weights given to them (the mean
  // over the cache's query heads).
  std::span<const Position> attended(std::uint32_t h) const noexcept;
  std::span<const float> attention(std::uint32_t h) const noexcept;
  // The last step's queries of cache `h`'s query heads, before RoPE and
  // scaling, head-major [group x head_dim]: what the policies were given.
  std::span<const float> queries(std::uint32_t h) const noexcept;
  // Cache `h`'s held keys (as stored, after RoPE; a quantized store's read
  // back from their codes) and values, [held, head_dim] each, in the order
  // of held(h); valid until the next step or drop.
  std::pair<const float*, const float*> held_rows(std::uint32_t h);
  // Positions removed from all heads so far.
  std::uint64_t evicted() const noexcept { return evicted_; }
  // The store: blocks and positions in use now and at the peak.
  StoreStats store() const noexcept;
  // The store itself: block tables, positions, the pool.
  const SequenceStore& kv() const noexcept;

 private:
  struct Impl;
  struct Lanes;
  // The checks step() makes, for `count` tokens from now; throws naming the
  // decoder by `who` (empty: none).
  void check_ready(std::span<const Token> tokens, const std::string& who) const;
  // One pass through the layers for the lanes; marks every lane's decoder
  // failed when it throws.
  static void forward(Lanes& lanes);
  // step_together's and prefill_together's checks: one model, distinct
  // decoders, each ready for `tokens` (its own one, or all of them).
  static void check_together(const char* who, std::span<Decoder* const> decoders, std::span<const Token> tokens,
                             bool same_tokens);

  std::unique_ptr<Impl> impl_;
  std::uint32_t fed_ = 0;
  std::uint64_t evicted_ = 0;
  DecodeProfile* profile_ = nullptr;
};

}  // namespace kvevict
