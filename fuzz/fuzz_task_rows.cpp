// libFuzzer target: bytes as a task-row document (`kvevict report --tasks
// FILE`, kvevict tasks --format json). The reader may refuse anything with
// InputError and nothing else; rows it accepts are in range (correct <=
// samples, a depth in 0 ... 1, the full cache at budget 0 and a policy at
// 1 or more) and render to the report's charts and the markdown table with
// no NaN or infinite coordinate.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvevict/core/errors.h"
#include "kvevict/eval/task_rows.h"
#include "kvevict/report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<kvevict::TaskRow> rows;
  try {
    rows = kvevict::read_task_rows(text, "fuzz.json");
  } catch (const kvevict::InputError&) {
    return 0;
  }
  for (const kvevict::TaskRow& r : rows) {
    if (r.samples == 0 || r.correct > r.samples) __builtin_trap();
    if (!(r.depth >= 0.0 && r.depth <= 1.0)) __builtin_trap();
    if (r.policy.empty() != (r.budget == 0) || r.budget < 0) __builtin_trap();
    if (!(r.low >= 0.0 && r.low <= r.accuracy && r.accuracy <= r.high && r.high <= 1.0)) __builtin_trap();
  }
  const std::string table = kvevict::tasks_markdown(rows);
  if (table.find("nan") != std::string::npos || table.find("inf") != std::string::npos) __builtin_trap();
  for (const kvevict::Chart& chart : kvevict::render_task_charts(rows, true)) {
    if (chart.svg.find("nan") != std::string::npos || chart.svg.find("inf") != std::string::npos) __builtin_trap();
  }
  return 0;
}
