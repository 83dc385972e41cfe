// The row schema (kvevict/eval/row_schema.h) is what run_json/rows_json emit: the
// same keys in the same order, of the declared types, with the heads-only
// fields exactly when the trace has more than one head. And run_json's text
// is pinned byte for byte, so moving the writer onto the schema (or editing
// the schema) cannot change the tool's output unnoticed.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/model/evaluation/command_schema.h"
#include "kvevict/model/evaluation/perplexity_rows.h"
#include "kvevict/model/serving/serve_bench.h"

namespace kvevict {
namespace {

using Json = nlohmann::ordered_json;

RunRow hand_row(std::uint64_t heads) {
  RunRow r;
  r.policy = "h2o";
  r.trace = "t";
  r.budget = 128;
  r.params = {{"budget", 128}, {"recentWindow", 8}};
  r.totals.steps = 10 * static_cast<std::int64_t>(heads);
  r.totals.evicted = 3;
  r.metrics = {0.5, 0.25, 4};
  r.heads = heads;
  if (heads > 1) {
    for (std::uint64_t h = 0; h < heads; ++h) r.head_metrics.push_back({0.125 * static_cast<double>(h), 1.0, 2});
  }
  r.memory_bytes = 1024;
  r.seconds = 0.125;
  return r;
}

bool has_type(const Json& v, FieldType type) {
  switch (type) {
    case FieldType::kString: return v.is_string();
    case FieldType::kInteger: return v.is_number_integer();
    case FieldType::kNumber: return v.is_number_float();
    case FieldType::kObject: return v.is_object();
    case FieldType::kArray: return v.is_array();
    case FieldType::kBoolean: return v.is_boolean();
  }
  return false;
}

// Every key of `object`, in order, is the next schema field present for a
// row of `heads` heads, of its declared type; members recursively.
void expect_matches(const Json& object, std::span<const FieldInfo> fields, std::uint64_t heads,
                    const std::string& where) {
  std::vector<std::string> expected;
  for (const FieldInfo& f : fields) {
    if (f.present_when.empty() || heads > 1) expected.emplace_back(f.name);
  }
  std::vector<std::string> keys;
  for (const auto& [k, v] : object.items()) keys.push_back(k);
  ASSERT_EQ(keys, expected) << where;
  for (const FieldInfo& f : fields) {
    if (!object.contains(std::string(f.name))) continue;
    const Json& v = object.at(std::string(f.name));
    EXPECT_TRUE(has_type(v, f.type)) << where << "." << f.name << " is " << v.type_name() << ", declared "
                                     << field_type_name(f.type);
    if (f.type == FieldType::kObject && !f.fields.empty()) expect_matches(v, f.fields, heads, where + "." + std::string(f.name));
    if (f.type == FieldType::kArray && !f.fields.empty()) {
      for (const Json& e : v) expect_matches(e, f.fields, heads, where + "." + std::string(f.name) + "[]");
    }
  }
}

TEST(RowSchema, RunJsonHasTheSchemaKeysInOrderOneHead) {
  expect_matches(Json::parse(run_json(hand_row(1))), run_row_schema(), 1, "row");
}

TEST(RowSchema, RunJsonHasTheSchemaKeysInOrderSeveralHeads) {
  const Json row = Json::parse(run_json(hand_row(3)));
  expect_matches(row, run_row_schema(), 3, "row");
  EXPECT_EQ(row.at("perHead").size(), 3U);
}

TEST(RowSchema, CompareDocumentFollowsTheSchema) {
  CompareRequest request;
  request.policies = {"h2o", "tova"};
  request.budgets = {128, 256};
  EvaluateOptions options;
  options.steps = 300;
  const Json doc = Json::parse(rows_json(compare(request, options), "compare"));
  // The envelope, then compare's one member of its own.
  std::vector<std::string> keys;
  for (const auto& [k, v] : doc.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"command", "model", "rows", "trace"}));
  EXPECT_EQ(doc.at("command"), "compare");
  EXPECT_TRUE(doc.at("model").is_null());
  EXPECT_EQ(doc.at("trace"), "decode-4096");
  ASSERT_EQ(doc.at("rows").size(), 4U);
  for (const Json& row : doc.at("rows")) expect_matches(row, run_row_schema(), 1, "compare row");
  // No rows: the trace is "" and rows is empty, still in envelope order.
  const Json empty = Json::parse(rows_json({}, "sweep"));
  EXPECT_EQ(empty.at("command"), "sweep");
  EXPECT_EQ(empty.at("rows"), Json::array());
  EXPECT_EQ(empty.at("trace"), "");
}

// The exact text the hand-written writer produced before the schema existed.
TEST(RowSchema, RunJsonTextIsUnchanged) {
  EXPECT_EQ(run_json(hand_row(1), -1),
            R"({"policy":"h2o","trace":"t","budget":128,"params":{"budget":128,"recentWindow":8},"steps":10,)"
            R"("metrics":{"retainedAttentionMass":0.5,"heavyHitterRecall":0.25,"evictionCalls":4},)"
            R"("evicted":3,"memoryBytes":1024,"seconds":0.125})");
  EXPECT_EQ(run_json(hand_row(2), -1),
            R"({"policy":"h2o","trace":"t","budget":128,"params":{"budget":128,"recentWindow":8},"steps":10,)"
            R"("metrics":{"retainedAttentionMass":0.5,"heavyHitterRecall":0.25,"evictionCalls":4},)"
            R"("evicted":3,"memoryBytes":1024,"seconds":0.125,"heads":2,"perHead":[)"
            R"({"retainedAttentionMass":0.0,"heavyHitterRecall":1.0,"evictionCalls":2},)"
            R"({"retainedAttentionMass":0.125,"heavyHitterRecall":1.0,"evictionCalls":2}]})");
  EXPECT_EQ(rows_json({}, "compare", -1), R"({"command":"compare","model":null,"rows":[],"trace":""})");
}

// The schema's entry for `command` (and `variant`), or null.
Json schema_entry(const Json& schema, const std::string& command, const std::string& variant = "") {
  for (const Json& row : schema.at("rows")) {
    if (row.at("command") == command && row.at("variant") == variant) return row;
  }
  return Json();
}

TEST(RowSchema, SchemaJsonDescribesEveryField) {
  const Json schema = Json::parse(schema_json(eval_command_schemas()));
  EXPECT_EQ(schema.at("command"), "schema");
  EXPECT_TRUE(schema.at("model").is_null());
  const Json run = schema_entry(schema, "run");
  ASSERT_FALSE(run.is_null());
  ASSERT_EQ(run.at("rows").size(), run_row_schema().size());
  std::size_t i = 0;
  for (const FieldInfo& f : run_row_schema()) {
    const Json& d = run.at("rows").at(i++);
    EXPECT_EQ(d.at("name"), std::string(f.name));
    EXPECT_EQ(d.at("type"), std::string(field_type_name(f.type)));
    EXPECT_FALSE(d.at("description").get<std::string>().empty()) << f.name;
  }
  EXPECT_EQ(schema_entry(schema, "compare").at("rows"), run.at("rows"));
  EXPECT_EQ(schema_entry(schema, "compare").at("extra").at(0).at("name"), "trace");
  // The envelope: command, model, rows, in that order.
  std::vector<std::string> names;
  for (const Json& f : schema.at("envelope")) names.push_back(f.at("name"));
  EXPECT_EQ(names, (std::vector<std::string>{"command", "model", "rows"}));
}

// ---- the perplexity row (kvevict/model/evaluation/perplexity_rows.h) ----

PerplexityRow perplexity_row(bool full) {
  PerplexityRow r;
  if (!full) {
    r.policy = "tova";
    r.budget = 64;
    r.params = {{"budget", 64}};
    r.proxy = {0.75, 0.5, 9};
    r.has_proxy = true;
    r.rank = 2;
    r.extra_bits_per_byte = 0.25;
    r.extra_low = 0.125;
    r.extra_high = 0.375;
    r.has_extra_interval = true;
  }
  r.perplexity = 4.0;
  r.bits_per_byte = 2.0;
  r.predictions = 1000;
  r.predicted_bytes = 4000;
  r.tokenizer = "bytes";
  r.evicted = full ? 0 : 17;
  r.seconds = 0.5;
  return r;
}

std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : object.items()) keys.push_back(k);
  return keys;
}

// Every key is a schema field, in schema order, of its declared type or null.
void expect_in_schema_order(const Json& object, const std::string& where) {
  std::size_t next = 0;
  const auto schema = perplexity_row_schema();
  for (const auto& [k, v] : object.items()) {
    while (next < schema.size() && schema[next].name != k) ++next;
    ASSERT_LT(next, schema.size()) << where << ": " << k << " is not in the schema, or out of order";
    EXPECT_TRUE(v.is_null() || has_type(v, schema[next].type))
        << where << "." << k << " is " << v.type_name() << ", declared " << field_type_name(schema[next].type);
    ++next;
  }
}

const JsonSource kSource{"perplexity", "m.kvm"};

// The rows of perplexity_json's envelope.
Json ppl_rows(const std::vector<PerplexityRow>& rows) { return Json::parse(perplexity_json(rows, kSource)).at("rows"); }

TEST(PerplexityRowSchema, PerplexityRowsHaveTheirFieldsAndNoOthers) {
  const Json rows = ppl_rows({perplexity_row(true), perplexity_row(false)});
  ASSERT_EQ(rows.size(), 2U);
  const std::vector<std::string> plain{"policy", "budget", "params", "perplexity", "bitsPerByte", "extraBitsPerByte", "extraLow", "extraHigh",
                                       "predictions", "predictedBytes", "tokenizer", "evicted", "kvPrecision", "kvResidual", "bytesPerPosition", "modelBytesPerPosition",
                                       "peakCacheBytes", "seconds"};
  EXPECT_EQ(keys_of(rows[0]), plain);
  EXPECT_EQ(keys_of(rows[1]), plain);
  EXPECT_TRUE(rows[0].at("policy").is_null());
  EXPECT_TRUE(rows[0].at("budget").is_null());
  EXPECT_EQ(rows[0].at("params"), Json::object());
  EXPECT_EQ(rows[1].at("policy"), "tova");
  EXPECT_EQ(rows[1].at("budget"), 64);
  for (const char* key : {"extraBitsPerByte", "extraLow", "extraHigh"}) EXPECT_TRUE(rows[0].at(key).is_null()) << key;
  EXPECT_EQ(rows[1].at("extraBitsPerByte"), 0.25);
  EXPECT_EQ(rows[1].at("extraLow"), 0.125);
  EXPECT_EQ(rows[1].at("extraHigh"), 0.375);
  for (const Json& row : rows) expect_in_schema_order(row, "perplexity");
}

TEST(PerplexityRowSchema, OneWindowGivesTheExtraCostWithoutAnInterval) {
  PerplexityRow one = perplexity_row(false);
  one.has_extra_interval = false;
  const Json row = ppl_rows({one}).at(0);
  EXPECT_EQ(row.at("extraBitsPerByte"), 0.25);
  EXPECT_TRUE(row.at("extraLow").is_null());
  EXPECT_TRUE(row.at("extraHigh").is_null());
}

TEST(PerplexityRowSchema, CompareRowsAreRankedWithProxiesNullForTheFullCache) {
  std::vector<PerplexityRow> rows{perplexity_row(true), perplexity_row(false)};
  for (PerplexityRow& r : rows) r.ranked = r.proxied = true;
  const Json doc = ppl_rows(rows);
  const std::vector<std::string> ranked{"rank", "policy", "budget", "params", "perplexity", "bitsPerByte", "extraBitsPerByte", "extraLow", "extraHigh",
                                        "predictions", "predictedBytes", "tokenizer", "evicted", "retainedAttentionMass", "heavyHitterRecall",
                                        "evictionCalls", "kvPrecision", "kvResidual", "bytesPerPosition", "modelBytesPerPosition",
                                        "peakCacheBytes", "seconds"};
  EXPECT_EQ(keys_of(doc[0]), ranked);
  EXPECT_EQ(keys_of(doc[1]), ranked);
  for (const char* key : {"rank", "retainedAttentionMass", "heavyHitterRecall", "evictionCalls"}) {
    EXPECT_TRUE(doc[0].at(key).is_null()) << key;
  }
  EXPECT_EQ(doc[1].at("rank"), 2);
  EXPECT_EQ(doc[1].at("retainedAttentionMass"), 0.75);
  EXPECT_EQ(doc[1].at("heavyHitterRecall"), 0.5);
  EXPECT_EQ(doc[1].at("evictionCalls"), 9);
  for (const Json& row : doc) expect_in_schema_order(row, "compare");
}

TEST(PerplexityRowSchema, StoreAndPrefillFieldsAppearOnlyWhenMeasured) {
  PerplexityRow layer = perplexity_row(false);  // layer mode: positions, no blocks
  layer.store_measured = true;
  layer.peak_positions = 512;
  PerplexityRow blocks = layer;  // block mode: blocks too
  blocks.block_size = 16;
  blocks.peak_blocks = 40;
  PerplexityRow prefill = perplexity_row(false);  // ranked, a prefill: no proxy fields
  prefill.ranked = true;
  prefill.prefill = 768;
  const Json doc = ppl_rows({layer, blocks, prefill});
  EXPECT_EQ(keys_of(doc[0]), (std::vector<std::string>{"policy", "budget", "params", "perplexity", "bitsPerByte", "extraBitsPerByte", "extraLow", "extraHigh",
                                                        "predictions", "predictedBytes", "tokenizer", "evicted", "peakPositions", "kvPrecision",
                                                        "kvResidual", "bytesPerPosition", "modelBytesPerPosition", "peakCacheBytes", "seconds"}));
  EXPECT_EQ(doc[1].at("blockSize"), 16);
  EXPECT_EQ(doc[1].at("peakBlocks"), 40);
  EXPECT_EQ(doc[1].at("peakPositions"), 512);
  EXPECT_EQ(keys_of(doc[2]), (std::vector<std::string>{"rank", "policy", "budget", "params", "prefill", "perplexity",
                                                        "bitsPerByte", "extraBitsPerByte", "extraLow", "extraHigh", "predictions", "predictedBytes", "tokenizer", "evicted",
                                                        "kvPrecision", "kvResidual", "bytesPerPosition", "modelBytesPerPosition", "peakCacheBytes", "seconds"}));
  EXPECT_EQ(doc[2].at("prefill"), 768);
  for (const Json& row : doc) expect_in_schema_order(row, "store/prefill");
}

TEST(PerplexityRowSchema, AQuantizedStoresFullCacheHasItsExtraCostAndMemoryRowsTheirBudget) {
  PerplexityRow reference = perplexity_row(true);
  PerplexityRow int4 = perplexity_row(true);  // the full cache at int4: what the bits alone cost
  int4.kv_precision = "int4";
  int4.kv_residual = 32;
  int4.bytes_per_position = 52.0;
  int4.peak_cache_bytes = 59520;
  int4.extra_bits_per_byte = 0.001;
  PerplexityRow fitted = perplexity_row(false);
  fitted.memory_bytes = 16384;
  const Json doc = ppl_rows({reference, int4, fitted});
  EXPECT_TRUE(doc[0].at("extraBitsPerByte").is_null());
  EXPECT_EQ(doc[0].at("kvPrecision"), "fp32");
  EXPECT_EQ(doc[1].at("extraBitsPerByte"), 0.001);
  EXPECT_EQ(doc[1].at("kvResidual"), 32);
  EXPECT_EQ(doc[1].at("bytesPerPosition"), 52.0);
  EXPECT_EQ(doc[1].at("peakCacheBytes"), 59520);
  EXPECT_FALSE(doc[1].contains("kvMemory"));
  EXPECT_EQ(doc[2].at("kvMemory"), 16384);
  for (const Json& row : doc) expect_in_schema_order(row, "kv");
}

// The exact text, so a change to the description shows up as a change here.
TEST(PerplexityRowSchema, JsonTextIsPinned) {
  EXPECT_EQ(perplexity_json({perplexity_row(true), perplexity_row(false)}, kSource, -1),
            R"({"command":"perplexity","model":"m.kvm","rows":[{"policy":null,"budget":null,"params":{},"perplexity":4.0,"bitsPerByte":2.0,"extraBitsPerByte":null,)"
            R"("extraLow":null,"extraHigh":null,"predictions":1000,"predictedBytes":4000,"tokenizer":"bytes","evicted":0,"kvPrecision":"fp32","kvResidual":0,)"
            R"("bytesPerPosition":0.0,"modelBytesPerPosition":0.0,"peakCacheBytes":0,"seconds":0.5},)"
            R"({"policy":"tova","budget":64,"params":{"budget":64},"perplexity":4.0,"bitsPerByte":2.0,)"
            R"("extraBitsPerByte":0.25,"extraLow":0.125,"extraHigh":0.375,"predictions":1000,"predictedBytes":4000,"tokenizer":"bytes","evicted":17,)"
            R"("kvPrecision":"fp32","kvResidual":0,"bytesPerPosition":0.0,"modelBytesPerPosition":0.0,"peakCacheBytes":0,"seconds":0.5}]})");
  EXPECT_EQ(perplexity_json({}, {"compare", std::nullopt}, -1), R"({"command":"compare","model":null,"rows":[]})");
}

TEST(PerplexityRowSchema, ExportedBesideTheRunRow) {
  const Json schema = Json::parse(result_schema_json());
  // Every command with JSON, in --help's order, a variant where a flag changes the rows.
  std::vector<std::string> names;
  for (const Json& row : schema.at("rows")) {
    const std::string variant = row.at("variant");
    names.push_back(row.at("command").get<std::string>() + (variant.empty() ? "" : " " + variant));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"list", "run", "compare", "compare --model", "perplexity", "stream",
                                             "stream --sinks", "serve-bench", "tasks", "choose", "persistence",
                                             "persistence --model", "sweep", "sweep --model", "bench",
                                             "bench --model", "simd", "schema", "llama perplexity", "llama stream"}));
  for (const char* command : {"perplexity", "compare"}) {
    const Json ppl = schema_entry(schema, command, command == std::string("compare") ? "--model" : "");
    ASSERT_EQ(ppl.at("rows").size(), perplexity_row_schema().size()) << command;
    EXPECT_EQ(ppl.at("model"), "path");
    std::size_t i = 0;
    for (const FieldInfo& f : perplexity_row_schema()) {
      const Json& d = ppl.at("rows").at(i++);
      EXPECT_EQ(d.at("name"), std::string(f.name));
      EXPECT_FALSE(d.at("description").get<std::string>().empty()) << f.name;
    }
  }
  EXPECT_EQ(schema_entry(schema, "run"), schema_entry(Json::parse(schema_json(eval_command_schemas())), "run"));
  // The serve-bench row (kvevict/model/serving/serve_bench.h): every field named and described.
  const Json serve = schema_entry(schema, "serve-bench");
  ASSERT_EQ(serve.at("rows").size(), serve_row_schema().size());
  std::size_t i = 0;
  for (const FieldInfo& f : serve_row_schema()) {
    const Json& d = serve.at("rows").at(i++);
    EXPECT_EQ(d.at("name"), std::string(f.name));
    EXPECT_FALSE(d.at("description").get<std::string>().empty()) << f.name;
  }
  // Every field of every command described, however deep.
  const std::function<void(const Json&, const std::string&)> described = [&](const Json& fields, const std::string& where) {
    for (const Json& f : fields) {
      EXPECT_FALSE(f.at("description").get<std::string>().empty()) << where << "." << f.at("name");
      if (f.contains("fields")) described(f.at("fields"), where + "." + f.at("name").get<std::string>());
    }
  };
  for (const Json& row : schema.at("rows")) {
    described(row.at("rows"), row.at("command"));
    described(row.at("extra"), row.at("command"));
  }
}

}  // namespace
}  // namespace kvevict
