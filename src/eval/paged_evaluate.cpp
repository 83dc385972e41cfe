#include <algorithm>
#include <chrono>
#include <functional>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/eval/npy.h"
#include "kvevict/eval/paged.h"
#include "kvevict/core/registry.h"

namespace kvevict {

namespace {

// A BlockEvictor seen as a Policy, for the harness: evict(budget) evicts
// whole blocks down to budget / block_size blocks.
class BlockPolicy final : public Policy {
 public:
  BlockPolicy(const std::string& policy, const ParamMap& params, const BlockParams& block)
      : evictor_(policy, params, block), name_(evictor_.policy().name()) {}

  std::string_view name() const noexcept override { return name_; }
  void on_decode_step(std::int64_t pos, Attention attn) override { evictor_.on_decode_step(pos, attn); }
  Signals signals() const noexcept override { return evictor_.policy().signals(); }
  void on_step(std::int64_t pos, const StepInputs& in) override { evictor_.on_step(pos, in); }
  void on_origin(const StepInputs& in) override { evictor_.on_origin(in); }
  std::span<const Position> evict(std::int64_t budget) override {
    evictor_.evict_blocks(budget < 0 ? budget : budget / static_cast<std::int64_t>(evictor_.block_size()));
    return evictor_.evicted_positions();
  }
  std::size_t kept_count() const noexcept override { return evictor_.kept_count(); }
  std::size_t memory_bytes() const noexcept override { return evictor_.memory_bytes(); }

 private:
  BlockEvictor evictor_;
  std::string name_;
};

constexpr std::uint32_t kTopK = 32;

// The step's top-32 set (spec/domain.md 2, step 5), as the harness makes it.
void top_set(std::span<const float> w, std::vector<float>& scratch, std::vector<std::uint32_t>& top) {
  const std::size_t k = std::min<std::size_t>(kTopK, w.size());
  scratch.assign(w.begin(), w.end());
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(k - 1), scratch.end(),
                   std::greater<>());
  const float threshold = scratch[k - 1];
  std::size_t above = 0;
  for (const float x : w) above += x > threshold ? 1 : 0;
  std::size_t tie_slots = k - above;
  top.clear();
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] > threshold) {
      top.push_back(static_cast<std::uint32_t>(i));
    } else if (w[i] == threshold && tie_slots > 0) {
      --tie_slots;
      top.push_back(static_cast<std::uint32_t>(i));
    }
  }
}

}  // namespace

void check_paged(const PagedOptions& p) {
  if (p.block_size < 0 || (p.block_size == 0 && (p.start_blocks != 0 || p.recent_blocks != 0 ||
                                                  p.block_score != BlockScore::kSum))) {
    throw ParameterError(fmt::format(
        "--block-size ({}) must be at least 1 (--start-blocks, --recent-blocks and --block-score need it)", p.block_size));
  }
  if (p.blocks() && p.layer_budget) {
    throw ParameterError("--layer-budget and --block-size: a layer budget shared by heads is per position; "
                         "blocks are evicted per head (give one or the other)");
  }
  if (p.layer_budget && p.sequence_budget) {
    throw ParameterError("--granularity: a budget is shared by a layer's heads or by the whole sequence, not both "
                         "(--layer-budget is --granularity layer)");
  }
  if (p.blocks() && p.sequence_budget) {
    throw ParameterError("--granularity sequence and --block-size: a sequence's one victim set is per position; "
                         "blocks are evicted per head (give one or the other)");
  }
  if (!p.layer_budget && p.head_floor != -1) throw ParameterError("--head-floor needs --granularity layer");
}

Granularity parse_granularity(std::string_view name) {
  if (name == "head") return Granularity::kHead;
  if (name == "layer") return Granularity::kLayer;
  if (name == "sequence") return Granularity::kSequence;
  throw ParameterError(fmt::format("--granularity ({}) must be head, layer or sequence", name));
}

std::string_view granularity_name(Granularity granularity) noexcept {
  switch (granularity) {
    case Granularity::kLayer:
      return "layer";
    case Granularity::kSequence:
      return "sequence";
    case Granularity::kHead:
      break;
  }
  return "head";
}

std::int64_t given_block_size(std::int64_t value, std::string_view name) {
  if (value < 1) {
    throw ParameterError(fmt::format("{} ({}) must be at least 1 (leave it out for token-level eviction)", name, value));
  }
  return value;
}

std::int64_t layer_budget_of(std::int64_t budget, std::int64_t heads, const PagedOptions& paged) {
  if (heads < 1) throw ParameterError(fmt::format("--layer-budget: the layer has {} heads; it needs at least 1", heads));
  if (budget < 1) throw ParameterError(fmt::format("--budget ({}) must be at least 1", budget));
  if (budget > kMaxLayerBudget / heads) {
    throw ParameterError(fmt::format("--budget ({}) times the layer's {} head{} must be at most {} (--layer-budget)",
                                     budget, heads, heads == 1 ? "" : "s", kMaxLayerBudget));
  }
  if (paged.head_floor < -1) {
    throw ParameterError(fmt::format("--head-floor ({}) must be at least 0 (or left out for the default)",
                                     paged.head_floor));
  }
  if (paged.head_floor > budget) {
    throw ParameterError(fmt::format("--head-floor ({}) must be at most --budget ({}): every head's floor must fit in "
                                     "the layer's budget x heads",
                                     paged.head_floor, budget));
  }
  return budget * heads;
}

std::unique_ptr<Policy> make_run_policy(const std::string& policy, const ParamMap& params, std::int64_t budget,
                                        const PagedOptions& paged) {
  if (!paged.blocks()) return find_policy(policy).make(params);
  if (budget % paged.block_size != 0) {
    throw ParameterError(fmt::format("budget ({}) must be a whole number of blocks (--block-size {})", budget,
                                     paged.block_size));
  }
  BlockParams block;
  block.block_size = paged.block_size;
  block.start_blocks = paged.start_blocks;
  block.recent_blocks = paged.recent_blocks;
  block.block_budget = budget / paged.block_size;
  block.score = paged.block_score;
  return std::make_unique<BlockPolicy>(policy, params, block);
}

namespace {

// What run_shared needs of a budget shared by several caches.
struct LayerShare {
  LayerBudget& lb;
  std::string_view name() const { return lb.head(0).name(); }
  std::size_t heads() const { return lb.heads(); }
  // Positions the caches hold together, against the budget: their sum.
  static std::size_t measure(std::size_t held_sum, std::size_t /*one*/) { return held_sum; }
  void evict(std::int64_t budget) { lb.evict(budget); }
  std::span<const Position> victims(std::size_t h) const { return lb.victims(h); }
  void on_decode_step(std::size_t h, std::int64_t t, Attention attn) { lb.on_decode_step(h, t, attn); }
  void on_step(std::size_t h, std::int64_t t, const StepInputs& in) { lb.on_step(h, t, in); }
  void on_origin(std::size_t h, const StepInputs& in) { lb.on_origin(h, in); }
  static constexpr const char* kHolder = "layer";
};

struct SequenceShare {
  SequenceBudget& sb;
  std::span<const Position> last{};
  std::string_view name() const { return sb.cache(0).name(); }
  std::size_t heads() const { return sb.caches(); }
  // Every cache holds the same positions: one cache's count is the sequence's.
  static std::size_t measure(std::size_t /*held_sum*/, std::size_t one) { return one; }
  void evict(std::int64_t budget) { last = sb.evict(budget); }
  std::span<const Position> victims(std::size_t /*h*/) const { return last; }
  void on_decode_step(std::size_t h, std::int64_t t, Attention attn) { sb.on_decode_step(h, t, attn); }
  void on_step(std::size_t h, std::int64_t t, const StepInputs& in) { sb.on_step(h, t, in); }
  void on_origin(std::size_t h, const StepInputs& in) { sb.on_origin(h, in); }
  static constexpr const char* kHolder = "sequence";
};

// run_layer and run_sequence: the heads stepped in lock step, measured before
// each eviction as the harness measures them, evicted together.
template <class Share>
std::vector<RunTotals> run_shared(Share share, std::int64_t budget, std::int64_t head_budget,
                                  std::span<Trace* const> heads, std::uint32_t steps, const ProgressFn& progress,
                                  std::span<StepSignals* const> signals, const char* who) {
  const std::size_t n = heads.size();
  if (n != share.heads()) {
    throw ContractError(fmt::format("{}: {} traces for a {} budget of {} heads", who, n, Share::kHolder, share.heads()));
  }
  if (!signals.empty() && signals.size() != n) {
    throw ContractError(fmt::format("{}: {} signal sources for {} heads", who, signals.size(), n));
  }
  for (std::size_t h = 0; h < signals.size(); ++h) share.on_origin(h, signals[h]->at(0));
  const std::string name(share.name());
  const std::uint32_t length = heads.front()->length();
  std::vector<float> scratch;
  std::vector<std::uint32_t> top;
  std::vector<RunTotals> totals(n);
  std::vector<std::vector<Position>> kept(n, std::vector<Position>{0});
  std::vector<std::vector<std::uint8_t>> is_kept(n, std::vector<std::uint8_t>(length, 0));
  std::vector<float> attn;
  for (Trace* head : heads) head->rewind();
  for (std::size_t h = 0; h < n; ++h) {
    is_kept[h][0] = 1;
    totals[h].budget = head_budget;
  }
  auto held_now = [&] {
    std::size_t sum = 0;
    for (const auto& k : kept) sum += k.size();
    return Share::measure(sum, kept.front().size());
  };
  for (std::uint32_t t = 1; t <= steps; ++t) {
    for (std::size_t h = 0; h < n; ++h) {
      const std::span<const float> w = heads[h]->next();
      top_set(w, scratch, top);
      RunTotals& tot = totals[h];
      ++tot.steps;
      attn.resize(kept[h].size());
      double retained = 0.0;
      for (std::size_t i = 0; i < kept[h].size(); ++i) {
        attn[i] = w[kept[h][i]];
        retained += static_cast<double>(attn[i]);
      }
      tot.total_retained_mass += retained;
      tot.total_heavy_possible += static_cast<std::int64_t>(top.size());
      for (const std::uint32_t p : top) tot.total_heavy_hits += is_kept[h][p];
      if (signals.empty()) {
        share.on_decode_step(h, t, std::span<const float>(attn));
      } else {
        StepInputs in = signals[h]->at(t);
        in.attention = std::span<const float>(attn);
        share.on_step(h, t, in);
      }
      kept[h].push_back(t);
      is_kept[h][t] = 1;
    }
    if (progress) progress(t, steps);
    if (static_cast<std::int64_t>(held_now()) <= budget) continue;
    share.evict(budget);
    for (std::size_t h = 0; h < n; ++h) {
      ++totals[h].eviction_calls;
      for (const Position v : share.victims(h)) {
        if (v >= length || is_kept[h][v] == 0) {
          throw ContractError(fmt::format("{}: head {}'s victim {} at step {} is not held", name, h, v, t));
        }
        is_kept[h][v] = 0;
      }
      totals[h].evicted += static_cast<std::int64_t>(share.victims(h).size());
      std::erase_if(kept[h], [&](Position p) { return is_kept[h][p] == 0; });
    }
    if (static_cast<std::int64_t>(held_now()) > budget) {
      throw ContractError(fmt::format("{}: the {} holds {} positions at step {} against a {} budget of {}", name,
                                      Share::kHolder, held_now(), t, Share::kHolder, budget));
    }
  }
  return totals;
}

}  // namespace

std::vector<RunTotals> run_layer(LayerBudget& lb, std::int64_t layer_budget, std::span<Trace* const> heads,
                                 std::uint32_t steps, const ProgressFn& progress,
                                 std::span<StepSignals* const> signals) {
  const auto n = static_cast<std::int64_t>(std::max<std::size_t>(heads.size(), 1));
  return run_shared(LayerShare{lb}, layer_budget, layer_budget / n, heads, steps, progress, signals, "run_layer");
}

std::vector<RunTotals> run_sequence(SequenceBudget& sb, std::int64_t budget, std::span<Trace* const> heads,
                                    std::uint32_t steps, const ProgressFn& progress,
                                    std::span<StepSignals* const> signals) {
  return run_shared(SequenceShare{sb}, budget, budget, heads, steps, progress, signals, "run_sequence");
}

namespace detail {

std::vector<RunRow> evaluate_shared(const std::vector<RunSpec>& specs, const EvaluateOptions& options) {
  std::vector<std::unique_ptr<Trace>> heads = open_trace_heads(options.trace);
  const std::uint32_t steps = options.steps ? checked_steps(*heads.front(), *options.steps) : heads.front()->steps();
  const std::size_t n = heads.size();
  LayerBudgetParams layer;
  layer.heads = static_cast<std::int64_t>(n);
  layer.head_floor = options.paged.head_floor;
  const SignalReplay replay(options.signals, options.trace, n, heads.front()->length());

  // Every layer (or sequence) built first, so a bad parameter fails before any work.
  const bool sequence = options.paged.sequence_budget;
  std::vector<RunRow> rows;
  std::vector<std::unique_ptr<LayerBudget>> built;
  std::vector<std::unique_ptr<SequenceBudget>> built_sequences;
  for (const RunSpec& spec : specs) {
    const PolicyInfo& info = find_policy(spec.policy);
    if (spec.budget < 1) throw ParameterError(fmt::format("{}: budget ({}) must be at least 1", info.name, spec.budget));
    if (!sequence) layer.layer_budget = layer_budget_of(spec.budget, layer.heads, options.paged);
    check_replay_signals(info, options.signals);
    ParamMap params = replay.params_for(info, spec.params);
    params.erase(std::remove_if(params.begin(), params.end(), [](const auto& kv) { return kv.first == "budget"; }),
                 params.end());
    if (sequence) {
      built_sequences.push_back(std::make_unique<SequenceBudget>(
          info.name, params, SequenceBudgetParams{.caches = layer.heads, .budget = spec.budget, .keep_newest = true}));
    } else {
      built.push_back(std::make_unique<LayerBudget>(info.name, params, layer));
    }
    RunRow row;
    row.policy = info.name;
    row.trace = options.trace;
    row.budget = spec.budget;
    ParamMap shown = params;
    set_param(shown, "budget", spec.budget);
    row.params = info.effective(shown);
    row.memory_bytes = sequence ? built_sequences.back()->memory_bytes() : built.back()->memory_bytes();
    row.heads = n;
    rows.push_back(std::move(row));
  }

  std::vector<Trace*> views;
  for (auto& head : heads) views.push_back(head.get());
  std::vector<std::unique_ptr<StepSignals>> sources;
  std::vector<StepSignals*> signals;
  if (!options.signals.empty()) {
    for (std::size_t h = 0; h < n; ++h) {
      sources.push_back(replay.head(h));
      signals.push_back(sources.back().get());
    }
  }
  for (std::size_t r = 0; r < specs.size(); ++r) {
    const auto started = std::chrono::steady_clock::now();
    const std::vector<RunTotals> totals =
        sequence ? run_sequence(*built_sequences[r], specs[r].budget, views, steps, options.progress, signals)
                 : run_layer(*built[r], layer_budget_of(specs[r].budget, layer.heads, options.paged), views, steps,
                             options.progress, signals);
    RunRow& row = rows[r];
    double mass = 0.0;
    double recall = 0.0;
    for (std::size_t h = 0; h < n; ++h) {
      const RunTotals& tt = totals[h];
      row.totals.steps += tt.steps;
      row.totals.budget = tt.budget;
      row.totals.total_retained_mass += tt.total_retained_mass;
      row.totals.total_heavy_hits += tt.total_heavy_hits;
      row.totals.total_heavy_possible += tt.total_heavy_possible;
      row.totals.evicted += tt.evicted;
      row.head_metrics.push_back(metrics_of(tt));
      mass += tt.steps == 0 ? 0.0 : tt.total_retained_mass / static_cast<double>(tt.steps);
      recall += tt.total_heavy_possible == 0 ? 0.0
                                             : static_cast<double>(tt.total_heavy_hits) /
                                                   static_cast<double>(tt.total_heavy_possible);
    }
    // Eviction calls are the layer's or the sequence's (one call evicts for every head).
    row.totals.eviction_calls = totals.front().eviction_calls;
    if (n == 1) {
      row.metrics = row.head_metrics.front();
      row.head_metrics.clear();
    } else {
      row.metrics.retained_attention_mass = round6(mass / static_cast<double>(n));
      row.metrics.heavy_hitter_recall = round6(recall / static_cast<double>(n));
      row.metrics.eviction_calls = row.totals.eviction_calls;
    }
    row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  return rows;
}

}  // namespace detail

}  // namespace kvevict
