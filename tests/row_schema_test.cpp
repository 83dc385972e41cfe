// The row schema (kvevict/eval/row_schema.h) is what run_json/rows_json emit: the
// same keys in the same order, of the declared types, with the heads-only
// fields exactly when the trace has more than one head. And run_json's text
// is pinned byte for byte, so moving the writer onto the schema (or editing
// the schema) cannot change the tool's output unnoticed.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/row_schema.h"
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
    if (f.type == FieldType::kArray) {
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
  const Json doc = Json::parse(rows_json(compare(request, options)));
  expect_matches(doc, compare_schema(), 1, "compare");
  EXPECT_EQ(doc.at("rows").size(), 4U);
  // No rows: the trace is "" and rows is empty, still in schema order.
  expect_matches(Json::parse(rows_json({})), compare_schema(), 1, "empty");
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
  EXPECT_EQ(rows_json({}, -1), R"({"trace":"","rows":[]})");
}

TEST(RowSchema, SchemaJsonDescribesEveryField) {
  const Json schema = Json::parse(schema_json());
  ASSERT_TRUE(schema.contains("run"));
  ASSERT_EQ(schema.at("run").size(), run_row_schema().size());
  std::size_t i = 0;
  for (const FieldInfo& f : run_row_schema()) {
    const Json& d = schema.at("run").at(i++);
    EXPECT_EQ(d.at("name"), std::string(f.name));
    EXPECT_EQ(d.at("type"), std::string(field_type_name(f.type)));
    EXPECT_FALSE(d.at("description").get<std::string>().empty()) << f.name;
  }
  EXPECT_EQ(schema.at("compare").at(1).at("fields"), schema.at("run"));
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

TEST(PerplexityRowSchema, PerplexityRowsHaveTheirFieldsAndNoOthers) {
  const Json rows = Json::parse(perplexity_json({perplexity_row(true), perplexity_row(false)}));
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
  const Json row = Json::parse(perplexity_json({one})).at(0);
  EXPECT_EQ(row.at("extraBitsPerByte"), 0.25);
  EXPECT_TRUE(row.at("extraLow").is_null());
  EXPECT_TRUE(row.at("extraHigh").is_null());
}

TEST(PerplexityRowSchema, CompareRowsAreRankedWithProxiesNullForTheFullCache) {
  std::vector<PerplexityRow> rows{perplexity_row(true), perplexity_row(false)};
  for (PerplexityRow& r : rows) r.ranked = r.proxied = true;
  const Json doc = Json::parse(perplexity_json(rows));
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
  const Json doc = Json::parse(perplexity_json({layer, blocks, prefill}));
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
  const Json doc = Json::parse(perplexity_json({reference, int4, fitted}));
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
  EXPECT_EQ(perplexity_json({perplexity_row(true), perplexity_row(false)}, -1),
            R"([{"policy":null,"budget":null,"params":{},"perplexity":4.0,"bitsPerByte":2.0,"extraBitsPerByte":null,)"
            R"("extraLow":null,"extraHigh":null,"predictions":1000,"predictedBytes":4000,"tokenizer":"bytes","evicted":0,"kvPrecision":"fp32","kvResidual":0,)"
            R"("bytesPerPosition":0.0,"modelBytesPerPosition":0.0,"peakCacheBytes":0,"seconds":0.5},)"
            R"({"policy":"tova","budget":64,"params":{"budget":64},"perplexity":4.0,"bitsPerByte":2.0,)"
            R"("extraBitsPerByte":0.25,"extraLow":0.125,"extraHigh":0.375,"predictions":1000,"predictedBytes":4000,"tokenizer":"bytes","evicted":17,)"
            R"("kvPrecision":"fp32","kvResidual":0,"bytesPerPosition":0.0,"modelBytesPerPosition":0.0,"peakCacheBytes":0,"seconds":0.5}])");
  EXPECT_EQ(perplexity_json({}, -1), "[]");
}

TEST(PerplexityRowSchema, ExportedBesideTheRunRow) {
  const Json schema = Json::parse(result_schema_json());
  ASSERT_EQ(keys_of(schema), (std::vector<std::string>{"run", "compare", "perplexity", "serve"}));
  ASSERT_EQ(schema.at("perplexity").size(), perplexity_row_schema().size());
  std::size_t i = 0;
  for (const FieldInfo& f : perplexity_row_schema()) {
    const Json& d = schema.at("perplexity").at(i++);
    EXPECT_EQ(d.at("name"), std::string(f.name));
    EXPECT_FALSE(d.at("description").get<std::string>().empty()) << f.name;
  }
  EXPECT_EQ(schema.at("run"), Json::parse(schema_json()).at("run"));
  // The serve-bench row (kvevict/model/serving/serve_bench.h): every field named and described.
  ASSERT_EQ(schema.at("serve").size(), serve_row_schema().size());
  i = 0;
  for (const FieldInfo& f : serve_row_schema()) {
    const Json& d = schema.at("serve").at(i++);
    EXPECT_EQ(d.at("name"), std::string(f.name));
    EXPECT_FALSE(d.at("description").get<std::string>().empty()) << f.name;
  }
}

}  // namespace
}  // namespace kvevict
