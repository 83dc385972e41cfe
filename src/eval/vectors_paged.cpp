#include "vectors_paged.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kvevict/core/block_evictor.h"
#include "kvevict/core/layer_budget.h"

namespace kvevict::detail {

using nlohmann::json;

namespace {

std::int64_t integer(const json& v, std::string_view what) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
  }
  throw PagedMalformed(fmt::format("{} must be an integer, got {}", what, v.dump()));
}

std::vector<float> weights(const json& a, std::string_view what) {
  if (!a.is_array()) throw PagedMalformed(fmt::format("{} must be an array or null", what));
  std::vector<float> w;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number()) throw PagedMalformed(fmt::format("{}: weight {} must be a number, got {}", what, i, a[i].dump()));
    w.push_back(static_cast<float>(a[i].get<double>()));
  }
  return w;
}

json number(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9.0e15) return static_cast<std::int64_t>(x);
  return x;
}

template <class T>
json array_of(std::span<const T> values) {
  json out = json::array();
  for (const T v : values) out.push_back(v);
  return out;
}

// Reads an object's integer field, `fallback` when absent.
std::int64_t field(const json& object, const char* name, std::int64_t fallback, std::string_view where) {
  return object.contains(name) ? integer(object.at(name), fmt::format("{}.{}", where, name)) : fallback;
}

void check_fields(const json& object, std::string_view where, std::initializer_list<std::string_view> known) {
  if (!object.is_object()) throw PagedMalformed(fmt::format("'{}' must be an object", where));
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const auto k : known) ok = ok || it.key() == k;
    if (!ok) throw PagedMalformed(fmt::format("'{}' has an unknown field '{}'", where, it.key()));
  }
}

const json& args_of(const json& step) {
  static const json empty = json::array();
  if (!step.contains("args")) return empty;
  if (!step.at("args").is_array()) throw PagedMalformed("'args' must be an array");
  return step.at("args");
}

void arity(const json& args, std::size_t n, const std::string& call) {
  if (args.size() != n) throw PagedMalformed(fmt::format("{} takes {} argument(s), got {}", call, n, args.size()));
}

json query(const PolicyInfo& info, const Policy& policy, const std::string& call, const json& args, std::size_t first) {
  const QueryInfo* q = info.find_query(call);
  if (q == nullptr) throw PagedMalformed(fmt::format("{} has no method '{}'", info.name, call));
  if (args.size() != q->arity + first) {
    throw PagedMalformed(fmt::format("{} takes {} argument(s), got {}", call, q->arity + first, args.size()));
  }
  std::vector<std::int64_t> ints;
  for (std::size_t i = first; i < args.size(); ++i) ints.push_back(integer(args[i], call + "'s argument"));
  return number(q->call(policy, ints));
}

}  // namespace

std::function<json(const json&)> paged_subject(const PolicyInfo& info, const ParamMap& params, const json& c) {
  if (c.contains("blocks") && c.contains("layer")) throw PagedMalformed("a case has 'blocks' or 'layer', not both");
  if (c.contains("blocks")) {
    const json& b = c.at("blocks");
    check_fields(b, "blocks", {"blockSize", "startBlocks", "recentBlocks", "blockBudget", "blockScore"});
    BlockParams bp;
    bp.block_size = field(b, "blockSize", bp.block_size, "blocks");
    bp.start_blocks = field(b, "startBlocks", bp.start_blocks, "blocks");
    bp.recent_blocks = field(b, "recentBlocks", bp.recent_blocks, "blocks");
    bp.block_budget = field(b, "blockBudget", bp.block_budget, "blocks");
    if (b.contains("blockScore")) {
      if (!b.at("blockScore").is_string()) throw PagedMalformed("blocks.blockScore must be a string");
      bp.score = parse_block_score(b.at("blockScore").get<std::string>());
    }
    auto e = std::make_shared<BlockEvictor>(info.name, params, bp);
    return [e, &info](const json& step) -> json {
      const std::string call = step.at("call").get<std::string>();
      const json& args = args_of(step);
      if (call == "onDecodeStep") {
        arity(args, 2, call);
        const std::int64_t pos = integer(args[0], "onDecodeStep's position");
        if (args[1].is_null()) {
          e->on_decode_step(pos, std::nullopt);
        } else {
          const std::vector<float> w = weights(args[1], "onDecodeStep's attention");
          e->on_decode_step(pos, std::span<const float>(w));
        }
        return nullptr;
      }
      if (call == "evictBlocks") {
        arity(args, 1, call);
        return array_of(e->evict_blocks(integer(args[0], "evictBlocks' budget")));
      }
      if (call == "evictedPositions") return arity(args, 0, call), array_of(e->evicted_positions());
      if (call == "removedBefore") return arity(args, 0, call), array_of(e->removed_before());
      if (call == "positions") return arity(args, 0, call), array_of(e->positions());
      if (call == "keptCount") return arity(args, 0, call), json(e->kept_count());
      if (call == "blockCount") return arity(args, 0, call), json(e->block_count());
      if (call == "blockScoreOf") {
        arity(args, 1, call);
        const double s = e->block_score_of(integer(args[0], "blockScoreOf's block"));
        return std::isinf(s) ? json("protected") : number(s);
      }
      return query(info, e->policy(), call, args, 0);
    };
  }
  if (c.contains("layer")) {
    const json& l = c.at("layer");
    check_fields(l, "layer", {"heads", "layerBudget", "headFloor"});
    LayerBudgetParams lp;
    lp.heads = field(l, "heads", lp.heads, "layer");
    lp.layer_budget = field(l, "layerBudget", lp.layer_budget, "layer");
    lp.head_floor = field(l, "headFloor", lp.head_floor, "layer");
    auto layer = std::make_shared<LayerBudget>(info.name, params, lp);
    return [layer, &info](const json& step) -> json {
      const std::string call = step.at("call").get<std::string>();
      const json& args = args_of(step);
      const std::size_t heads = layer->heads();
      if (call == "onDecodeStep") {
        arity(args, 2, call);
        const std::int64_t pos = integer(args[0], "onDecodeStep's position");
        if (!args[1].is_array() || args[1].size() != heads) {
          throw PagedMalformed(fmt::format("onDecodeStep's attention must be an array of {} per-head arrays (or nulls)", heads));
        }
        for (std::size_t h = 0; h < heads; ++h) {
          if (args[1][h].is_null()) {
            layer->on_decode_step(h, pos, std::nullopt);
          } else {
            const std::vector<float> w = weights(args[1][h], fmt::format("head {}'s attention", h));
            layer->on_decode_step(h, pos, std::span<const float>(w));
          }
        }
        return nullptr;
      }
      if (call == "evictLayer") {
        arity(args, 1, call);
        layer->evict(integer(args[0], "evictLayer's budget"));
        json out = json::array();
        for (std::size_t h = 0; h < heads; ++h) out.push_back(array_of(layer->victims(h)));
        return out;
      }
      if (call == "keptCount") {
        arity(args, 0, call);
        json out = json::array();
        for (std::size_t h = 0; h < heads; ++h) out.push_back(layer->kept_count(h));
        return out;
      }
      if (call == "totalKept") return arity(args, 0, call), json(layer->total_kept());
      if (call == "headFloor") return arity(args, 0, call), json(layer->head_floor());
      if (call == "headBudget") return arity(args, 0, call), json(layer->head_budget());
      // A policy query on one head: [head, ...the query's arguments].
      if (args.empty()) throw PagedMalformed(fmt::format("{} on a layer takes the head first", call));
      const std::int64_t h = integer(args[0], call + "'s head");
      if (h < 0 || static_cast<std::size_t>(h) >= heads) throw PagedMalformed(fmt::format("{}: head {} is out of range", call, h));
      return query(info, layer->head(static_cast<std::size_t>(h)), call, args, 1);
    };
  }
  return {};
}

}  // namespace kvevict::detail
