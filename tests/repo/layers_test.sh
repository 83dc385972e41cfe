#!/usr/bin/env bash
# The layers in the source tree: each of src/<layer>/ and include/kvevict/<layer>/
# includes only its own layer's headers and those of the layers below it
# (core; eval on core; model on eval; report on eval; llama, the llama.cpp
# adapter built only beside llama.cpp, on core alone), public
# ("kvevict/<layer>/...", <kvevict_eval.h>) or private ("core/...", by its path in
# src/); the core names no Eigen, zlib or JSON, the evaluation and the report no
# Eigen or zlib; and include/ has no detail/ folder (everything under it is
# installed).
# Inside the model layer the same holds for its folders, in this order, each on
# the ones before it (docs/architecture.md): kernels, format, vocab, kv,
# decoder, arch, eviction, serving, evaluation; the layer's own C API
# (src/model/c_api.cpp, include/kvevict_model.h) sits on them all, and no other
# file lies loose in src/model/ or include/kvevict/model/.
# The shared libraries' --no-undefined link (CMakeLists.txt) checks the same
# order for symbols; tests/install/install_test.sh checks the installed core.
# Usage: layers_test.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 1
declare -A allowed=([core]="core" [eval]="core eval" [model]="core eval model" [report]="core eval report"
                    [llama]="core llama")
declare -A forbidden=([core]='Eigen/|zlib\.h|nlohmann/' [eval]='Eigen/|zlib\.h' [model]='^$' [report]='Eigen/|zlib\.h'
                      [llama]='Eigen/|zlib\.h|nlohmann/')
declare -A c_header=([kvevict.h]=core [kvevict_eval.h]=eval [kvevict_model.h]=model [kvevict_llama.h]=llama)
model_parts=(kernels format vocab kv decoder arch eviction serving evaluation)
declare -A part_rank=()
for i in "${!model_parts[@]}"; do part_rank[${model_parts[$i]}]=$i; done
problems=0
checked=0

# The model folder a file lies in (its part), or "top" for the C API.
part_of() {
  local rest=${1#*/model/}
  [[ $rest == */* ]] && echo "${rest%%/*}" || echo top
}

# check LAYER FILE...: each file's includes against LAYER's allowed layers.
check() {
  local layer=$1 file line target used
  shift
  for file in "$@"; do
    checked=$((checked + 1))
    while IFS= read -r line; do
      target=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$line")
      used=""
      case $target in
        kvevict/core/* | kvevict/eval/* | kvevict/model/* | kvevict/report/* | kvevict/llama/*) used=${target#kvevict/}; used=${used%%/*} ;;
        core/* | eval/* | model/* | report/* | llama/*) used=${target%%/*} ;;
        kvevict.h | kvevict_eval.h | kvevict_model.h | kvevict_llama.h) used=${c_header[$target]} ;;
        kvevict/*) echo "FAIL: $file includes $target, a header outside the layers"; problems=$((problems + 1)); continue ;;
      esac
      if [[ -n $used && " ${allowed[$layer]} " != *" $used "* ]]; then
        echo "FAIL: $file ($layer) includes $target ($used)"
        problems=$((problems + 1))
      fi
      # Inside the model layer: a folder includes only its own and the ones below.
      if [[ $layer == model && $used == model ]]; then
        local from to rest
        from=$(part_of "$file")
        rest=${target#kvevict/}
        rest=${rest#model/}
        to=${rest%%/*}
        [[ $target == kvevict_model.h ]] && to=top
        if [[ $rest != */* && $target != kvevict_model.h ]]; then
          echo "FAIL: $file includes $target, outside the model's folders"
          problems=$((problems + 1))
        elif [[ $from != top && ( $to == top || ${part_rank[$to]:-99} -gt ${part_rank[$from]:-99} ) ]]; then
          echo "FAIL: $file ($from) includes $target ($to, above it)"
          problems=$((problems + 1))
        fi
      fi
      if grep -qE "${forbidden[$layer]}" <<<"$target"; then
        echo "FAIL: $file ($layer) includes $target"
        problems=$((problems + 1))
      fi
    done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$file")
  done
}

for layer in core eval model report llama; do
  for dir in "src/$layer" "include/kvevict/$layer"; do
    [[ -d $dir ]] || { echo "FAIL: $dir is missing"; problems=$((problems + 1)); continue; }
    mapfile -t files < <(find "$dir" -type f \( -name '*.h' -o -name '*.cpp' \))
    check "$layer" "${files[@]}"
  done
done
for header in "${!c_header[@]}"; do
  check "${c_header[$header]}" "include/$header"
done

# Nothing outside the layers.
stray=$(find src include -maxdepth 1 -type f ! -name kvevict.h ! -name kvevict_eval.h ! -name kvevict_model.h \
  ! -name kvevict_llama.h)
stray+=$(find src include/kvevict -mindepth 1 -maxdepth 1 -type d ! -name core ! -name eval ! -name model ! -name report ! -name llama)
if [[ -n $stray ]]; then
  echo "FAIL: outside the layer folders:"$'\n'"$stray"
  problems=$((problems + 1))
fi
# The model layer's folders: the parts above and nothing else (c_api.cpp aside).
loose=$(find src/model include/kvevict/model -mindepth 1 -maxdepth 1 ! -name c_api.cpp \
  | while read -r entry; do
      name=${entry##*/}
      [[ -d $entry && -n ${part_rank[$name]:-} ]] || echo "$entry"
    done)
if [[ -n $loose ]]; then
  echo "FAIL: in the model layer but in none of its folders (${model_parts[*]}):"$'\n'"$loose"
  problems=$((problems + 1))
fi
details=$(find include -type d -name detail)
if [[ -n $details ]]; then
  echo "FAIL: include/ has a detail/ folder (everything under include/ is installed): $details"
  problems=$((problems + 1))
fi

echo "layers: $checked files checked, $problems problems"
[[ $problems -eq 0 ]]
