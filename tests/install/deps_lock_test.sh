#!/usr/bin/env bash
# scripts/install-deps.sh waits its turn when another apt holds the dpkg lock
# (an unattended upgrade) instead of failing, bounded and saying so. Driven
# with a stand-in apt-get on PATH that reports the lock held a set number of
# times, and a dpkg-query that reports every package missing; nothing is
# installed. Usage: deps_lock_test.sh SOURCE_DIR
set -u
src=$1
# shellcheck source=../shell_checks.sh
source "$(dirname "$0")/../shell_checks.sh"

mkdir -p "$tmp/bin"
# apt-get: refused with apt's own message while $tmp/held counts down, then done;
# every call's arguments are logged.
cat >"$tmp/bin/apt-get" <<STUB
#!/usr/bin/env bash
echo "\$*" >>"$tmp/calls"
held=\$(cat "$tmp/held")
if [[ \$held -gt 0 ]]; then
  echo \$((held - 1)) >"$tmp/held"
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)" >&2
  exit 100
fi
exit 0
STUB
printf '#!/usr/bin/env bash\nexit 1\n' >"$tmp/bin/dpkg-query"  # nothing installed
printf '#!/usr/bin/env bash\necho 0\n' >"$tmp/bin/id"            # root: no sudo
chmod +x "$tmp/bin/"*

run_deps() {
  : >"$tmp/calls"
  PATH="$tmp/bin:$PATH" KVEVICT_APT_LOCK_STEP=1 KVEVICT_APT_LOCK_WAIT=$1 \
    bash "$src/scripts/install-deps.sh" --run >"$tmp/out" 2>"$tmp/err"
}

# Held for two tries: two waiting lines, then update and install go through.
echo 2 >"$tmp/held"
run_deps 30
rc=$?
waits=$(grep -c '^kvevict: waiting for another apt to finish: its lock is held' "$tmp/err")
if [[ $rc -eq 0 && $waits -eq 2 && $(grep -c -- '-o DPkg::Lock::Timeout=1 update' "$tmp/calls") -eq 3 \
      && $(grep -c -- '-o DPkg::Lock::Timeout=1 install -y -q cmake' "$tmp/calls") -eq 1 ]] \
      && ! grep -q 'Could not get lock' "$tmp/err"; then
  pass
else
  fail "lock held twice: exit $rc, $waits waits; calls: $(cat "$tmp/calls"); stderr: $(cat "$tmp/err")"
fi

# Held past the bound: a non-zero exit and one error line naming the holder.
echo 1000 >"$tmp/held"
run_deps 2
rc=$?
last=$(tail -n 1 "$tmp/err")
if [[ $rc -ne 0 && $(grep -c '^kvevict: error:' "$tmp/err") -eq 1 \
      && $last == "kvevict: error: another apt still holds its lock after 2 s (E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)); run this again once it has finished" ]]; then
  pass
else
  fail "lock held past the bound: exit $rc; stderr: $(cat "$tmp/err")"
fi

# Any other apt failure is not waited on: its own message, at once.
echo 0 >"$tmp/held"
printf '#!/usr/bin/env bash\necho "E: Unable to locate package cmake" >&2\nexit 100\n' >"$tmp/bin/apt-get"
run_deps 30
rc=$?
if [[ $rc -ne 0 && $(cat "$tmp/err") == "E: Unable to locate package cmake" ]]; then
  pass
else
  fail "another failure: exit $rc; stderr: $(cat "$tmp/err")"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
