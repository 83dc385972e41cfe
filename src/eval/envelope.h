// The envelope (kvevict/eval/json.h) as a JSON value, for the library's
// writers that build their rows with nlohmann: each adds its members after
// "rows" itself, so the first three are always command, model, rows.
#pragma once

#include <utility>

#include <nlohmann/json.hpp>

#include "kvevict/eval/json.h"

namespace kvevict::detail {

inline nlohmann::ordered_json envelope(const JsonSource& source, nlohmann::ordered_json rows) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["command"] = source.command;
  out["model"] = source.model ? nlohmann::ordered_json(*source.model) : nlohmann::ordered_json(nullptr);
  out["rows"] = std::move(rows);
  return out;
}

}  // namespace kvevict::detail
