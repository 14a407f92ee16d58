"""Old module paths of the flat layout, kept importable for one release.

``import distsketch.pcg`` (or ``from distsketch.store import StoreDirectory``, or unpickling an
object that names an old path) finds the module at its new place and warns once with a
``DeprecationWarning`` naming it. The finder is installed by ``distsketch/__init__.py``; it
knows only the names below and never shadows a module that exists.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["MOVED", "install"]

#: Old module (under ``distsketch.``) -> its new path (under ``distsketch.``).
MOVED = {
    "accumulate": "engine.accumulate", "admm": "solvers.lipschitz.admm",
    "blocks": "linalg.blocks", "candidates": "decoding.candidates", "config": "cli.config",
    "cuda": "backends.cuda", "cv": "model_selection", "decode": "decoding.preimage",
    "demo": "cli.demo", "estimator": "models.base", "features": "engine.features",
    "kernel_grid": "model_selection.kernel_grid", "lipschitz": "solvers.lipschitz.problem",
    "lipschitz_routes": "solvers.lipschitz.routes", "newton": "solvers.lipschitz.newton",
    "pcg": "solvers.pcg", "persist": "io.persist", "regressors": "models.regressors",
    "routes": "solvers.routes", "rows": "engine.rows", "select": "model_selection.select",
    "solve": "linalg.solve", "store": "engine.store", "sweep": "engine.sweep",
    "topk": "linalg.topk", "transformers": "models.transformers",
}


def moved_module(old: str):
    """The module that ``distsketch.<old>`` now is, after a ``DeprecationWarning``."""
    new = f"{__package__}.{MOVED[old]}"
    warnings.warn(f"distsketch.{old} moved to {new}; the old path goes in the next release",
                  DeprecationWarning, stacklevel=3)
    return importlib.import_module(new)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``distsketch.<old>`` and loads it as the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.rpartition(".")
        if package != __package__ or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = moved_module(spec.name.rpartition(".")[2])
        self._own_spec = module.__spec__  # the import system sets the alias's spec on it
        return module

    def exec_module(self, module):
        """The module is the new one, already executed: give it back its own spec (relative
        imports inside it check ``__package__`` against ``__spec__.parent``)."""
        module.__spec__ = self._own_spec


def install() -> None:
    """Add the finder to ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
