#!/usr/bin/env python3
"""No two source files of the libraries call each other, directly or around a
loop: the call graph between translation units is a DAG, so each file can be
read (and taken out) knowing only the ones below it.

An edge A -> B is a symbol A's object file uses (nm: undefined) and B's defines
strongly (text, data, read-only or bss; inline functions and templates, which
every user defines weakly, are nobody's). Each strongly connected component
of more than one file is a loop: printed with the symbols that close it.
layers_test.sh checks the same order for #includes, folder by folder.

Usage: link_cycles_test.py OBJECT...   (the libraries' object files)
"""
import collections
import pathlib
import subprocess
import sys

STRONG = set("TDRB")


def symbols(obj: pathlib.Path) -> tuple:
    out = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        kind_and_name = line[17:] if len(line) > 17 and line[16] == " " else line.strip()
        kind, _, name = kind_and_name.partition(" ")
        if kind == "U":
            used.add(name)
        elif kind in STRONG:
            defined.add(name)
    return defined, used


def components(nodes: list, edges: dict) -> list:
    """Tarjan's strongly connected components, without recursion."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                found.append(comp)
    return found


def source_name(obj: pathlib.Path) -> str:
    text = obj.as_posix()
    for marker in ("/src/",):
        if marker in text:
            return "src/" + text.split(marker, 1)[1].removesuffix(".o")
    return obj.name.removesuffix(".o")


def main() -> int:
    objects = [pathlib.Path(a) for a in sys.argv[1:] if a]
    if not objects:
        print("link_cycles: no object files given", file=sys.stderr)
        return 2
    owner, uses = {}, {}
    for obj in objects:
        defined, used = symbols(obj)
        for name in defined:
            owner.setdefault(name, obj)
        uses[obj] = used
    edges = collections.defaultdict(set)
    why = collections.defaultdict(list)
    for obj in objects:
        for name in sorted(uses[obj]):
            target = owner.get(name)
            if target is not None and target != obj:
                edges[obj].add(target)
                why[(obj, target)].append(name)
    loops = [c for c in components(objects, edges) if len(c) > 1]
    for comp in loops:
        members = set(comp)
        print("FAIL: these files call each other around a loop:")
        for a in sorted(comp, key=source_name):
            for b in sorted(edges[a] & members, key=source_name):
                print(f"  {source_name(a)} -> {source_name(b)}: {why[(a, b)][0][:160]}")
    count = sum(len(v) for v in edges.values())
    print(f"link_cycles: {len(objects)} files, {count} calls between them, {len(loops)} loops")
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main())
