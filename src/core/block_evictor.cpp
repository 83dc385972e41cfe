#include "kvevict/core/block_evictor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict {

namespace {

constexpr const char* kTitle = "BlockEvictor";
constexpr std::int64_t kMaxBlockTokens = std::int64_t{1} << 24;  // the policies' own budget bound
constexpr double kNotCandidate = std::numeric_limits<double>::infinity();

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

void check_block_params(const BlockParams& b) {
  const auto fail = [](std::string_view name, std::int64_t value, std::string_view rule) {
    throw ParameterError(fmt::format("{}: {} ({}) {}", kTitle, name, value, rule));
  };
  if (b.block_size < 1) fail("blockSize", b.block_size, "must be at least 1");
  if (b.block_size > kMaxBlockTokens) fail("blockSize", b.block_size, fmt::format("must be at most {}", kMaxBlockTokens));
  if (b.start_blocks < 0) fail("startBlocks", b.start_blocks, "must be at least 0");
  if (b.recent_blocks < 0) fail("recentBlocks", b.recent_blocks, "must be at least 0");
  if (b.block_budget < 1) fail("blockBudget", b.block_budget, "must be at least 1");
  if (b.block_budget > kMaxBlockTokens / b.block_size) {
    fail("blockBudget", b.block_budget,
         fmt::format("times blockSize ({}) must be at most {} positions", b.block_size, kMaxBlockTokens));
  }
  // start + recent <= budget, compared without forming the sum (both may be
  // near 2^63).
  if (b.start_blocks > b.block_budget || b.recent_blocks > b.block_budget - b.start_blocks) {
    fail("blockBudget", b.block_budget,
         fmt::format("must be at least startBlocks + recentBlocks ({} + {}): the areas that are never evicted "
                     "must fit in the budget",
                     b.start_blocks, b.recent_blocks));
  }
}

ParamMap with_budget(const ParamMap& params, const BlockParams& b) {
  const std::int64_t tokens = b.block_budget * b.block_size;
  ParamMap out = params;
  for (const auto& [key, value] : params) {
    if (key == "budget" && value != tokens) {
      throw ParameterError(fmt::format(
          "{}: budget ({}) must equal blockBudget x blockSize ({} x {} = {}), or be left out", kTitle, value,
          b.block_budget, b.block_size, tokens));
    }
  }
  set_param(out, "budget", tokens);
  return out;
}

}  // namespace

BlockScore parse_block_score(std::string_view text) {
  if (text == "sum") return BlockScore::kSum;
  if (text == "mean") return BlockScore::kMean;
  if (text == "max") return BlockScore::kMax;
  if (text == "normsum") return BlockScore::kNormSum;
  throw ParameterError(fmt::format("{}: blockScore '{}' is not one of sum, mean, max, normsum", kTitle, text));
}

std::string_view block_score_name(BlockScore score) noexcept {
  switch (score) {
    case BlockScore::kSum: return "sum";
    case BlockScore::kMean: return "mean";
    case BlockScore::kMax: return "max";
    case BlockScore::kNormSum: return "normsum";
  }
  return "sum";
}

BlockEvictor::BlockEvictor(std::string_view policy, const ParamMap& params, const BlockParams& block)
    : block_(block) {
  check_block_params(block);
  const PolicyInfo& info = find_policy(policy);
  policy_ = info.make(with_budget(params, block));
  rules_ = policy_->score_rules();
  block_size_ = static_cast<std::size_t>(block.block_size);

  // The budget must be met at the worst moment: the cache holds block_budget
  // + 1 blocks (block_budget * block_size + 1 positions), the newest block
  // holding the newest position alone.
  const std::int64_t bs = block.block_size;
  const std::int64_t held = block.block_budget * bs + 1;
  const std::int64_t full = held / bs;
  const std::int64_t partial = held - full * bs;
  const std::int64_t target = std::min(block.block_budget, rules_.budget_cap / bs);
  const std::int64_t needed = block.block_budget + 1 - target;
  const std::int64_t start = std::max(block.start_blocks, ceil_div(rules_.protected_below, bs));
  const std::int64_t recent = std::max(block.recent_blocks, ceil_div(rules_.protected_newest - partial, bs));
  const std::int64_t candidates = std::max<std::int64_t>(full - start - recent, 0);
  if (candidates < needed) {
    throw ParameterError(fmt::format(
        "{}: blockBudget ({}) cannot be met: with blockSize {}, once the cache holds {} blocks the start area "
        "({} blocks: startBlocks {}, {}'s sinks {}) and the recent area ({} blocks: recentBlocks {}, {}'s "
        "protected newest {} positions) leave {} evictable full blocks of the {} needed",
        kTitle, block.block_budget, bs, block.block_budget + 1, start, block.start_blocks, info.name,
        rules_.protected_below, recent, block.recent_blocks, info.name, rules_.protected_newest, candidates, needed));
  }

  capacity_ = static_cast<std::size_t>(held);
  const std::size_t max_blocks = static_cast<std::size_t>(block.block_budget) + 1;
  positions_.resize(capacity_);
  admitted_.resize(capacity_);
  scratch_positions_.resize(capacity_);
  scores_.resize(capacity_);
  victims_.resize(capacity_);
  keys_.resize(max_blocks);
  order_.resize(max_blocks);
  chosen_.resize(max_blocks);
  blocks_.resize(max_blocks);
  removed_before_.resize(max_blocks);

  // The policy starts holding position 0 (spec/domain.md 1.2).
  const std::size_t n = policy_->scores(scratch_positions_, scores_);
  for (std::size_t i = 0; i < n; ++i) {
    positions_[i] = scratch_positions_[i];
    admitted_[i] = 0;
  }
  kept_ = n;
}

void BlockEvictor::on_decode_step(std::int64_t pos, Attention attn) { on_step(pos, StepInputs{.attention = attn}); }

void BlockEvictor::on_origin(const StepInputs& in) { policy_->on_origin(in); }

void BlockEvictor::on_step(std::int64_t pos, const StepInputs& in) {
  if (kept_ + 1 > capacity_) {
    throw ContractError(fmt::format(
        "{}: asked to hold {} positions with a budget of {} blocks of {}; call evict_blocks after every step",
        kTitle, kept_ + 1, block_.block_budget, block_size_));
  }
  policy_->on_step(pos, in);  // checks the position and the signals before changing anything
  ++steps_;
  positions_[kept_] = static_cast<Position>(pos);
  admitted_[kept_] = steps_;
  ++kept_;
}

void BlockEvictor::score_blocks() {
  const std::size_t n = policy_->scores(scratch_positions_, scores_);
  if (n != kept_ || !std::equal(positions_.begin(), positions_.begin() + static_cast<std::ptrdiff_t>(n),
                                scratch_positions_.begin())) {
    throw ContractError(fmt::format("{}: {} holds positions the evictor did not give it (was it stepped directly?)",
                                    kTitle, policy_->name()));
  }
  const std::size_t full = full_blocks();
  const auto start = static_cast<std::size_t>(block_.start_blocks);
  const std::size_t recent = std::min(static_cast<std::size_t>(block_.recent_blocks), full);
  const double inv = 1.0 / static_cast<double>(block_size_);
  for (std::size_t j = 0; j < full; ++j) {
    if (j < start || j >= full - recent) {
      keys_[j] = kNotCandidate;
      continue;
    }
    const double* s = scores_.data() + j * block_size_;
    double key = 0.0;
    bool candidate = true;
    switch (block_.score) {
      case BlockScore::kSum:
      case BlockScore::kMean:
        for (std::size_t i = 0; i < block_size_; ++i) {
          candidate = candidate && s[i] != kNotCandidate;
          key += s[i];
        }
        if (block_.score == BlockScore::kMean) key *= inv;
        break;
      case BlockScore::kMax:
        key = s[0];
        for (std::size_t i = 0; i < block_size_; ++i) {
          candidate = candidate && s[i] != kNotCandidate;
          key = std::max(key, s[i]);
        }
        break;
      case BlockScore::kNormSum: {
        const std::uint64_t* since = admitted_.data() + j * block_size_;
        for (std::size_t i = 0; i < block_size_; ++i) {
          candidate = candidate && s[i] != kNotCandidate;
          const std::uint64_t age = std::max<std::uint64_t>(steps_ - since[i], 1);
          key += s[i] / static_cast<double>(age);
        }
        break;
      }
    }
    keys_[j] = candidate ? key : kNotCandidate;
  }
}

double BlockEvictor::block_score_of(std::int64_t block) {
  if (block < 0 || static_cast<std::uint64_t>(block) >= full_blocks()) return -1.0;
  score_blocks();
  return keys_[static_cast<std::size_t>(block)];
}

std::span<const std::uint32_t> BlockEvictor::evict_blocks(std::int64_t block_budget) {
  if (block_budget < 0) {
    throw ContractError(fmt::format("{}: evict_blocks was asked for a budget of {} blocks; it must be at least 0",
                                    kTitle, block_budget));
  }
  victim_count_ = 0;
  block_victims_ = 0;
  const std::size_t blocks = block_count();
  const auto bs = static_cast<std::int64_t>(block_size_);
  const auto target = static_cast<std::size_t>(std::min(block_budget, rules_.budget_cap / bs));
  if (blocks <= target) {
    survivors_ = blocks;
    std::fill_n(removed_before_.begin(), blocks, 0U);
    return {};
  }
  const std::size_t needed = std::max(blocks - target, static_cast<std::size_t>(
                                                           ceil_div(static_cast<std::int64_t>(rules_.min_victims), bs)));
  score_blocks();
  // Candidates, then the `needed` lowest by (key, index): the order a
  // repeated strict argmin scanning ascending would take them in.
  const std::size_t full = full_blocks();
  std::size_t count = 0;
  for (std::size_t j = 0; j < full; ++j) {
    if (keys_[j] != kNotCandidate) order_[count++] = static_cast<std::uint32_t>(j);
  }
  const std::size_t take = std::min(needed, count);
  const auto before = [this](std::uint32_t a, std::uint32_t b) {
    return keys_[a] < keys_[b] || (keys_[a] == keys_[b] && a < b);
  };
  if (take < count) {
    std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(take),
                     order_.begin() + static_cast<std::ptrdiff_t>(count), before);
  }
  std::fill_n(chosen_.begin(), blocks, std::uint8_t{0});
  for (std::size_t k = 0; k < take; ++k) chosen_[order_[k]] = 1;

  // Victims ascending; survivors slide down whole blocks at a time.
  std::size_t write = 0;
  std::size_t removed = 0;
  survivors_ = 0;
  for (std::size_t j = 0; j < blocks; ++j) {
    const std::size_t begin = j * block_size_;
    const std::size_t end = std::min(begin + block_size_, kept_);
    if (chosen_[j] != 0) {
      blocks_[block_victims_++] = static_cast<std::uint32_t>(j);
      for (std::size_t i = begin; i < end; ++i) victims_[victim_count_++] = positions_[i];
      removed += end - begin;
      continue;
    }
    removed_before_[survivors_++] = static_cast<std::uint32_t>(removed);
  }
  policy_->remove({victims_.data(), victim_count_});
  for (std::size_t j = 0; j < blocks; ++j) {
    if (chosen_[j] != 0) continue;
    const std::size_t begin = j * block_size_;
    const std::size_t end = std::min(begin + block_size_, kept_);
    for (std::size_t i = begin; i < end; ++i, ++write) {
      positions_[write] = positions_[i];
      admitted_[write] = admitted_[i];
    }
  }
  kept_ = write;
  return {blocks_.data(), block_victims_};
}

std::size_t BlockEvictor::memory_bytes() const noexcept {
  // positions 4 + admission step 8 + scratch position 4 + score 8 + victim 4
  // per position; key 8 + order 4 + mark 1 + block 4 + removed-before 4 per block.
  return policy_->memory_bytes() + capacity_ * 28 + keys_.size() * 21;
}

}  // namespace kvevict
