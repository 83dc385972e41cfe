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

}  // namespace
}  // namespace kvevict
