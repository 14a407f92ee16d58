"""Sphinx configuration of the API reference (``make docs``).

The reference is built from the package's numpydoc docstrings; it is self-contained (no
intersphinx: the build needs no network). Objects are documented under their public paths
(``distsketch.SISOKR``, ``distsketch.kernels.Gaussian``), not under the modules that define
them.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

from numpydoc.docscrape import NumpyDocString
from numpydoc.validate import get_doc_object, validate
from sphinx.util import logging as sphinx_logging

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the package of this checkout

import distsketch  # noqa: E402

project = "distsketch"
author = "distsketch developers"
copyright = "distsketch developers"  # noqa: A001
release = distsketch.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
]

templates_path = ["_templates"]
exclude_patterns = ["_build"]
root_doc = "index"

# -- autodoc / autosummary ------------------------------------------------------------------
autosummary_generate = True  # stub pages under generated/ (git-ignored), one per object
autosummary_imported_members = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autoclass_content = "class"  # the class docstring holds the constructor's Parameters
add_module_names = False

# -- numpydoc -------------------------------------------------------------------------------
numpydoc_show_class_members = False  # the class template lists the members itself
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

# -- nitpicky mode (sphinx-build -n) --------------------------------------------------------
# Without intersphinx the types of numpy, scipy, dask and the standard library that appear in
# signatures cannot resolve; they are named, not linked.
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|scipy|dask|distributed|zarr|pandas|collections|typing|types|"
               r"os|pathlib|concurrent|contextlib|numbers|threading|enum|dataclasses)\..*"),
    (r"py:class", r"(Any|Callable|Iterable|Iterator|Mapping|Sequence|ArrayLike|NDArray|"
                  r"Path|PathLike|Self|Literal|Optional|Union|TypeAlias)"),
    (r"py:class", r"(optional|default.*|array-like|array_like|sequence of .*|iterable)"),
]
# Internal classes named in the signatures of documented methods (a route's ``spec``, a
# pass's result): named, not documented.
nitpick_ignore = [
    ("py:class", "distsketch.models.base.FitSpec"),
    ("py:class", "distsketch.engine.fitpass.PassResult"),
    ("py:class", "distsketch.engine.features.FeatureMap"),
    ("py:class", "distsketch.engine.store.FitStore"),
    ("py:class", "distsketch._registry.Registry"),
]

# -- HTML -----------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"distsketch {release} API reference"
html_static_path: list[str] = []

# -- numpydoc sections every public object must have ---------------------------------------
# Checked here rather than with numpydoc_validation_checks, which applies one rule set to
# every object: a function or method documents each parameter (PR01, PR02) and what it
# returns (RT01); a public function and an estimator also show an example (EX01); an
# estimator lists its fitted attributes. Properties, attributes and data are not checked.
# A failed check is a warning, so ``sphinx-build -W`` (make docs) fails on it.
_logger = sphinx_logging.getLogger("distsketch.docs")

#: Codes of numpydoc.validate required by kind of object.
_REQUIRED = {
    "function": {"GL08", "PR01", "PR02", "RT01", "EX01"},
    "method": {"GL08", "PR01", "PR02", "RT01"},
    "class": {"GL08", "PR01", "PR02"},
    "exception": {"GL08"},
}


def _is_estimator(obj) -> bool:
    return isinstance(obj, type) and callable(getattr(obj, "fit", None))


def _documented(obj):
    """``obj``, or for a method without a docstring of its own the overridden method whose
    docstring it inherits (autodoc shows that one)."""
    if getattr(obj, "__doc__", None) or not inspect.isfunction(obj) or "." not in obj.__qualname__:
        return obj
    owner = sys.modules[obj.__module__]
    for part in obj.__qualname__.split(".")[:-1]:
        owner = getattr(owner, part, None)
    for base in getattr(owner, "__mro__", ())[1:]:
        inherited = base.__dict__.get(obj.__name__)
        if getattr(inherited, "__doc__", None):
            return inherited
    return obj


def _check_sections(app, what, name, obj, options, lines):
    required = set(_REQUIRED.get(what, ()))
    if not required:
        return
    if what == "class" and _is_estimator(obj):
        required.add("EX01")
    try:
        report = validate(get_doc_object(_documented(obj)))
    except Exception as exc:  # numpydoc cannot read the object's source
        _logger.warning("[sections] %s: not checked (%s)", name, exc)
        return
    errors = report["errors"]
    if what == "class":  # a result dataclass may describe its fields as Attributes
        described = {n.strip() for item in NumpyDocString(obj.__doc__ or "")["Attributes"]
                     for n in item.name.split(",")}
        missing = set(inspect.signature(obj).parameters) - described
        errors = [(code, msg) for code, msg in errors if code != "PR01" or missing - {
            n.strip() for item in NumpyDocString(obj.__doc__ or "")["Parameters"]
            for n in item.name.split(",")}]
    problems = [f"{code}: {msg}" for code, msg in errors if code in required]
    if what == "class" and _is_estimator(obj):
        if not NumpyDocString(obj.__doc__ or "")["Attributes"]:
            problems.append("no Attributes section (an estimator lists its fitted attributes)")
    if problems:
        _logger.warning("[sections] %s: %s", name, "; ".join(problems))


# -- short names in signatures --------------------------------------------------------------
# Annotations are strings (``from __future__ import annotations``); a name a module imports for
# type checking only stays as written in the signature. Such names resolve to the public path
# of the object they name.
SHORT_NAMES = {
    "Kernel": "distsketch.kernels.Kernel",
    "Standardized": "distsketch.kernels.Standardized",
    "Sketch": "distsketch.sketches.Sketch",
    "RealizedSketch": "distsketch.sketches.RealizedSketch",
    "EngineOptions": "distsketch.EngineOptions",
    "Tuning": "distsketch.Tuning",
    "Route": "distsketch.Route",
    "RouteFit": "distsketch.RouteFit",
    "CoefTable": "distsketch.CoefTable",
    "Loss": "distsketch.losses.Loss",
    "Curvature": "distsketch.losses.Curvature",
    "Reducer": "distsketch.engine.Reducer",
    "Workspace": "distsketch.engine.Workspace",
    "CandidateStore": "distsketch.CandidateStore",
    "StoreDirectory": "distsketch.StoreDirectory",
    "Selection": "distsketch.model_selection.select.Selection",
}


def _resolve_short_name(app, env, node, contnode):
    target = SHORT_NAMES.get(node.get("reftarget", ""))
    if node.get("refdomain") != "py" or target is None:
        return None
    return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder,
                                             node["reftype"], target, node, contnode)


def setup(app):
    app.connect("autodoc-process-docstring", _check_sections, priority=400)
    app.connect("missing-reference", _resolve_short_name)
