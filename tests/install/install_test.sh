#!/usr/bin/env bash
# The installed trees.
#
# 1. Everything (cmake --install): the four versioned libraries and their
#    pkg-config files; nothing under a detail/ folder; the C test compiled with
#    gcc -std=c99 -Wall -Wextra -Werror against the installed C headers of
#    every layer through `pkg-config kvevict`, run on every vector file; and a
#    separate CMake project using every layer through find_package(kvevict)
#    and kvevict::kvevict.
# 2. The core alone, as an inference engine takes it (cmake --install
#    --component core): the prefix holds the core's headers, library, CMake
#    targets and .pc file and nothing else; those headers include nothing of
#    the evaluation, the model or the report (nor Eigen, zlib or JSON); the
#    library needs no zlib and no other kvevict library and defines none of
#    their symbols; a C99 engine loop builds with `pkg-config kvevict-core` and
#    a C++ project with find_package(kvevict COMPONENTS core) and
#    kvevict::core, each linking libkvevict-core alone; and find_package(kvevict)
#    asking for every layer fails there.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
layers=(core eval model report)
fail() { echo "FAIL: $*"; exit 1; }

# kvevict_needed BINARY: the kvevict libraries it names as NEEDED, one a line.
kvevict_needed() { readelf -d "$1" | sed -n 's/.*NEEDED.*\[\(libkvevict[^]]*\)\].*/\1/p' | sort; }

# ---- 1. everything ---------------------------------------------------------------
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(dirname "$(find "$prefix" -name kvevict.pc | head -1)")
export PKG_CONFIG_PATH=$pc
libdir=$(pkg-config --variable=libdir kvevict-core)
for layer in "${layers[@]}"; do
  pkg-config --exists "kvevict-$layer" || fail "no kvevict-$layer.pc in $pc"
  test -L "$libdir/libkvevict-$layer.so.0" || fail "no versioned SONAME link libkvevict-$layer.so.0 in $libdir"
  readelf -d "$libdir/libkvevict-$layer.so" | grep -q "SONAME.*libkvevict-$layer.so.0" ||
    fail "the SONAME of libkvevict-$layer.so is not libkvevict-$layer.so.0"
done
details=$(find "$prefix" -name detail)
[[ -z $details ]] || fail "a detail/ folder is installed: $details"

gcc -std=c99 -Wall -Wextra -Werror -pedantic $(pkg-config --cflags kvevict) \
  "$src/tests/c_api/c_api_test.c" -o "$tmp/c_api_test" $(pkg-config --libs kvevict) -lm
vectors=("$src/vectors")
conformance="$src/../shared/conformance/policybook"
if [[ -d "$conformance" ]]; then
  vectors+=("$conformance")
else
  echo "(../shared/conformance is absent: peer vectors skipped)"
fi
# The stream the C test runs, as the tool prints it: kvevict_model_stream's
# JSON must be the same but for the run times.
"$build/kvevict" stream --model "$src/model/kvevict-tiny.kvm" --text "$src/model/heldout-sample.txt" \
  --policy sliding-window,streaming-llm:sinks=4 --budget 64 --tokens 1200 --segment 500 --format json \
  >"$tmp/stream.json" 2>/dev/null || fail "kvevict stream (the C test's expected JSON) failed"
KVEVICT_MODEL_FILE="$src/model/kvevict-tiny.kvm" KVEVICT_STREAM_JSON="$tmp/stream.json" LD_LIBRARY_PATH=$libdir \
  "$tmp/c_api_test" "${vectors[@]}"

cmake -S "$src/tests/install/consumer-all" -B "$tmp/consumer-all" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer-all" >/dev/null
LD_LIBRARY_PATH=$libdir "$tmp/consumer-all/consumer_all"

# ---- 2. the core alone -----------------------------------------------------------
core=$tmp/core-prefix
cmake --install "$build" --prefix "$core" --component core >/dev/null
export PKG_CONFIG_PATH=$(dirname "$(find "$core" -name kvevict-core.pc | head -1)")
core_libdir=$(pkg-config --variable=libdir kvevict-core)
lib=$core_libdir/libkvevict-core.so

# What the core's component installs, and nothing else.
others=$( (cd "$core" && find . -type f -o -type l) | sed 's#^\./##' | grep -vE \
  '^(include/kvevict\.h|include/kvevict/core/.+\.h|lib[^/]*/libkvevict-core\.so(\.[0-9.]+)?|lib[^/]*/pkgconfig/kvevict-core\.pc|lib[^/]*/cmake/kvevict/(kvevict-core-targets(-[a-z]+)?|kvevictConfig|kvevictConfigVersion)\.cmake)$' || true)
[[ -z $others ]] || fail "the core's install holds files of other layers:"$'\n'"$others"

# Its headers include only the core's own (and the standard library's).
(cd "$core/include" && grep -rnE '^[[:space:]]*#[[:space:]]*include' .) >"$tmp/includes"
outside=$(grep -E '[<"][^>"]*kvevict' "$tmp/includes" | grep -vE '[<"](kvevict\.h|kvevict/core/[^>"]+)[>"]' || true)
[[ -z $outside ]] || fail "installed core headers include headers of other layers:"$'\n'"$outside"
named=$(grep -rnE 'Eigen|zlib|nlohmann|kvevict/(eval|model|report)/|kvevict_(eval|model)\.h' "$core/include" || true)
[[ -z $named ]] || fail "installed core headers name the evaluation, the model, the report or their dependencies:"$'\n'"$named"

# The library: no zlib, no other kvevict library, none of their symbols.
needed=$(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\].*/\1/p')
bad=$(grep -E '^(libz\.|libkvevict-)' <<<"$needed" || true)
[[ -z $bad ]] || fail "libkvevict-core.so needs $bad"
symbols=$(nm -DC --defined-only "$lib" | grep -E 'nlohmann|Eigen|kvevict_(trace|run|compare|vectors|model|string_free)|kvevict::(Trace|DecodeTrace|Model|Decoder|ReportData|render_html|run_vectors|perplexity|compare|open_trace|read_npy|rows_json)\b' || true)
[[ -z $symbols ]] || fail "libkvevict-core.so defines symbols of the layers above:"$'\n'"$symbols"
echo "core alone: $(wc -l <"$tmp/includes") #include lines, needs $(tr '\n' ' ' <<<"$needed")"

# A C engine through pkg-config kvevict-core.
[[ $(pkg-config --libs kvevict-core) != *kvevict-eval* ]] || fail "pkg-config kvevict-core names kvevict-eval"
gcc -std=c99 -Wall -Wextra -Werror -pedantic $(pkg-config --cflags kvevict-core) \
  "$src/tests/install/core_consumer.c" -o "$tmp/core_consumer" $(pkg-config --libs kvevict-core)
[[ $(kvevict_needed "$tmp/core_consumer") == libkvevict-core.so.0 ]] ||
  fail "the C core consumer links $(kvevict_needed "$tmp/core_consumer" | tr '\n' ' '), not libkvevict-core.so.0 alone"
LD_LIBRARY_PATH=$core_libdir "$tmp/core_consumer"

# A C++ engine through find_package(kvevict COMPONENTS core) and kvevict::core.
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$core" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
[[ $(kvevict_needed "$tmp/consumer/consumer") == libkvevict-core.so.0 ]] ||
  fail "the CMake core consumer links $(kvevict_needed "$tmp/consumer/consumer" | tr '\n' ' '), not libkvevict-core.so.0 alone"
LD_LIBRARY_PATH=$core_libdir "$tmp/consumer/consumer"

# Every layer is asked for without COMPONENTS: refused where only the core is.
if cmake -S "$src/tests/install/consumer-all" -B "$tmp/consumer-all-core" -G Ninja \
  -DCMAKE_PREFIX_PATH="$core" >"$tmp/all-core.log" 2>&1; then
  fail "find_package(kvevict) without COMPONENTS succeeded in a core-only prefix"
fi
grep -q "eval library is not installed" "$tmp/all-core.log" ||
  { cat "$tmp/all-core.log"; fail "find_package(kvevict) failed in a core-only prefix for another reason"; }
echo "install: every layer, and the core alone, passed"
