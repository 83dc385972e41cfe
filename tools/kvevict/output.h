// Printing for the command-line tool: tables, JSON, CSV and Markdown of the
// library's results. No logic beyond formatting lives here.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/eval/bench.h"
#include "kvevict/model/serving/decode_bench.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/json.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/eval/persistence.h"
#include "kvevict/model/serving/serve_bench.h"
#include "kvevict/model/evaluation/stream.h"

namespace kvevict::cli {

// CSV for a machine (--format csv), from the JSON text the same command prints
// with --format json, so both carry the same values: a header line, then a
// line a row, one value a cell. A column per scalar field, named by its JSON
// key, an object's members as KEY.MEMBER (params.recentWindow,
// metrics.retainedAttentionMass); numbers exactly as the JSON has them; an
// empty cell where the JSON has null or leaves the field out; RFC 4180
// quoting. Arrays stay in the JSON, except `expand`: a line per element of
// that array (stream's segments), its members as EXPAND.MEMBER. `json`: the
// command's envelope (kvevict/eval/json.h), a line per element of its "rows";
// the members after rows (compare's trace, choose's plan) stay in the JSON.
void print_csv(std::ostream& out, std::string_view json, std::string_view expand = {});

// A single run as aligned "key  value" lines.
void print_run_table(std::ostream& out, const RunRow& row);

// Rows as a table ("table"), JSON ("json": rows_json, the envelope with
// `command`), CSV ("csv": that JSON's rows, print_csv) or Markdown
// ("markdown"). Ranked rows (from compare) get a rank column in the table and
// Markdown.
void print_rows(std::ostream& out, const std::vector<RunRow>& rows, const std::string& format,
                const std::string& command, bool ranked, const std::vector<std::string>& extra_param_columns = {});

// The bench report as a table, Markdown or JSON; bench --model's rows also as
// CSV.
void print_bench(std::ostream& out, const BenchReport& report, const std::string& format);
void print_decode_bench(std::ostream& out, const std::vector<DecodeBenchRow>& rows, const std::string& format,
                        const JsonSource& source);
void print_simd(std::ostream& out, const std::vector<std::string>& compiled, const std::vector<std::string>& supported,
                const std::string& active, const std::string& format);

// Perplexity rows (the full cache first) as a table, CSV, Markdown or JSON
// (the JSON from the row's one description, kvevict/model/evaluation/perplexity_rows.h;
// the CSV from that JSON, print_csv).
// Ranked rows (compare) add the rank column; rows with proxies add their two
// columns; rows of a paged store add the peak blocks in use, and a measured
// store (block or layer mode) the peak positions held.
// `extra`: parameters to show in a column each after the budget (a sweep's);
// the CSV has every parameter as params.KEY.
// `source`: the JSON envelope's command and model (kvevict/eval/json.h).
void print_perplexity(std::ostream& out, const std::vector<PerplexityRow>& rows, const std::string& format,
                      const JsonSource& source, const std::vector<std::string>& extra = {});

// Persistence rows as a table, CSV, Markdown or JSON.
void print_persistence(std::ostream& out, const std::vector<PersistenceRow>& rows, const std::string& format,
                       const JsonSource& source);

// serve-bench rows as a table, CSV, Markdown or JSON (the JSON from the
// row's one description, kvevict/model/serving/serve_bench.h).
void print_serve(std::ostream& out, const std::vector<ServeRow>& rows, const std::string& format,
                 const JsonSource& source);

// Stream rows: a table or Markdown of bits per byte over spans of the stream
// that double (the first segment, the second, the next two, four, ...), the
// whole run, and the most positions a cache held; JSON every segment
// (stream_json); CSV that JSON, a line per row and segment (print_csv).
void print_stream(std::ostream& out, const std::vector<StreamRow>& rows, const std::string& format,
                  const JsonSource& source);
// The stream's bits per byte by segment against the position, one line a row
// (original positions dashed), the model's context marked: a standalone SVG.
std::string stream_chart_svg(const std::vector<StreamRow>& rows, std::uint32_t context, const std::string& model);
// The attention-sink shares by layer, the same formats.
void print_sinks(std::ostream& out, const std::vector<SinkShare>& shares, const std::string& format,
                 const JsonSource& source);

// Plain aligned text table; the first row is the header.
void print_aligned(std::ostream& out, const std::vector<std::vector<std::string>>& cells);

}  // namespace kvevict::cli
