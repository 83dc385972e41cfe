#!/usr/bin/env bash
# Installs the Debian 12 (bookworm) packages kvevict needs, only those missing.
# Run as root (or with sudo) on a fresh machine. When another apt is running
# (unattended upgrades) it waits its turn, up to 10 minutes, saying so every
# 30 s (KVEVICT_APT_LOCK_WAIT and KVEVICT_APT_LOCK_STEP, in seconds, change them).
#
#   install-deps.sh --run        what building and running the tool needs (make run)
#   install-deps.sh              that, and everything the tests need (make test):
#                                the test libraries, clang, Python, Chromium,
#                                Node; then the npm packages from their lock
#                                files: the Node binding's, the model tests'
#                                references and llama.cpp (deps/llama-cpp)
#   install-deps.sh --training   the full set and PyTorch (make model)
#   install-deps.sh --corpus     what --run needs and the model's corpus,
#                                linux-doc-6.1 (make heldout, make docs)
set -euo pipefail

mode=${1:-}
case $mode in
  ""|--run|--training|--corpus) ;;
  *) echo "usage: $0 [--run | --training | --corpus]" >&2; exit 2 ;;
esac

# Building the library and the tool with gcc (OpenMP is gcc's libgomp).
packages=(
  cmake ninja-build make g++ pkgconf
  libcli11-dev nlohmann-json3-dev libfmt-dev libeigen3-dev zlib1g-dev libhwy-dev libpcre2-dev
)

if [[ $mode != --run && $mode != --corpus ]]; then
  # The tests: C++ test libraries and benchmarks, clang (+ its OpenMP) for the
  # sanitizer and fuzz builds, the Python binding and its pytest suite, a venv
  # with setuptools and wheel for the `pip install ./bindings/python` test,
  # and Chromium for the HTML report's browser test.
  packages+=(
    clang libomp-dev
    libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
    pybind11-dev python3-dev python3-numpy python3-pytest
    python3-venv python3-pip python3-setuptools python3-wheel
    python3-dask python3-distributed
    chromium
    # the model tests' references (tests/model/): PyTorch for the forward pass
    # that checks kvevict's logits, SentencePiece for its tokenizer, regex for
    # model/bpe.py (kvevict-small's encoder: model_small_tokenizer, model_small_reference)
    python3-torch sentencepiece python3-sentencepiece python3-regex
  )
fi

# Training the real model (make model; never in CI): PyTorch from Debian, the
# threaded OpenBLAS it runs several times faster with, and the corpus.
if [[ $mode == --training ]]; then
  packages+=(python3-torch python3-regex libopenblas0-pthread linux-doc-6.1)
fi
# The corpus alone, for the docs' tables measured on the whole held-out split.
[[ $mode == --corpus ]] && packages+=(linux-doc-6.1)

# Node.js binding (not for --run): Debian's nodejs + npm + headers
# (libnode-dev), only when no node is installed (a NodeSource node ships its
# own npm and headers).
if [[ $mode == --run || $mode == --corpus ]]; then
  :
elif ! command -v node >/dev/null 2>&1; then
  packages+=(nodejs npm libnode-dev)
elif [[ ! -f /usr/include/node/node_api.h ]] && dpkg-query -W -f='${Version}' nodejs 2>/dev/null | grep -q dfsg; then
  packages+=(libnode-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# apt_get ARGS...: apt-get as root, waiting its turn when another apt (an
# unattended upgrade, a second install) holds the dpkg or package-list lock,
# instead of failing: up to KVEVICT_APT_LOCK_WAIT seconds (default 600), a
# line every KVEVICT_APT_LOCK_STEP seconds (default 30). apt itself waits on
# the dpkg lock (DPkg::Lock::Timeout, apt >= 1.9); a lock it does not wait on
# (the lists' lock apt-get update takes) is retried here after the rest of the
# step.
apt_get() {
  local limit=${KVEVICT_APT_LOCK_WAIT:-600} step=${KVEVICT_APT_LOCK_STEP:-30}
  local start=$SECONDS tried rc err
  err=$(mktemp)
  while true; do
    tried=$SECONDS
    rc=0
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$step" "$@" 2>"$err" || rc=$?
    if [[ $rc -eq 0 ]] || ! grep -q -e "Could not get lock" -e "Unable to acquire" -e "Unable to lock" "$err"; then
      cat "$err" >&2
      rm -f "$err"
      return "$rc"
    fi
    if (( SECONDS - start >= limit )); then
      echo "kvevict: error: another apt still holds its lock after ${limit} s ($(grep -m1 -e "Could not get lock" -e "Unable to" "$err")); run this again once it has finished" >&2
      rm -f "$err"
      return "$rc"
    fi
    echo "kvevict: waiting for another apt to finish: its lock is held ($((SECONDS - start)) s of at most ${limit} s)" >&2
    if (( SECONDS - tried < step )); then sleep $((step - (SECONDS - tried))); fi
  done
}

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "kvevict: installing missing Debian packages: ${missing[*]}"
  as_root=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "kvevict: error: missing packages ${missing[*]} and not running as root; run: apt-get install ${missing[*]}" >&2
      exit 1
    fi
    as_root=(sudo)
  fi
  apt_get update -q
  apt_get install -y -q "${missing[@]}"
fi

[[ $mode == --run || $mode == --corpus ]] && exit 0

# The Node binding's node-addon-api and typescript (npm ci from the lock file;
# node_modules is not committed). Before the first configure, because CMake
# looks for node-addon-api's napi.h then. Not fatal: the rest builds without
# the addon, and bindings/node/test.sh (make test) tries again and fails there.
if ! bash "$(dirname "$0")/../bindings/node/install-deps.sh"; then
  echo "kvevict: warning: the Node binding's dev dependencies are not installed; its addon will be skipped" >&2
fi

# The model tests' npm references (gpt-3-encoder, @huggingface/gguf; npm ci
# from tests/npm's lock file). Not fatal here: tokenizer_gpt2 and
# gguf_readback fail without them when CI=true, and skip saying so otherwise.
if ! bash "$(dirname "$0")/../tests/npm/install-deps.sh"; then
  echo "kvevict: warning: the model tests' npm packages are not installed; tokenizer_gpt2 and gguf_readback will skip" >&2
fi

# llama.cpp for the llama_cpp_agreement test: node-llama-cpp's prebuilt CPU
# build and source bundle from npm (npm ci --omit=optional from
# deps/llama-cpp's lock file, nothing compiled or downloaded from elsewhere;
# 29 MB of libraries, 83 MB in all). Before the first configure, because
# CMake (cmake/LlamaCpp.cmake) looks for it then. Not fatal here: without it
# the configure prints a "kvevict: llama.cpp ... skipped" line and make test
# fails, llama_cpp_agreement being a required suite.
if ! bash "$(dirname "$0")/../deps/llama-cpp/install-deps.sh"; then
  echo "kvevict: warning: llama.cpp (deps/llama-cpp's npm packages) is not installed; llama_cpp_agreement will be missing and make test will fail" >&2
fi
