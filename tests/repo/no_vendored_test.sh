#!/usr/bin/env bash
# The repository holds no vendored package: node_modules/ (and a Python
# site-packages/) are installed at set-up from lock files, never committed --
# 24 MB of TypeScript's compiler once was. Exit 77 (ctest's SKIP_RETURN_CODE
# here) when the source is not a git checkout of its own (a release tarball).
# Usage: no_vendored_test.sh SOURCE_DIR
set -u
src=$(cd "$1" && pwd -P) || { echo "no such folder: $1"; exit 1; }
# safe.directory: CI runs as root on a clone another user may own; git refuses
# such a repository otherwise, which would read as "not a checkout".
git=(git -c safe.directory='*' -C "$src")
if ! command -v git >/dev/null 2>&1; then
  echo "SKIP: git is not installed, so the tracked files cannot be listed"
  exit 77
fi
top=$("${git[@]}" rev-parse --show-toplevel 2>/dev/null) || top=""
if [[ -z $top || $(cd "$top" && pwd -P) != "$src" ]]; then
  echo "SKIP: $src is not a git checkout of its own, so there is no tracked file to check"
  exit 77
fi
files=$("${git[@]}" ls-files) || { echo "FAIL: git ls-files failed in $src"; exit 1; }
[[ -n $files ]] || { echo "FAIL: git ls-files lists no file in $src"; exit 1; }
vendored=$(grep -E '(^|/)(node_modules|site-packages)/' <<<"$files")
if [[ -n $vendored ]]; then
  echo "FAIL: $(wc -l <<<"$vendored") vendored package files are tracked, e.g. $(head -1 <<<"$vendored")" \
       "(git rm -r --cached them; npm ci installs node_modules from the lock file)"
  exit 1
fi
echo "no vendored package among $(wc -l <<<"$files") tracked files"
