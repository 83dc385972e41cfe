// kvevict-llama's subcommands: each one's arguments and its run (printing to
// stdout; refusals thrown as kvevict's errors, main.cpp prints them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace kvevict::llama_tool {

struct PerplexityArgs {
  EngineArgs engine;
  std::string text, policy, format = "table";
  std::int64_t budget = 256;
  std::vector<std::string> sets;
  std::uint32_t context = 0, max_windows = 0;
  bool timing = false;
};
int perplexity(const PerplexityArgs& a);

struct StreamArgs {
  EngineArgs engine;
  std::string text, policy = "default", positions = "original,cache", format = "table";
  std::string budgets = "256,512";
  std::string context_shift;  // KEEP values: llama.cpp's own context shift rows
  std::vector<std::string> sets;
  std::uint32_t context = 0, tokens = 0, segment = 0;
  bool no_full_cache = false;
};
int stream(const StreamArgs& a);

}  // namespace kvevict::llama_tool
