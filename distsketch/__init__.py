"""distsketch: sketched kernel models for structured prediction and multi-output regression,
trained out of core with one streaming pass on Dask.

Estimators: :class:`SISOKR` (IOKR / SIOKR / ISOKR / SISOKR by choice of sketches),
:class:`SketchedKRR`, the Lipschitz-loss machines :class:`SketchedRegressor` and
:class:`SketchedQuantileRegressor` (losses in :mod:`distsketch.losses`) and the transformer :class:`SketchedFeatures`. Kernels live in
:mod:`distsketch.kernels`, sketches in :mod:`distsketch.sketches`, engine knobs in
:class:`EngineOptions` (the routes' tuning knobs in its :class:`Tuning`), the block map-reduce
in :mod:`distsketch.engine`. The layout and how to extend each part: docs/design/layout.md and
docs/guide/extending.md.

The package is imported lazily (PEP 562): ``import distsketch`` loads nothing but this file, and
each name below loads its module on first use, so that ``import distsketch`` and the command
line start fast and scikit-learn is never imported by the package itself.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import compat
from ._version import __version__

compat.install()

#: Public names and the submodule each lives in.
_NAMES = {
    "SISOKR": "models.sisokr", "SketchedKRR": "models.krr",
    "SISOKRCV": "model_selection.sisokr_cv", "SketchedKRRCV": "model_selection.krr_cv",
    "SketchedRegressor": "models.regressors", "SketchedQuantileRegressor": "models.regressors",
    "SketchedFeatures": "models.transformers",
    "CandidateStore": "decoding.candidates", "StoreDirectory": "engine.store",
    "EngineOptions": "options", "Tuning": "options", "load": "io.persist",
    "standardized": "engine.rows",
    "Gaussian": "kernels", "GaussianTanimoto": "kernels", "Laplacian": "kernels",
    "Linear": "kernels", "Matern": "kernels", "Polynomial": "kernels",
    "Standardized": "kernels", "Tanimoto": "kernels",
    "Identity": "sketches", "SubSampling": "sketches", "PSparsified": "sketches",
    "Accumulation": "sketches", "GaussianSketch": "sketches", "LeverageScores": "sketches",
    "CountSketch": "sketches",
    "Route": "solvers.routes", "RouteFit": "solvers.routes", "CoefTable": "solvers.routes",
}
#: Submodules reachable as attributes (``distsketch.metrics``) without importing them.
_SUBMODULES = ("metrics", "losses", "kernels", "sketches", "io", "engine", "models",
               "model_selection", "backends", "testing")

__all__ = ["__version__", *_NAMES, "NotFittedError", "metrics", "losses", "kernels",
           "sketches"]


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    elif name == "NotFittedError":  # built on first use: see estimator.not_fitted_error
        value = importlib.import_module(".models.base", __name__).not_fitted_error()
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    elif name in compat.MOVED:  # the flat layout's module paths, for one release
        value = compat.moved_module(name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
