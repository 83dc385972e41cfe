// kvevict llama: a kvevict policy keeping llama.cpp's KV cache
// (docs/llama-cpp.md). The work is kvevict-llama's, a program built beside
// this tool only where npm's llama.cpp is installed (the tool itself never
// links llama.cpp, so `make run` does not need it): this command runs it
// with the arguments that follow, or says in one line how to get it.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "kvevict/core/errors.h"

namespace kvevict::cli {

namespace {

struct LlamaArgs {
  std::vector<std::string> rest;
};

int run_llama(const LlamaArgs& f) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path tool = (ec ? std::filesystem::path(".") : self.parent_path()) / "kvevict-llama";
  if (!std::filesystem::is_regular_file(tool)) {
    throw InputError(fmt::format("kvevict llama runs {}, which is built beside kvevict with the tests where npm's "
                                 "llama.cpp is installed (bash deps/llama-cpp/install-deps.sh, then cmake --preset "
                                 "release && cmake --build --preset release)",
                                 tool.string()));
  }
  std::vector<std::string> args{tool.string()};
  args.insert(args.end(), f.rest.begin(), f.rest.end());
  if (f.rest.empty()) args.emplace_back("--help");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(tool.c_str(), argv.data());
  throw InputError(fmt::format("kvevict llama: cannot run {}: {}", tool.string(), std::strerror(errno)));
}

}  // namespace

Command add_llama_command(CLI::App& app) {
  auto f = std::make_shared<LlamaArgs>();
  auto* cmd = app.add_subcommand("llama", "A policy keeping llama.cpp's own KV cache, one set of positions for every "
                                          "layer and KV head (kvevict-llama; kvevict llama perplexity --help)");
  cmd->prefix_command();
  return {cmd, [f, cmd] {
            f->rest = cmd->remaining();
            return run_llama(*f);
          }};
}

}  // namespace kvevict::cli
