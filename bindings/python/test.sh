#!/usr/bin/env bash
# Runs the Python binding's test suite against a build folder:
#   bindings/python/test.sh BUILD_DIR      (e.g. build)
# with Debian's /usr/bin/python3 and PYTHONPATH=BUILD_DIR/python. Ends with
# pytest's summary line; exits non-zero on any failure, and when no test ran.
# Extra arguments go to pytest (e.g. -k canonical, -v).
set -uo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [pytest arguments...]" >&2
  exit 2
fi
build=$(cd "$1" 2>/dev/null && pwd) || { echo "kvevict: error: no build folder '$1'" >&2; exit 2; }
shift
here=$(cd "$(dirname "$0")" && pwd)
python=${KVEVICT_PYTHON:-/usr/bin/python3}

if ! compgen -G "$build/python/kvevict/_kvevict*.so" >/dev/null; then
  echo "kvevict: error: $build/python/kvevict has no compiled module: build the kvevict_python target" \
       "(it is skipped, with a message, when pybind11-dev or python3-dev is missing)" >&2
  exit 1
fi

# Run from the tests folder so the source package in bindings/python/kvevict
# cannot shadow the built one; write no caches into the source tree.
cd "$here/tests" || exit 1
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 \
  "$python" -m pytest -p no:cacheprovider -q -rs --rootdir "$here/tests" "$@" .
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "kvevict: error: pytest collected no tests" >&2
  exit 1
fi
exit $rc
