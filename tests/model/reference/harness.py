"""A small runner shared by the model tests: named checks, a final line
`N passed, M failed`, exit 1 on any failure; missing tools skip (exit 77)
on a developer machine and fail when CI=true."""
import os
import shutil
import subprocess
import sys
import traceback

SKIP = 77


def in_ci():
    return os.environ.get("CI", "").lower() == "true"


def missing(what, hint):
    """A tool the test needs is absent: exit 77 (skip), or 1 under CI=true."""
    if in_ci():
        print(f"FAIL: {what} is missing ({hint}); CI=true, so this is a failure")
        print("0 passed, 1 failed")
        sys.exit(1)
    print(f"SKIP: {what} is missing ({hint})")
    sys.exit(SKIP)


def need_python_modules(*names):
    for n in names:
        try:
            __import__(n)
        except ImportError:
            pkg = {"torch": "python3-torch", "numpy": "python3-numpy", "sentencepiece": "python3-sentencepiece"}.get(n, n)
            missing(f"python module {n}", f"apt-get install {pkg}; run with /usr/bin/python3")


def need_tool(path, what="the kvevict tool"):
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        missing(what, f"{path!r} is not an executable; pass the built kvevict as the first argument")


NPM_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "npm"))


def need_node_packages(*packages):
    if shutil.which("node") is None:
        missing("node", "apt-get install nodejs npm")
    for p in packages:
        if not os.path.isfile(os.path.join(NPM_DIR, "node_modules", p, "package.json")):
            missing(f"npm package {p}", f"cd {NPM_DIR} && npm ci (scripts/install-deps.sh does it)")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace") if isinstance(r.stderr, bytes) else r.stderr
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {r.returncode}: {err.strip()[-2000:]}")
    return r


class Runner:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, fn, *args, **kw):
        """Runs fn; an exception or AssertionError is a failure. Returns fn's value."""
        try:
            v = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            if os.environ.get("KVEVICT_TEST_VERBOSE"):
                traceback.print_exc()
            return None
        self.passed += 1
        print(f"ok   {name}")
        return v

    def expect(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")
        return cond

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)
