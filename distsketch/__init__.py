"""distsketch: sketched kernel models for structured prediction and multi-output regression,
trained out of core with one streaming pass on Dask.

Estimators: :class:`SISOKR` (IOKR / SIOKR / ISOKR / SISOKR by choice of sketches),
:class:`SketchedKRR`, the Lipschitz-loss machines :class:`SketchedRegressor` and
:class:`SketchedQuantileRegressor` (losses in :mod:`distsketch.losses`) and the transformer :class:`SketchedFeatures`. Kernels live in
:mod:`distsketch.kernels`, sketches in :mod:`distsketch.sketches`, engine knobs in
:class:`EngineOptions`, the block map-reduce in :mod:`distsketch.engine`. The layout and how
to extend each part: docs/design.md.
"""

from . import kernels, losses, metrics, sketches
from ._version import __version__
from .kernels import (
    Gaussian,
    GaussianTanimoto,
    Laplacian,
    Linear,
    Matern,
    Polynomial,
    Standardized,
    Tanimoto,
)
from .candidates import CandidateStore
from .models import SISOKR, SketchedKRR
from .cv import SISOKRCV, SketchedKRRCV
from .regressors import SketchedQuantileRegressor, SketchedRegressor
from .rows import standardized
from .options import EngineOptions
from .persist import load
from .store import StoreDirectory
from .transformers import SketchedFeatures
from .sketches import (
    Accumulation,
    CountSketch,
    GaussianSketch,
    Identity,
    LeverageScores,
    PSparsified,
    SubSampling,
)

__all__ = [
    "__version__",
    "SISOKR",
    "SISOKRCV",
    "SketchedKRR",
    "SketchedKRRCV",
    "SketchedRegressor",
    "SketchedQuantileRegressor",
    "SketchedFeatures",
    "CandidateStore",
    "StoreDirectory",
    "NotFittedError",
    "EngineOptions",
    "load",
    "standardized",
    "metrics",
    "losses",
    "kernels",
    "sketches",
    "Gaussian",
    "GaussianTanimoto",
    "Laplacian",
    "Linear",
    "Matern",
    "Polynomial",
    "Standardized",
    "Tanimoto",
    "Identity",
    "SubSampling",
    "PSparsified",
    "Accumulation",
    "GaussianSketch",
    "LeverageScores",
    "CountSketch",
]


def __getattr__(name: str):
    # Built on first use so that ``import distsketch`` does not import scikit-learn (see
    # estimator.not_fitted_error); the submodule io (file readers) is loaded on first access.
    if name == "NotFittedError":
        from .estimator import not_fitted_error

        return not_fitted_error()
    if name == "io":
        import importlib

        return importlib.import_module(".io", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
