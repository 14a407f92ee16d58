"""The package's shape, checked from its source: an acyclic import graph, block math without
dask, one place that builds task graphs, and no model named outside the model modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import distsketch

PACKAGE = Path(distsketch.__file__).resolve().parent
MODULES = {f"distsketch.{p.stem}" if p.stem != "__init__" else "distsketch": p
           for p in sorted(PACKAGE.glob("*.py"))}

#: Block math: numpy/scipy only, testable against dense formulas (docs/design.md, "Layout").
BLOCK_MATH = ["distsketch.kernels", "distsketch.sketches", "distsketch.blocks",
              "distsketch.backends", "distsketch.solve", "distsketch.topk", "distsketch._hashing",
              "distsketch._base"]


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module name of a ``from … import`` (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    package = module if MODULES.get(module, Path()).name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports(module: str) -> set[str]:
    """Every module ``module`` imports, at any level of its source (inside functions too).
    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            names = [f"{base}.{a.name}" for a in node.names]
            found = [n for n in names if n in MODULES]
            out.update(found if found else [base])
            if len(found) < len(names):
                out.add(base)
    return out


def package_graph() -> dict[str, set[str]]:
    return {m: {i for i in imports(m) if i in MODULES and i != m} for m in MODULES}


def test_the_graph_sees_function_level_imports():
    """The analysis itself: ``cli`` imports ``config``, and ``rows`` imports ``kernels``, only
    inside functions; ``from . import topk`` (decode) is an import of the module."""
    graph = package_graph()
    assert "distsketch.config" in graph["distsketch.cli"]
    assert "distsketch.kernels" in graph["distsketch.rows"]
    assert "distsketch.topk" in graph["distsketch.decode"]


def test_import_graph_of_the_package_is_acyclic():
    """No module can reach itself through imports, module-level or inside functions (the
    package ``__init__`` imports the public modules and is imported by none of them)."""
    graph = package_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def _reachable(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(graph.get(m, ()))
    return seen


@pytest.mark.parametrize("module", BLOCK_MATH)
def test_block_math_imports_no_dask(module):
    """Block-math modules and every package module they reach (at any level) import neither
    dask nor distributed nor zarr: they run in a task or on the driver on plain arrays."""
    graph = package_graph()
    for m in _reachable(module, graph):
        outside = {i.split(".")[0] for i in imports(m)} - {"distsketch"}
        assert not outside & {"dask", "distributed", "zarr"}, (module, m, sorted(outside))


def test_task_graphs_are_built_in_the_engine_only():
    """``dask.delayed`` graphs — maps and the one tree reduction — are built in
    distsketch.engine; the pass, decoding and candidate features go through it."""
    builders = {m for m in MODULES if "dask.delayed" in imports(m)}
    assert builders == {"distsketch.engine"}
    for m in ("distsketch.accumulate", "distsketch.decode", "distsketch.candidates"):
        assert "distsketch.engine" in package_graph()[m], m


MODEL_NAMES = {"SISOKR", "SketchedKRR", "SketchedFeatures", "RidgeEstimator"}


@pytest.mark.parametrize("module", ["distsketch.persist", "distsketch.config", "distsketch.cli",
                                    "distsketch.store", "distsketch.accumulate"])
def test_infrastructure_names_no_model(module):
    """persist, config, cli, the store and the pass find models through the registry (and
    each model's declarations): no model class, module or name appears in their code."""
    tree = ast.parse(MODULES[module].read_text())
    assert not imports(module) & {"distsketch.models", "distsketch.transformers",
                                  "distsketch.estimator"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            assert node.id not in MODEL_NAMES, (module, node.id)
        elif isinstance(node, ast.Attribute):
            assert node.attr not in MODEL_NAMES, (module, node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in MODEL_NAMES:
                pytest.fail(f"{module}: the string {node.value!r} names a model")


def test_no_test_module_imports_another():
    """Shared helpers live in helper modules (conftest, naive, passhelpers, reference_cases),
    never in a test module another one imports."""
    tests = Path(__file__).resolve().parent
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.split(".")[0].startswith("test_"), (path.name, name)
