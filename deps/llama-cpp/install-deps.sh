#!/usr/bin/env bash
# Installs llama.cpp as a test dependency, from npm, nothing downloaded from
# elsewhere and nothing compiled: node-llama-cpp 3.21.1 (its llama/ folder holds
# gitRelease.bundle, a git bundle of the llama.cpp source the binaries were
# built from: the headers) and @node-llama-cpp/linux-x64 3.21.1 (the CPU build:
# libllama, libggml, libggml-base and one CPU backend per microarchitecture),
# into deps/llama-cpp/node_modules exactly as package-lock.json pins them
# (scripts/npm-ci.sh).
#
# --omit=optional leaves out node-llama-cpp's other prebuilt packages (CUDA,
# Vulkan, ARM: about 650 MB, not needed); NODE_LLAMA_CPP_SKIP_DOWNLOAD keeps
# node-llama-cpp from fetching or building llama.cpp should its install script
# ever run (npm-ci.sh passes --ignore-scripts, so it does not).
#
# scripts/install-deps.sh runs this in its test mode; CMake's KVEVICT_LLAMA_CPP
# component (cmake/LlamaCpp.cmake) finds what it installs, and ctest
# llama_cpp_agreement, which scripts/test-all.sh requires, uses it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
exec bash "$here/../../scripts/npm-ci.sh" "$here" kvevict-llama-cpp \
  "llama.cpp's prebuilt CPU libraries and source bundle (node-llama-cpp)" --omit=optional
