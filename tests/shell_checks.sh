# Shared scaffolding for the shell tests (sourced, not run): a scratch folder
# removed on exit, and pass/fail counters for the closing "N passed, M failed".
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
