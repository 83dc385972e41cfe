// Many sequences on one block pool (docs/serving.md): the store on its own
// (reference counts, publishing, copy on write, equal bytes before sharing),
// a batch whose every sequence matches its solo run to the bit for every
// policy in token and block modes with sharing on and off, reference counts
// against a count the test keeps, a pool that is whole once everyone left,
// chunked prefill's bound, and each bad request refused while the others go on.
//
// Expectations come from the model's configuration, the budgets and the solo
// decoders, never from a number the code under test printed.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/paged.h"
#include "kvevict/model/serving/batch.h"
#include "kvevict/model/eviction/compress.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/kv/kv_store.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/serving/serve_bench.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::committed_model;
using testing::expect_error;

const std::vector<std::uint8_t>& heldout() {
  static const std::vector<std::uint8_t> text = read_text(testing::model_dir() / "heldout-sample.txt");
  return text;
}

// Every block reference of every sequence, counted by the test, against the
// pool's own counts; and the free list holds exactly the rest.
void expect_refcounts(const Batch& batch) {
  std::map<std::uint32_t, std::uint32_t> counted;
  for (const SequenceId id : batch.sequences()) {
    const SequenceStore& kv = batch.decoder(id).kv();
    for (std::uint32_t h = 0; h < kv.caches(); ++h) {
      const std::span<const std::uint32_t> blocks = kv.blocks(h);
      ASSERT_EQ(blocks.size(), (kv.count(h) + batch.pool().block_size() - 1) / batch.pool().block_size());
      for (const std::uint32_t b : blocks) ++counted[b];
    }
  }
  std::uint64_t references = 0;
  for (std::uint32_t b = 0; b < batch.pool().blocks(); ++b) {
    const auto it = counted.find(b);
    const std::uint32_t want = it == counted.end() ? 0 : it->second;
    ASSERT_EQ(batch.pool().refcount(b), want) << "block " << b;
    references += want;
  }
  EXPECT_EQ(batch.pool().free_blocks(), batch.pool().blocks() - counted.size());
  EXPECT_EQ(batch.pool().stats().in_use, counted.size());
  EXPECT_EQ(batch.pool().stats().references, references);
}

// ---- the store on its own -----------------------------------------------------------

// Rows whose bytes are a function of (seed, position): equal seeds make equal blocks.
void fill(SequenceStore& s, std::uint32_t cache, Position pos, float seed, std::uint64_t tokens) {
  const auto [k, v] = s.append(cache, pos);
  for (std::uint32_t i = 0; i < s.shape().head_dim; ++i) {
    k[i] = seed + static_cast<float>(pos) + 0.25F * static_cast<float>(i);
    v[i] = -k[i];
  }
  s.seal(cache, tokens);
}

TEST(KvStore, EqualFullBlocksAreHeldOnceAndCopiedBeforeAChange) {
  const StoreShape shape{1, 1, 4, 12};
  auto pool = std::make_shared<BlockPool>(4, 4, 8);
  SequenceStore a(shape, pool, true);
  SequenceStore b(shape, pool, true);
  for (Position p = 0; p < 6; ++p) fill(a, 0, p, 1.0F, 7);
  for (Position p = 0; p < 6; ++p) fill(b, 0, p, 1.0F, 7);
  // Block 0 (positions 0-3) is full in both and equal: b references a's.
  ASSERT_EQ(a.blocks(0).size(), 2U);
  EXPECT_EQ(b.blocks(0)[0], a.blocks(0)[0]);
  EXPECT_NE(b.blocks(0)[1], a.blocks(0)[1]);  // the partial block is never shared
  EXPECT_EQ(pool->refcount(a.blocks(0)[0]), 2U);
  EXPECT_EQ(pool->stats().in_use, 3U);
  EXPECT_EQ(pool->stats().references, 4U);
  EXPECT_EQ(pool->stats().saved, 1U);
  EXPECT_EQ(pool->stats().shared, 1U);

  // b evicts position 1: closing the gap writes into the shared block, which
  // is copied first; a's rows are untouched.
  const Position victim[] = {1};
  b.mark(0, victim, "test", 6);
  EXPECT_EQ(b.remove_marked(0), 1U);
  EXPECT_NE(b.blocks(0)[0], a.blocks(0)[0]);
  EXPECT_EQ(pool->stats().copies, 1U);
  EXPECT_EQ(pool->refcount(a.blocks(0)[0]), 1U);
  const auto [ak, av] = a.rows(0);
  EXPECT_EQ(ak[1 * 4], 1.0F + 1.0F);  // position 1's key is still there for a
  const auto [bk, bv] = b.rows(0);
  EXPECT_EQ(bk[1 * 4], 1.0F + 2.0F);  // b's slot 1 now holds position 2
  const std::vector<Position> held(b.positions(0).begin(), b.positions(0).end());
  EXPECT_EQ(held, (std::vector<Position>{0, 2, 3, 4, 5}));

  // Same tokens and positions but other bytes: never shared.
  SequenceStore c(shape, pool, true);
  for (Position p = 0; p < 4; ++p) fill(c, 0, p, 2.0F, 7);
  EXPECT_NE(c.blocks(0)[0], a.blocks(0)[0]);
  // Same bytes but other tokens: not shared either (the key differs).
  SequenceStore d(shape, pool, true);
  for (Position p = 0; p < 4; ++p) fill(d, 0, p, 1.0F, 8);
  EXPECT_NE(d.blocks(0)[0], a.blocks(0)[0]);

  a.clear();
  b.clear();
  c.clear();
  d.clear();
  EXPECT_EQ(pool->free_blocks(), 8U);
  EXPECT_EQ(pool->stats().in_use, 0U);
  EXPECT_EQ(pool->stats().references, 0U);
  EXPECT_EQ(pool->stats().published, 0U);
}

TEST(KvStore, AWholeSharedBlockEvictedDropsOnlyThatReference) {
  const StoreShape shape{1, 1, 2, 8};
  auto pool = std::make_shared<BlockPool>(2, 2, 6);
  SequenceStore a(shape, pool, true);
  SequenceStore b(shape, pool, true);
  for (Position p = 0; p < 4; ++p) fill(a, 0, p, 0.5F, 3);
  for (Position p = 0; p < 4; ++p) fill(b, 0, p, 0.5F, 3);
  ASSERT_EQ(pool->stats().in_use, 2U);
  const std::uint32_t first = a.blocks(0)[0];
  const Position victims[] = {0, 1};
  b.mark(0, victims, "test", 4);
  EXPECT_EQ(b.remove_marked(0), 2U);
  EXPECT_EQ(pool->refcount(first), 1U);  // a still holds it
  EXPECT_EQ(pool->stats().copies, 0U);   // nothing was written: no copy
  EXPECT_EQ(b.stats().rows_moved, 0U);
  EXPECT_EQ(b.blocks(0).size(), 1U);
  EXPECT_EQ(b.blocks(0)[0], a.blocks(0)[1]);
}

TEST(KvStore, ACopyThePoolCannotMakeChangesNothing) {
  const StoreShape shape{1, 1, 2, 8};
  auto pool = std::make_shared<BlockPool>(2, 2, 2);
  SequenceStore a(shape, pool, true);
  SequenceStore b(shape, pool, true);
  for (Position p = 0; p < 2; ++p) fill(a, 0, p, 0.5F, 3);
  for (Position p = 0; p < 2; ++p) fill(b, 0, p, 0.5F, 3);
  for (Position p = 2; p < 3; ++p) fill(a, 0, p, 0.5F, 3);  // the pool's second block
  ASSERT_EQ(pool->free_blocks(), 0U);
  const Position victim[] = {0};
  b.mark(0, victim, "test", 2);
  expect_error<InputError>([&] { b.remove_marked(0); },
                           "decoder: the block pool is exhausted: layer 0, KV head 0 must copy 1 shared blocks to "
                           "close the gaps eviction left, and 0 are free");
  EXPECT_EQ(b.count(0), 2U);
  EXPECT_EQ(pool->refcount(a.blocks(0)[0]), 2U);
  expect_error<ContractError>([&] { b.mark(0, std::vector<Position>{5}, "test", 2); },
                              "test: victim 5 at position 2 (layer 0, KV head 0) is not held");
  expect_error<ContractError>([&] { b.mark(0, std::vector<Position>{1, 1}, "test", 2); },
                              "test: victim 1 at position 2 (layer 0, KV head 0) is named twice");
}

// ---- a batch against solo runs --------------------------------------------------------

struct Stream {
  std::vector<std::uint8_t> bytes;
  std::uint32_t joins = 0;   // tick it joins at
  std::uint32_t leaves = 0;  // tick it leaves at (after its last byte at the latest)
};

// Logits of one stream run alone on a decoder of its own.
std::vector<std::vector<float>> solo(const std::shared_ptr<const Model>& model, const Stream& s, const RunSpec* spec,
                                     const PagedOptions& paged, std::uint32_t capacity, std::uint32_t block_size) {
  DecoderOptions o;
  o.capacity = capacity;
  o.block_size = block_size;
  Decoder d(model, o);
  DecoderPolicies policies;
  if (spec != nullptr) policies = DecoderPolicies(*spec, model->config(), paged);
  policies.attach(d);
  std::vector<std::vector<float>> out;
  for (std::uint32_t t = s.joins; t < s.leaves; ++t) {
    const std::span<const float> l = d.step(s.bytes[t - s.joins]);
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

struct BatchRun {
  std::uint64_t shared = 0;
  std::uint64_t copies = 0;
};

BatchRun expect_batch_matches_solo(const RunSpec* spec, const PagedOptions& paged, bool share) {
  const auto model = committed_model();
  const std::vector<std::uint8_t>& text = heldout();
  constexpr std::uint32_t kTokens = 160;
  constexpr std::uint32_t kBlock = 8;
  auto slice = [&](std::size_t from, std::size_t n) {
    return std::vector<std::uint8_t>(text.begin() + static_cast<std::ptrdiff_t>(from),
                                     text.begin() + static_cast<std::ptrdiff_t>(from + n));
  };
  // 0 and 2 read the same bytes (2 joins later); 1 shares their first 64 and
  // leaves early; 3 shares nothing.
  std::vector<Stream> streams(4);
  streams[0] = {slice(0, kTokens), 0, kTokens};
  streams[1] = {slice(0, 64), 0, 120};
  const std::vector<std::uint8_t> own = slice(3000, kTokens);
  streams[1].bytes.insert(streams[1].bytes.end(), own.begin(), own.begin() + (kTokens - 64));
  streams[2] = {slice(0, kTokens), 30, 30 + kTokens};
  streams[3] = {slice(6000, kTokens), 5, 5 + kTokens};

  BatchOptions options;
  options.capacity = kTokens;
  options.block_size = kBlock;
  options.pool_blocks = 4ULL * model->config().head_count() * (kTokens / kBlock);
  options.share_prefix = share;
  Batch batch(model, options);
  std::vector<std::optional<SequenceId>> ids(streams.size());
  std::vector<std::vector<std::vector<float>>> want;
  for (const Stream& s : streams) want.push_back(solo(model, s, spec, paged, kTokens, kBlock));
  const std::uint32_t end = 30 + kTokens;
  for (std::uint32_t t = 0; t < end; ++t) {
    for (std::size_t i = 0; i < streams.size(); ++i) {
      const Stream& s = streams[i];
      if (t == s.joins) ids[i] = batch.join(spec, paged);
      if (t == s.leaves && ids[i]) {
        batch.leave(*ids[i]);
        ids[i].reset();
      }
      if (!ids[i]) continue;
      const std::span<const float> got = batch.step(*ids[i], s.bytes[t - s.joins]);
      const std::vector<float>& expected = want[i][t - s.joins];
      if (got.size() != expected.size() || std::memcmp(got.data(), expected.data(), got.size_bytes()) != 0) {
        ADD_FAILURE() << "sequence " << i << " differs from its solo run at its step " << t - s.joins;
        return {};
      }
    }
    expect_refcounts(batch);
    if (::testing::Test::HasFatalFailure()) return {};
  }
  BatchRun r{batch.pool().stats().shared, batch.pool().stats().copies};
  for (const SequenceId id : batch.sequences()) batch.leave(id);
  EXPECT_EQ(batch.pool().free_blocks(), batch.pool().blocks());
  EXPECT_EQ(batch.pool().stats().references, 0U);
  EXPECT_EQ(batch.pool().stats().published, 0U);
  if (!share) {
    EXPECT_EQ(r.shared, 0U);
  }
  return r;
}

TEST(Batch, EverySequenceMatchesItsSoloRunToTheBitForEveryPolicyAndMode) {
  std::uint64_t shared = 0;
  std::uint64_t copies = 0;
  for (const PolicyInfo* info : policies()) {
    for (const bool blocks : {false, true}) {
      for (const bool share : {true, false}) {
        SCOPED_TRACE(fmt::format("{} {} sharing {}", info->name, blocks ? "block" : "token", share ? "on" : "off"));
        // PyramidKV's top layer keeps a fraction of the budget; its protected
        // recent window must leave whole blocks to evict there.
        ParamMap params;
        if (info->name == "pyramidkv") params.emplace_back("recentWindow", 8);
        RunSpec spec{std::string(info->name), params, 96};
        PagedOptions paged;
        if (blocks) paged.block_size = 8;
        const BatchRun r = expect_batch_matches_solo(&spec, paged, share);
        if (HasFailure()) return;
        shared += r.shared;
        copies += r.copies;
      }
    }
  }
  // The paths under test ran: blocks were shared, and shared blocks copied.
  EXPECT_GT(shared, 0U);
  EXPECT_GT(copies, 0U);
}

TEST(Batch, FullCacheAndLayerBudgetsMatchTheirSoloRuns) {
  for (const bool share : {true, false}) {
    const BatchRun full = expect_batch_matches_solo(nullptr, {}, share);
    if (share) {
      EXPECT_GT(full.shared, 0U);
    }
    EXPECT_EQ(full.copies, 0U);  // nothing is evicted, so nothing shared is changed
    RunSpec spec{"h2o", {}, 64};
    PagedOptions layer;
    layer.layer_budget = true;
    expect_batch_matches_solo(&spec, layer, share);
  }
}

TEST(Batch, BadRequestsAreOneClearErrorAndTheOthersGoOn) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  const std::uint32_t caches = c.head_count();
  BatchOptions small;
  small.capacity = 64;
  small.block_size = 4;
  small.pool_blocks = caches - 1;
  expect_error<ParameterError>([&] { Batch(model, small); },
                               fmt::format("batch: a pool of {} blocks cannot hold one sequence, which needs {} (one "
                                           "per cache: {} layers x {} KV heads)",
                                           caches - 1, caches, c.layers, c.kv_heads));
  // Room for two sequences' first blocks and one more.
  BatchOptions options = small;
  options.pool_blocks = 2ULL * caches + 1;
  options.share_prefix = false;
  Batch batch(model, options);
  expect_error<InputError>([&] { batch.step(0, 'a'); }, "batch: cannot step sequence 0: no sequence has that id");
  const SequenceId a = batch.join();
  // b holds 4 positions, a block of 4 per cache: one more block at a time is all it ever needs.
  RunSpec spec{"sliding-window", {}, 4};
  const SequenceId b = batch.join(&spec);
  const std::vector<std::uint8_t>& text = heldout();
  Decoder solo_b(model, DecoderOptions{.capacity = 64});
  DecoderPolicies solo_policies(spec, c, {});
  solo_policies.attach(solo_b);
  auto step_b = [&](std::uint32_t t) {
    const std::span<const float> got = batch.step(b, text[t]);
    const std::span<const float> want = solo_b.step(text[t]);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size_bytes()), 0) << t;
  };
  batch.step(a, text[0]);
  step_b(0);
  expect_error<InputError>([&] { batch.join(); },
                           fmt::format("batch: no room to join: 1 of the pool's {} blocks are free and a sequence "
                                       "needs {} to read its first token (one per cache)",
                                       2 * caches + 1, caches));
  for (std::uint32_t t = 1; t < 4; ++t) {
    batch.step(a, text[t]);
    step_b(t);
  }
  // a's fifth token needs a block per cache: it takes the free one for cache
  // 0 and finds none for cache 1; it leaves, and its blocks go back.
  expect_error<InputError>([&] { batch.step(a, text[4]); },
                           fmt::format("sequence {}: decoder: the block pool is exhausted at position 4 (layer {}, KV "
                                       "head {}): all {} blocks are in use (sequence {} left the batch; its blocks "
                                       "are back in the pool)",
                                       a, 1 / c.kv_heads, 1 % c.kv_heads, 2 * caches + 1, a));
  EXPECT_EQ(batch.pool().free_blocks(), caches + 1);
  expect_error<InputError>([&] { batch.step(a, 'x'); },
                           fmt::format("batch: cannot step sequence {}: it left the batch when its step at position 4 "
                                       "failed",
                                       a));
  for (std::uint32_t t = 4; t < 40; ++t) step_b(t);  // b goes on, as if alone
  PagedOptions wrong;
  wrong.block_size = 8;
  expect_error<ParameterError>([&] { batch.join(&spec, wrong); },
                               "batch: block mode evicts blocks of 8 positions; the pool's blocks hold 4");
  EXPECT_EQ(batch.sequences(), std::vector<SequenceId>{b});  // the refused join added nothing
  batch.leave(b);
  expect_error<InputError>([&] { batch.leave(b); }, fmt::format("batch: cannot remove sequence {}: it has left", b));
  EXPECT_EQ(batch.pool().free_blocks(), batch.pool().blocks());
}

// ---- chunked prefill -----------------------------------------------------------------

// After each chunk, sliding-window keeps exactly the newest `budget` of the
// positions read so far; during a chunk nothing goes. Worked out from the
// chunk arithmetic alone.
TEST(ChunkedPrefill, EachChunkEndsWithTheBudgetAndNoCacheHoldsMoreThanBudgetPlusChunk) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  constexpr std::uint32_t kPrompt = 200;
  constexpr std::uint32_t kChunk = 48;
  constexpr std::int64_t kBudget = 40;
  const RunSpec spec{"sliding-window", {}, kBudget};
  Decoder d(model, DecoderOptions{.capacity = kPrompt});
  PrefillCompressor compressor(c, spec, kPrompt, 16, kChunk);
  std::uint32_t most = 0;
  for (std::uint32_t i = 0; i < kPrompt; ++i) {
    d.step(heldout()[i]);
    for (std::uint32_t h = 0; h < c.head_count(); ++h) most = std::max<std::uint32_t>(most, d.held(h).size());
    const bool last = compressor.after_step(d, i);
    EXPECT_EQ(last, i + 1 == kPrompt);
    const bool chunk_end = (i + 1) % kChunk == 0 || i + 1 == kPrompt;
    const std::uint32_t read = i + 1;
    const std::uint32_t first = chunk_end ? read - std::min<std::uint32_t>(read, kBudget)
                                          : (read / kChunk * kChunk) - std::min<std::uint32_t>(read / kChunk * kChunk,
                                                                                              kBudget);
    for (std::uint32_t h = 0; h < c.head_count(); ++h) {
      const std::span<const Position> held = d.held(h);
      ASSERT_EQ(held.size(), read - first) << "after byte " << i;
      for (std::uint32_t k = 0; k < held.size(); ++k) ASSERT_EQ(held[k], first + k);
    }
  }
  EXPECT_EQ(most, kBudget + kChunk);
  EXPECT_EQ(d.store().peak_cache, kBudget + kChunk);
}

// One chunk as long as the prompt keeps what kvevict::prefill chooses from
// the last 32 queries' rows, which the test lays out itself from a plain
// full-cache decoder: the compressor's rows and its mapping back to
// positions, checked against the core function directly.
TEST(ChunkedPrefill, AChunkAsLongAsThePromptKeepsWhatPrefillChoosesFromTheLastRows) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  constexpr std::uint32_t kPrompt = 200;
  constexpr std::uint32_t kRows = 32;
  for (const char* name : {"snapkv", "h2o", "streaming-llm"}) {
    const RunSpec spec{name, {}, 64};
    Decoder full(model, DecoderOptions{.capacity = kPrompt});
    Decoder chunked(model, DecoderOptions{.capacity = kPrompt});
    PrefillCompressor compressor(c, spec, kPrompt, kRows, kPrompt);
    std::vector<std::vector<float>> rows(c.head_count(), std::vector<float>(std::size_t{kRows} * kPrompt, 0.0F));
    for (std::uint32_t i = 0; i < kPrompt; ++i) {
      full.step(heldout()[i]);
      chunked.step(heldout()[i]);
      if (i >= kPrompt - kRows) {
        for (std::uint32_t h = 0; h < c.head_count(); ++h) {
          const std::span<const float> w = full.attention(h);  // over positions 0 ... i
          ASSERT_EQ(w.size(), i + 1);
          std::copy(w.begin(), w.end(), rows[h].begin() + std::ptrdiff_t{i - (kPrompt - kRows)} * kPrompt);
        }
      }
      compressor.after_step(chunked, i);
    }
    for (std::uint32_t h = 0; h < c.head_count(); ++h) {
      const std::vector<Position> want = prefill(name, {}, 64, PrefillWindow{rows[h], kRows, kPrompt});
      ASSERT_EQ(want.size(), 64U);
      EXPECT_TRUE(std::ranges::equal(chunked.held(h), want)) << name << " cache " << h;
    }
  }
}

// ---- serve-bench ---------------------------------------------------------------------

TEST(ServeBench, SharingSavesThePrefixBlocksOfEveryFollowerAndNothingLeaks) {
  const auto model = committed_model();
  const std::uint32_t caches = model->config().head_count();
  ServeBenchRequest request;
  request.runs = serve_runs({1, 4}, {"none", "h2o"}, 64, {"token", "block"}, {true, false}, {0});
  request.shared_prefix = 64;
  request.tokens = 128;
  request.block_size = 16;
  const std::vector<ServeRow> rows = serve_bench(model, heldout(), request);
  // Per sequence count: the full cache on and off, h2o token and block on and off.
  ASSERT_EQ(rows.size(), 2U * (2 + 4));
  for (const ServeRow& r : rows) {
    SCOPED_TRACE(fmt::format("{} {} {} {}", r.run.policy, r.run.blocks, r.run.share_prefix, r.run.sequences));
    EXPECT_EQ(r.leaked_blocks, 0U);
    const std::uint64_t n = r.run.sequences;
    if (r.run.policy.empty()) {
      // 128 positions in blocks of 16 per cache; with sharing the followers
      // hold none of the 64-byte prefix's 4 blocks per cache.
      const std::uint64_t all = n * caches * (128 / 16);
      EXPECT_EQ(r.peak_blocks, r.run.share_prefix ? all - (n - 1) * caches * 4 : all);
      EXPECT_EQ(r.blocks_saved, r.run.share_prefix ? (n - 1) * caches * 4 : 0U);
      EXPECT_EQ(r.peak_positions, n * caches * 128);
      EXPECT_EQ(r.evicted, 0U);
    } else {
      EXPECT_EQ(r.peak_cache_positions, 65U);  // the budget, and the newest token before the eviction
      EXPECT_EQ(r.positions_held, n * caches * 64);
      EXPECT_EQ(r.evicted, n * caches * (128 - 64));
      if (!r.run.share_prefix) {
        EXPECT_EQ(r.blocks_saved, 0U);
      }
    }
  }
}

TEST(ServeBench, BadRequestsAreOneClearError) {
  const auto model = committed_model();
  ServeBenchRequest request;
  request.runs = serve_runs({2}, {"h2o"}, 64, {"token"}, {true}, {300});
  request.tokens = 256;
  request.shared_prefix = 64;
  expect_error<ParameterError>([&] { serve_bench(model, heldout(), request); },
                               "serve-bench: a chunk of 300 positions is larger than the capacity of 256 (the tokens "
                               "each sequence reads)");
  request.runs = serve_runs({2}, {"h2o"}, 64, {"token"}, {true}, {0});
  request.shared_prefix = 300;
  expect_error<ParameterError>([&] { serve_bench(model, heldout(), request); },
                               "serve-bench: --shared-prefix 300 is longer than the 256 tokens each sequence reads");
  request.shared_prefix = 0;
  const std::vector<std::uint8_t> short_text(500, 'a');
  expect_error<InputError>([&] { serve_bench(model, short_text, request); },
                           "serve-bench: the text has 500 bytes; 2 sequences of 256 bytes sharing 0 need 512");
  expect_error<ParameterError>([&] { serve_runs({1}, {"h2o"}, 64, {"tokens"}, {true}, {0}); },
                               "serve-bench: mode 'tokens' is not token or block");
}

}  // namespace
}  // namespace kvevict
