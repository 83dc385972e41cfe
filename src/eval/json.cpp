#include "kvevict/eval/json.h"

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvevict/eval/row_schema.h"

namespace kvevict {

namespace {
// Builds the JSON document from the row schema's walk (row_schema.h): the
// keys, their order and presence all come from there. Containers are built on
// a stack by value and moved into their parent when they close.
class JsonBuilder final : public RowVisitor {
 public:
  nlohmann::ordered_json take() { return std::move(stack_.front()); }

  void string(const FieldInfo& f, const std::string& value) override { put(f, value); }
  void integer(const FieldInfo& f, std::int64_t value) override { put(f, value); }
  void number(const FieldInfo& f, double value) override { put(f, value); }
  void null(const FieldInfo& f) override { put(f, nullptr); }
  void params(const FieldInfo& f, const ParamMap& params) override {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (const auto& [k, v] : params) object[k] = v;
    put(f, std::move(object));
  }
  void begin(const FieldInfo& f) override {
    stack_.push_back(f.type == FieldType::kArray ? nlohmann::ordered_json::array()
                                                 : nlohmann::ordered_json::object());
  }
  void end(const FieldInfo& f) override { put(f, pop()); }
  void begin_element() override { stack_.push_back(nlohmann::ordered_json::object()); }
  void end_element() override {
    nlohmann::ordered_json element = pop();
    stack_.back().push_back(std::move(element));
  }

 private:
  void put(const FieldInfo& f, nlohmann::ordered_json value) {
    stack_.back()[std::string(f.name)] = std::move(value);
  }
  nlohmann::ordered_json pop() {
    nlohmann::ordered_json top = std::move(stack_.back());
    stack_.pop_back();
    return top;
  }
  std::vector<nlohmann::ordered_json> stack_{nlohmann::ordered_json::object()};
};
}  // namespace

std::string run_json(const RunRow& row, int indent) {
  JsonBuilder builder;
  for_each_field(row, builder);
  return builder.take().dump(indent);
}

std::string rows_json(const std::vector<RunRow>& rows, int indent) {
  JsonBuilder builder;
  for_each_field(rows, builder);
  return builder.take().dump(indent);
}

std::string objects_json(std::size_t count, const std::function<void(std::size_t, RowVisitor&)>& walk,
                         int indent) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < count; ++i) {
    JsonBuilder builder;
    walk(i, builder);
    out.push_back(builder.take());
  }
  return out.dump(indent);
}

}  // namespace kvevict
