"""The package's shape, checked from its source: an acyclic import graph, block math without
dask, one place that builds task graphs, and no model named outside the model modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import distsketch

PACKAGE = Path(distsketch.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}

#: The package's units (a top-level module or a top-level folder) in layers: a unit imports
#: only units of earlier layers (and itself). docs/design/layout.md says why each sits
#: where it does.
LAYERS = [
    ["_version", "_registry", "_hashing", "_base", "compat", "tuning"],
    ["backends"],
    ["kernels", "sketches", "options", "losses"],
    ["linalg"],
    ["metrics"],
    ["engine"],
    ["solvers"],
    ["io"],
    ["decoding"],
    ["models"],
    ["model_selection"],
    ["cli", "testing"],
    ["", "__main__"],
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}

#: Block math: numpy/scipy only, testable against dense formulas (docs/design/layout.md).
BLOCK_MATH_UNITS = ["kernels", "sketches", "linalg", "backends", "_hashing", "_base"]
BLOCK_MATH = sorted(m for m in MODULES if m.split(".")[1:2] and m.split(".")[1] in
                    BLOCK_MATH_UNITS)

#: The longest a module may be (lines).
MAX_LINES = 700


def unit(module: str) -> str:
    """The unit of ``module``: its top-level folder or module under distsketch (``""`` for
    the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


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
    assert "distsketch.cli.config" in graph["distsketch.cli.commands"]
    assert "distsketch.kernels.standardized" in graph["distsketch.engine.rows"]
    assert "distsketch.linalg.topk" in graph["distsketch.decoding.preimage"]


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


@pytest.mark.slow
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
    assert builders == {"distsketch.engine.mapreduce"}
    for m in ("distsketch.engine.accumulate", "distsketch.decoding.preimage",
              "distsketch.decoding.candidates"):
        assert "distsketch.engine.mapreduce" in package_graph()[m], m


MODEL_NAMES = {"SISOKR", "SketchedKRR", "SketchedFeatures", "RidgeEstimator"}


@pytest.mark.parametrize("module", ["distsketch.io.persist", "distsketch.io.model_json",
                                    "distsketch.cli.config", "distsketch.cli.commands",
                                    "distsketch.engine.store", "distsketch.engine.storeguard",
                                    "distsketch.engine.chunkwrite",
                                    "distsketch.engine.accumulate", "distsketch.engine.sums",
                                    "distsketch.engine.fitpass"])
def test_infrastructure_names_no_model(module):
    """persist, config, cli, the store and the pass find models through the registry (and
    each model's declarations): no model class, module or name appears in their code."""
    tree = ast.parse(MODULES[module].read_text())
    assert not {m for m in imports(module) if unit(m) == "models"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            assert node.id not in MODEL_NAMES, (module, node.id)
        elif isinstance(node, ast.Attribute):
            assert node.attr not in MODEL_NAMES, (module, node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in MODEL_NAMES:
                pytest.fail(f"{module}: the string {node.value!r} names a model")


def test_every_module_belongs_to_a_layer():
    """A new top-level module or folder is placed in :data:`LAYERS` (and so in the layout
    docs/design/layout.md describes) before it can be imported."""
    assert sorted({unit(m) for m in MODULES} - set(LAYER)) == []


def test_each_unit_imports_only_earlier_layers():
    """The folder rules: a unit imports itself and units of earlier layers only — at any level
    of its source — so block math never reaches the engine, the engine never reaches a
    solver, solvers never reach a model, and nothing below the command line reaches it."""
    wrong = [f"{m} ({unit(m)}, layer {LAYER[unit(m)]}) imports {i} ({unit(i)}, layer "
             f"{LAYER[unit(i)]})"
             for m, deps in package_graph().items() for i in sorted(deps)
             if unit(i) != unit(m) and LAYER[unit(i)] >= LAYER[unit(m)]]
    assert wrong == []


def test_the_layout_page_shows_the_layers():
    """docs/design/layout.md's table of folders by layer is :data:`LAYERS`: a unit added,
    moved or removed here without the page (or the reverse) fails."""
    page = (PACKAGE.parent / "docs" / "design" / "layout.md").read_text()
    rows = [line.split("|")[1:3] for line in page.splitlines()
            if line.startswith("|") and line.split("|")[1].strip().isdigit()]
    shown = [sorted(u.strip("`").removesuffix("/").removesuffix(".py")
                    .replace("distsketch/__init__", "").replace("__init__", "")
                    for u in cell.split(", "))
             for _, cell in rows for cell in [cell.strip()]]
    assert [int(layer) for layer, _ in rows] == list(range(len(LAYERS)))
    assert shown == [sorted(units) for units in LAYERS]


def test_folders_are_packages_with_a_docstring():
    """Every folder is a package whose ``__init__`` says what it holds."""
    for folder in sorted(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        init = folder / "__init__.py"
        assert init.exists(), folder
        assert ast.get_docstring(ast.parse(init.read_text())), init


def test_no_module_is_longer_than_the_limit():
    """Every module of the package fits in :data:`MAX_LINES` lines, docstring included: a
    longer one is cut by concept."""
    long = sorted(m for m, p in MODULES.items() if len(p.read_text().splitlines()) > MAX_LINES)
    assert long == [], long


def test_no_test_module_imports_another():
    """Shared helpers live in the ``reference`` package (dense formulas, brute-force folds,
    recorded cases) and in helper modules (conftest, confighelpers, passhelpers, pcghelpers,
    ...), never in a test module another one imports."""
    tests = Path(__file__).resolve().parent
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.split(".")[0].startswith("test_"), (path.name, name)


def _private(name: str) -> bool:
    """A private name: one leading underscore, not a dunder (``__version__``, ``__all__``)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def cross_module_privates() -> list[str]:
    """Every use of another package module's private name: ``from .module import _name`` (at
    any level, inside functions too) and ``module._name`` where ``module`` is a package module
    bound by an import (``from . import store``, ``import distsketch.engine.store as store``)."""
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        bound: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                for a in node.names:
                    if f"{base}.{a.name}" in MODULES:
                        bound[a.asname or a.name] = f"{base}.{a.name}"
                        if _private(a.name):  # ``from . import _module``: a private module
                            found.append(f"{module}:{node.lineno} imports the private module "
                                         f"{base}.{a.name}")
                    elif base in MODULES and base != module and _private(a.name):
                        found.append(f"{module}:{node.lineno} imports {a.name} from {base}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in MODULES and a.asname:
                        bound[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id in bound
                    and bound[node.value.id] != module):
                found.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module_boundary():
    """What another module needs has a public name in its owner (STYLE.md, "Private means
    private"): no module imports or reaches a ``_private`` name of another package module."""
    assert cross_module_privates() == []


def test_the_private_check_sees_every_form(tmp_path, monkeypatch):
    """The analysis itself, on a small package: a ``from .a import _x`` inside a function, an
    ``a._y`` after ``from . import a`` and a ``from . import _c`` (a private module) are found;
    ``__version__`` is not private, and a public name of a private module may be imported."""
    (tmp_path / "a.py").write_text("_x = 1\n_y = 2\n__version__ = '0'\n")
    (tmp_path / "_c.py").write_text("z = 3\n")
    (tmp_path / "b.py").write_text("from . import a, _c\nfrom .a import __version__\n"
                                   "from ._c import z\n\n"
                                   "def f():\n    from .a import _x\n    return a._y + _x\n")
    monkeypatch.setattr(__import__(__name__), "MODULES",
                        {"pkg.a": tmp_path / "a.py", "pkg._c": tmp_path / "_c.py",
                         "pkg.b": tmp_path / "b.py"})
    found = " | ".join(cross_module_privates())
    assert found.count("pkg.b:") == 3, found
    assert "_x" in found and "a._y" in found and "private module pkg._c" in found


MAX_FUNCTION_LINES = 100
MAX_SISOKR_LINES = 600


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of code of a function: from its first statement after the docstring to its last
    line (decorators, signature and docstring excluded)."""
    body = node.body
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    if not body:
        return 0
    return node.end_lineno - body[0].lineno + 1


def test_no_function_is_longer_than_100_lines():
    """Every function and method of the package fits in 100 lines of code (docstrings
    excluded): a longer one is a sequence of steps that want names."""
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if code_lines(node) > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {code_lines(node)} lines")
    assert long == []


def test_sisokr_is_a_thin_estimator():
    """``SISOKR`` (models/sisokr.py) stays under 600 lines, docstring included: its machinery
    lives in module-level functions (STYLE.md, "Thin estimator over functions")."""
    tree = ast.parse(MODULES["distsketch.models.sisokr"].read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SISOKR"]
    assert cls.end_lineno - cls.lineno + 1 < MAX_SISOKR_LINES
