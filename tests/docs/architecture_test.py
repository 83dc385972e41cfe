#!/usr/bin/env python3
"""docs/architecture.md matches the tree: every folder of the layers (and of
the model layer's parts) is on the page, and every file or folder the page
names in backticks exists (a header by its name anywhere under include/ or
src/, a source under src/, tools/ or the bindings; a pattern such as
`commands_*.cpp` must match at least one file).

Usage: architecture_test.py SOURCE_DIR
"""
import fnmatch
import pathlib
import re
import sys


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    page = (root / "docs" / "architecture.md").read_text()
    problems = []
    folders = [p for base in ("src", "include/kvevict", "src/model", "include/kvevict/model")
               for p in sorted((root / base).iterdir()) if p.is_dir()]
    for folder in folders:
        rel = folder.relative_to(root).as_posix()
        # A layer by its full path (`src/core/`); a model part by its name (`kernels/`).
        wanted = f"`{rel}/`" if rel.count("/") <= 1 or rel.startswith("include/kvevict/") and rel.count("/") == 2 \
            else f"`{folder.name}/`"
        if wanted not in page and f"`{folder.name}/`" not in page:
            problems.append(f"the folder {rel}/ is not on the page")
    files = [p.relative_to(root).as_posix() for p in root.rglob("*")
             if p.is_file() and not any(part in (".git", "build", "node_modules") or part.startswith("build-")
                                        for part in p.relative_to(root).parts)]
    names = {pathlib.PurePosixPath(f).name for f in files}
    named = set(re.findall(r"`([A-Za-z0-9_./*<>-]+\.(?:h|cpp|py|sh|md))`", page))
    for name in sorted(named):
        if "<" in name:
            continue  # a template such as `policies/<name>.h`
        if "*" in name:
            if not any(fnmatch.fnmatch(n, name) for n in names):
                problems.append(f"the page names {name}; no file matches it")
        elif "/" in name:
            if not any(f == name or f.endswith("/" + name) for f in files):
                problems.append(f"the page names {name}; there is no such file")
        elif name not in names:
            problems.append(f"the page names {name}; there is no such file")
    for p in problems:
        print(f"FAIL: {p}")
    print(f"architecture page: {len(folders)} folders and {len(named)} named files checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
