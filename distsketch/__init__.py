"""distsketch: sketched kernel models for structured prediction and multi-output regression,
trained out of core with one streaming pass on Dask.

Estimators: :class:`SISOKR` (IOKR / SIOKR / ISOKR / SISOKR by choice of sketches) and
:class:`SketchedKRR`. Kernels live in :mod:`distsketch.kernels`, sketches in
:mod:`distsketch.sketches`, engine knobs in :class:`EngineOptions`.
"""

from . import kernels, metrics, sketches
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
from .models import SISOKR, NotFittedError, SketchedKRR
from .options import EngineOptions
from .persist import load
from .sketches import (
    Accumulation,
    CountSketch,
    GaussianSketch,
    Identity,
    PSparsified,
    SubSampling,
)

__all__ = [
    "__version__",
    "SISOKR",
    "SketchedKRR",
    "CandidateStore",
    "NotFittedError",
    "EngineOptions",
    "load",
    "metrics",
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
    "CountSketch",
]
