#!/usr/bin/env python3
"""No function in the project's own sources is longer than LIMIT lines (its
signature's first line to its closing brace): a longer one hides pieces that
deserve names of their own. Tests are exempt (a test reads top to bottom).

C++ is scanned, not compiled: comments, string and character literals (raw
ones too) and preprocessor lines are blanked, then each `{` at namespace or
class scope is classified by the text before it -- a namespace, class,
struct, union, enum or extern "C" opens a scope whose own functions count
one by one; a text ending in a parameter list (with const, noexcept,
override, a trailing return type, a constructor's initializer list) opens a
function, whose nested braces (lambdas included) are its own; anything else
is a brace initializer. --self-test checks the scanner on a sample with the
cases that fool simpler ones.

Usage: function_length_test.py [--limit N] [--top K] ROOT
       function_length_test.py --self-test
"""
import pathlib
import re
import sys

LIMIT = 150
FOLDERS = ("src", "include", "tools", "bindings/python/src", "bindings/node/src", "bench", "fuzz")
SCOPE = re.compile(r'(^|\s)(namespace|class|struct|union|enum)\b|^extern\s*"C"|^extern\s*$')
CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|try|return)\b")
# What may follow a parameter list before a function body.
AFTER_PARAMS = re.compile(r"\)\s*(const|noexcept(\s*\([^)]*\))?|override|final|mutable|volatile|&|&&|\s)*"
                          r"(->\s*[^{;]+)?$")
# A constructor's initializer list: ") : member(...), member{...}".
INIT_LIST = re.compile(r"\)\s*(noexcept\s*)?:\s*[A-Za-z_]")


def blank(text: str) -> str:
    """Comments, literals and preprocessor lines replaced by spaces; newlines kept."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    out.append(" \n")
                    j += 2
                    continue
                out.append(" ")
                j += 1
            i = j
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text: str) -> list:
    """[(first line, last line, the signature's first words)] of every function."""
    code = blank(text)
    found = []
    line = 1
    stmt_start = None  # offset where the current statement's text begins
    stack = []  # "scope" | "init" | ("function", start offset, name) | "block"
    i, n = 0, len(code)
    line_at = []  # line number of each offset, built lazily
    lines_before = [0]
    for k, ch in enumerate(code):
        if ch == "\n":
            lines_before.append(k + 1)

    def line_of(offset: int) -> int:
        lo, hi = 0, len(lines_before) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if lines_before[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def in_function() -> bool:
        return any(isinstance(s, tuple) or s == "block" for s in stack)

    stmt = []
    while i < n:
        c = code[i]
        if in_function() or (stack and stack[-1] == "init"):
            if c == "{":
                stack.append("block" if in_function() else "init")
            elif c == "}":
                top = stack.pop()
                if isinstance(top, tuple):
                    found.append((line_of(top[1]), line_of(i), top[2]))
                    stmt, stmt_start = [], None
                elif top == "init" and not in_function():
                    stmt.append("{}")
            i += 1
            continue
        if c == "{":
            header = " ".join("".join(stmt).split())
            if SCOPE.search(header) and "(" not in header.split("{")[0].split("=")[0] or header.startswith("extern"):
                stack.append("scope")
                stmt, stmt_start = [], None
            elif header and not CONTROL.match(header) and "=" not in header.replace("==", "").split("(")[0] and (
                    AFTER_PARAMS.search(header) or (INIT_LIST.search(header) and header.endswith("}"))):
                name = header.split("(")[0].split()[-1] if header.split("(")[0].split() else header[:40]
                stack.append(("function", stmt_start if stmt_start is not None else i, name))
            elif re.search(r"\]\s*(\([^)]*\))?\s*(mutable\s*)?(->\s*[^{]+)?$", header) and "=" in header:
                # a lambda at namespace scope: `const auto f = [](...) {`
                name = header.split("=")[0].split()[-1]
                stack.append(("function", stmt_start if stmt_start is not None else i, name))
            else:
                stack.append("init")
            i += 1
            continue
        if c == "}":
            if stack:
                stack.pop()
            stmt, stmt_start = [], None
            i += 1
            continue
        if c == ";":
            stmt, stmt_start = [], None
            i += 1
            continue
        if c == ":" and not stmt_ends_params(stmt) and re.fullmatch(r"\s*(public|private|protected)\s*", "".join(stmt)):
            stmt, stmt_start = [], None  # an access specifier
            i += 1
            continue
        if stmt_start is None and not c.isspace():
            stmt_start = i
        stmt.append(c)
        i += 1
    return found


def stmt_ends_params(stmt: list) -> bool:
    return "".join(stmt).rstrip().endswith(")")


SAMPLE = r'''#include <array>
#define BRACES { {
namespace a {
constexpr std::array<char, 2> kMagic = {'{', '}'};
class Box : public Base {
 public:
  Box(int v) : v_{v}, w_(v) {
    if (v) { v_ = 1; }
  }
  int get() const noexcept override { return v_; }
 private:
  int v_;
  struct Inner { int x = 0; };
};
auto twice = [](int x) {
  return 2 * x;
};
std::string text() {
  const char* s = "}}}";
  std::string r = R"x(} { })x";
  return s + r;  // }
}
}  // namespace a
Decoder::Decoder(int v)
    : impl_{make(v)} {
  step();
}
extern "C" {
int f(void) { return 0; }
}
'''


def self_test() -> int:
    got = [(a, b, name) for a, b, name in functions(SAMPLE)]
    want = [(7, 9, "Box"), (10, 10, "get"), (15, 17, "twice"), (18, 22, "text"), (24, 27, "Decoder::Decoder"),
            (29, 29, "f")]
    if got != want:
        print(f"FAIL: the scanner found {got}, the sample has {want}")
        return 1
    print("function_length: self-test passed (6 functions in the sample, each with its lines)")
    return 0


def main() -> int:
    args = sys.argv[1:]
    if "--self-test" in args:
        return self_test()
    limit = int(args[args.index("--limit") + 1]) if "--limit" in args else LIMIT
    top = int(args[args.index("--top") + 1]) if "--top" in args else 5
    root = pathlib.Path([a for a in args if not a.startswith("--") and not a.isdigit()][-1])
    if self_test() != 0:
        return 1
    everything = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".cpp", ".h", ".cc", ".hpp") and "tests" not in path.parts:
                for first, last, name in functions(path.read_text(errors="replace")):
                    everything.append((last - first + 1, str(path.relative_to(root)), first, name))
    everything.sort(reverse=True)
    long_ones = [f for f in everything if f[0] > limit]
    for lines, file, first, name in long_ones:
        print(f"FAIL: {file}:{first}: {name} is {lines} lines (at most {limit})")
    print(f"function_length: {len(everything)} functions, the longest:")
    for lines, file, first, name in everything[:top]:
        print(f"  {lines:5} lines  {file}:{first}  {name}")
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
