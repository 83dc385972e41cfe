// kvevict-llama -- a kvevict policy keeping llama.cpp's KV cache
// (docs/llama-cpp.md). Parsing and dispatch; each subcommand is a file
// (perplexity.cpp, stream.cpp) and the adapter is the library's
// (kvevict/llama/llama_policy.h).
//
//   kvevict-llama perplexity --model F.gguf --text T [--policy P --budget B]
//   kvevict-llama stream     --model F.gguf --text T [--policy P --budget B,...] [--context-shift K]
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"

namespace {

using namespace kvevict::llama_tool;

// The flags every subcommand takes about llama.cpp itself.
void add_engine_options(CLI::App* cmd, EngineArgs& e) {
  cmd->add_option("--model", e.model, "a GGUF file llama.cpp loads")->required();
  cmd->add_option("--threads", e.threads, "llama.cpp's threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--kv-precision", e.kv, "llama.cpp's cache: fp32 (F32) or fp16 (F16, llama.cpp's default)")
      ->capture_default_str();
  cmd->add_flag("--flash-attn", e.flash, "flash attention on (the attention-weight policies then cannot run)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("kvevict-llama: a kvevict policy keeping llama.cpp's KV cache, one set of positions for every layer "
               "and KV head of a sequence (docs/llama-cpp.md)");
  app.require_subcommand(1);
  PerplexityArgs p;
  auto* ppl = app.add_subcommand("perplexity", "Bits per byte of a text read by llama.cpp, with the full cache and "
                                               "with a policy holding the sequence at a budget");
  add_engine_options(ppl, p.engine);
  ppl->add_option("--text", p.text, "the text to score (kvevict's tokenizer and windows, as kvevict perplexity)")
      ->required();
  ppl->add_option("--policy", p.policy, "policy names, comma-separated (default: the full cache only)");
  ppl->add_option("--budget", p.budget, "positions the sequence holds")->capture_default_str();
  ppl->add_option("--set", p.sets, "KEY=VALUE, for every policy that has KEY (repeatable)");
  ppl->add_option("--context", p.context, "positions a window (default: the model's context, at most 4096)");
  ppl->add_option("--max-windows", p.max_windows, "use only the first N windows (0 = all)");
  ppl->add_flag("--timing", p.timing,
                "markdown: add decode tokens/s and the shares of each run's time the policy and the eval callback's "
                "copies took");
  ppl->add_option("--format", p.format, "table, markdown or json")
      ->check(CLI::IsMember({"table", "markdown", "json"}))
      ->capture_default_str();

  StreamArgs s;
  auto* str = app.add_subcommand(
      "stream", "A long text read as one sequence by llama.cpp, past the context, with each policy holding the "
                "sequence at its budget -- and llama.cpp's own context shift beside them: bits per byte by segment, "
                "the same rows as kvevict stream");
  add_engine_options(str, s.engine);
  str->add_option("--text", s.text, "the text to stream (kvevict's tokenizer, BOS first where the vocabulary adds one)")
      ->required();
  str->add_option("--policy", s.policy,
                  "NAME or NAME:KEY=VALUE[:KEY=VALUE], comma-separated; default: as kvevict stream's (sliding-window, "
                  "streaming-llm:sinks=1, streaming-llm:sinks=4, h2o, tova, scissorhands, snapkv); none: no policy")
      ->capture_default_str();
  str->add_option("--budget", s.budgets, "positions the sequence holds, comma-separated")->capture_default_str();
  str->add_option("--set", s.sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  str->add_option("--positions", s.positions,
                  "where kept keys sit in rotary space, comma-separated: original (their tokens' positions) or cache "
                  "(their index among the positions held: survivors shifted with llama_memory_seq_add)")
      ->capture_default_str();
  str->add_option("--context-shift", s.context_shift,
                  "also llama.cpp's own context shift at each budget, keeping the first KEEP positions "
                  "(comma-separated KEEP values; cache positions)");
  str->add_option("--context", s.context,
                  "the model's context: the full cache's length and the default segment (default: the model's "
                  "trained context, at most 4096)");
  str->add_option("--tokens", s.tokens, "tokens of the stream, BOS included (0 = the whole text)");
  str->add_option("--segment", s.segment, "tokens a segment of the report (0 = the context)");
  str->add_flag("--no-full-cache", s.no_full_cache, "leave out the full cache (which stops at the context)");
  str->add_option("--format", s.format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "kvevict-llama: error: " << e.what() << " (kvevict-llama --help)\n";
    return 2;
  }
  try {
    return ppl->parsed() ? perplexity(p) : stream(s);
  } catch (const std::exception& e) {
    std::cerr << "kvevict-llama: error: " << e.what() << "\n";
    return 1;
  }
}
