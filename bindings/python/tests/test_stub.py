"""The .pyi stub matches the runtime: the same public names, every Policy
method and property, each named class's parameters, defaults and queries,
and each function's parameters. The package also carries py.typed."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Dict, List

import pytest

import kvevict
from conftest import PACKAGE_SOURCE

PACKAGE = Path(kvevict.__file__).parent
STUB = ast.parse((PACKAGE / "__init__.pyi").read_text())
CLASSES: Dict[str, ast.ClassDef] = {n.name: n for n in STUB.body if isinstance(n, ast.ClassDef)}
FUNCTIONS: Dict[str, ast.FunctionDef] = {n.name: n for n in STUB.body if isinstance(n, ast.FunctionDef)}
TYPED_DICTS = {name for name, c in CLASSES.items()
               if any(getattr(b, "id", None) == "TypedDict" for b in c.bases)}


def members(cls: ast.ClassDef) -> Dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def stub_params(fn: ast.FunctionDef) -> List[str]:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += ["*" + a.vararg.arg] if a.vararg else []
    names += ["**" + a.kwarg.arg] if a.kwarg else []
    return [n for n in names if n != "self"]


def runtime_params(fn) -> List[str]:
    """Parameter names from inspect, or from pybind11's signature line."""
    try:
        return [("**" if p.kind is p.VAR_KEYWORD else "*" if p.kind is p.VAR_POSITIONAL else "") + n
                for n, p in inspect.signature(fn).parameters.items() if n != "self"]
    except (ValueError, TypeError):
        pass
    line = fn.__doc__.strip().splitlines()[0]
    inside = line[line.index("(") + 1: line.rindex(")")]
    parts, depth, cur = [], 0, ""
    for ch in inside:
        depth += ch in "[(" and 1 or 0
        depth -= ch in "])" and 1 or 0
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    names = [re.match(r"\s*(\*{0,2}\w+)", p).group(1) for p in parts if p.strip()]
    return [n for n in names if n != "self"]


def test_package_layout():
    for name in ("__init__.py", "__init__.pyi", "py.typed", "distributed.py"):
        assert (PACKAGE / name).is_file(), name
        assert (PACKAGE / name).read_bytes() == (PACKAGE_SOURCE / name).read_bytes(), \
            f"{name} in the build is stale: rebuild"
    assert list(PACKAGE.glob("_kvevict*.so")), "the compiled module"


def test_public_names_match():
    declared = (set(CLASSES) - TYPED_DICTS) | set(FUNCTIONS) | {"__version__"}
    assert declared == set(kvevict.__all__)
    assert set(kvevict.__all__) <= set(dir(kvevict))


def test_policy_methods_match():
    stub = members(CLASSES["Policy"])
    runtime = {n for n in dir(kvevict.Policy) if not n.startswith("_")} | {"__init__", "__len__"}
    assert set(stub) == runtime
    for name, fn in stub.items():
        is_property = any(getattr(d, "id", None) == "property" for d in fn.decorator_list)
        assert is_property == isinstance(inspect.getattr_static(kvevict.Policy, name), property), name
        if not is_property and name not in ("__init__", "__len__"):
            assert stub_params(fn) == runtime_params(getattr(kvevict.Policy, name)), name


@pytest.mark.parametrize("name", ["Scissorhands", "H2O", "StreamingLLM", "SlidingWindow", "TOVA",
                                  "SnapKV", "PyramidKV"])
def test_named_class_matches_the_registry(name):
    cls = getattr(kvevict, name)
    stub = members(CLASSES[name])
    init = stub.pop("__init__")
    sig = inspect.signature(cls)
    a = init.args
    declared = {p.arg: ast.literal_eval(d) for p, d in
                zip(a.args[-len(a.defaults):] + a.kwonlyargs, a.defaults + a.kw_defaults)}
    assert declared == {k: v.default for k, v in sig.parameters.items()}, \
        f"{name}: stub parameters differ from the registry's"
    assert [p.arg for p in a.args] == ["self", "budget"]
    assert set(stub) == {m for m in vars(cls) if not m.startswith("_")} == set(cls().queries)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_parameters_match(name):
    # pybind11 calls **params "**kwargs": compare names, and only that a ** is there.
    normal = lambda names: [n if not n.startswith("**") else "**" for n in names]
    assert normal(stub_params(FUNCTIONS[name])) == normal(runtime_params(getattr(kvevict, name)))


def test_trace_iterator_matches():
    stub = set(members(CLASSES["TraceIterator"]))
    assert stub == {n for n in vars(kvevict.TraceIterator) if not n.startswith("_") or
                    n in ("__iter__", "__next__", "__length_hint__")}


@pytest.mark.parametrize("name", ["Model", "Decoder", "BlockEvictor", "LayerBudget"])
def test_model_classes_match(name):
    cls = getattr(kvevict, name)
    stub = members(CLASSES[name])
    runtime = {n for n in vars(cls) if not n.startswith("_")} | {"__init__"}
    assert set(stub) == runtime
    for attr, fn in stub.items():
        is_property = any(getattr(d, "id", None) == "property" for d in fn.decorator_list)
        assert is_property == isinstance(inspect.getattr_static(cls, attr), property), attr
        if not is_property and attr != "__init__":
            assert stub_params(fn) == runtime_params(getattr(cls, attr)), attr
    init = runtime_params(cls.__init__)
    assert stub_params(stub["__init__"]) == init, init
