#!/usr/bin/env bash
# Installs the build into a temporary prefix, then (1) compiles the C test with
# gcc -std=c99 -Wall -Wextra -Werror against the installed header through
# pkg-config and runs it on every vector file, and (2) builds a separate tiny
# CMake project with find_package(kvevict).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(dirname "$(find "$prefix" -name kvevict.pc | head -1)")
export PKG_CONFIG_PATH=$pc
libdir=$(pkg-config --variable=libdir kvevict)
test -L "$libdir/libkvevict.so.0" || { echo "no versioned SONAME link in $libdir"; exit 1; }
readelf -d "$libdir/libkvevict.so" | grep -q 'SONAME.*libkvevict.so.0' || { echo "SONAME is not libkvevict.so.0"; exit 1; }

gcc -std=c99 -Wall -Wextra -Werror -pedantic $(pkg-config --cflags kvevict) \
  "$src/tests/c_api/c_api_test.c" -o "$tmp/c_api_test" $(pkg-config --libs kvevict) -lm
vectors=("$src/vectors")
conformance="$src/../shared/conformance/policybook"
if [[ -d "$conformance" ]]; then
  vectors+=("$conformance")
else
  echo "(../shared/conformance is absent: peer vectors skipped)"
fi
KVEVICT_MODEL_FILE="$src/model/kvevict-tiny.kvm" LD_LIBRARY_PATH=$libdir "$tmp/c_api_test" "${vectors[@]}"

cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH=$libdir "$tmp/consumer/consumer"
