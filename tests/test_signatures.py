"""Type hints on the public signatures (STYLE.md, "Type hints on public signatures"): every
parameter and every return of the public API is annotated, checked with ``inspect.signature``
on the objects themselves."""

from __future__ import annotations

import importlib
import inspect
import sys

#: Modules whose public names (their ``__all__``) are the public API, with the package's own
#: ``distsketch.__all__``: the parts users import (docs/api/).
PUBLIC_MODULES = ["distsketch", "distsketch.kernels", "distsketch.sketches", "distsketch.io",
                  "distsketch.engine", "distsketch.losses", "distsketch.metrics",
                  "distsketch.options", "distsketch.tuning", "distsketch.model_selection",
                  "distsketch.model_selection.select", "distsketch.testing",
                  "distsketch.solvers.routes"]

#: Methods checked besides the public ones: how an object is built and called.
DUNDERS = ("__init__", "__call__")


def public_objects(modules: list[str]) -> dict[str, object]:
    """The public functions and classes of ``modules`` (their ``__all__``) by a name to report
    them by; submodules, data and type aliases are left out."""
    found = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found[f"{module_name}.{name}"] = obj
    return found


def _functions(name: str, obj: object):
    """``(name, function)`` of a function, or of a class's own methods and those of its
    package base classes (inherited from the package, they are part of its API): public
    ones, ``__init__`` and ``__call__``, static and class methods included. Properties are
    attributes, not signatures; a class attribute that holds a function (a dataclass field's
    default) is not a method: only functions defined in the class body count."""
    if inspect.isfunction(obj):
        yield name, obj
        return
    package = obj.__module__.partition(".")[0]
    for cls in obj.__mro__:
        if cls.__module__.partition(".")[0] != package:
            continue
        for attr, value in vars(cls).items():
            if attr.startswith("_") and attr not in DUNDERS:
                continue
            func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
            if inspect.isfunction(func) and func.__qualname__ == f"{cls.__qualname__}.{attr}":
                yield f"{cls.__module__}.{cls.__qualname__}.{attr}", func


def unannotated(objects: dict[str, object]) -> list[str]:
    """Every parameter (``self`` and ``cls`` aside; ``*args`` and ``**kwargs`` included) and
    every return without an annotation, as ``"<function>: <parameter>"`` or
    ``"<function>: return"``, each function once."""
    missing, seen = [], set()
    for name, obj in objects.items():
        for qualname, func in _functions(name, obj):
            if func in seen:
                continue
            seen.add(func)
            signature = inspect.signature(func)
            for i, parameter in enumerate(signature.parameters.values()):
                if i == 0 and parameter.name in ("self", "cls") and "." in func.__qualname__:
                    continue
                if parameter.annotation is inspect.Parameter.empty:
                    missing.append(f"{qualname}: {parameter.name}")
            if signature.return_annotation is inspect.Signature.empty:
                missing.append(f"{qualname}: return")
    return missing


def test_public_signatures_are_annotated():
    objects = public_objects(PUBLIC_MODULES)
    assert len(objects) > 100  # the walk reaches the API (a broken import list finds nothing)
    assert unannotated(objects) == []


def test_the_check_finds_what_is_missing(tmp_path, monkeypatch):
    """The analysis itself, on a small module: a parameter, a return, a ``**kwargs`` and an
    inherited method without annotations are found; ``self``, an annotated function and a
    function-valued class attribute are not."""
    (tmp_path / "sigpkg.py").write_text(
        "from __future__ import annotations\n"
        "__all__ = ['f', 'g', 'Child']\n\n"
        "def f(a: int, b) -> int:\n    return a\n\n"
        "def g(a: int, **kw):\n    return a\n\n"
        "def helper(x: int) -> int:\n    return x\n\n"
        "class Base:\n"
        "    attr = helper\n"
        "    def run(self, x) -> None:\n        pass\n\n"
        "class Child(Base):\n"
        "    def __init__(self, y: int) -> None:\n        self.y = y\n"
        "    def fine(self) -> int:\n        return 1\n"
        "    def _private(self, z):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sigpkg", raising=False)
    found = unannotated(public_objects(["sigpkg"]))
    assert sorted(found) == ["sigpkg.Base.run: x", "sigpkg.f: b", "sigpkg.g: kw",
                             "sigpkg.g: return"]


def test_the_package_lists_its_public_names():
    """The walk starts from ``distsketch.__all__``: the estimators are in it."""
    names = set(public_objects(["distsketch"]))
    assert {"distsketch.SISOKR", "distsketch.SketchedKRR", "distsketch.SISOKRCV",
            "distsketch.SketchedKRRCV", "distsketch.load"} <= names
