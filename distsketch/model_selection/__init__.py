"""Model selection: the cross-validating estimators (:mod:`.cv`), :func:`select` over λ,
rank, kernels and widths (:mod:`.select`), and candidate kernel grids (:mod:`.kernel_grid`)."""

from .cv import (SketchedKRRCV, SISOKRCV, GridEdgeWarning, UnresolvedScoresError)

__all__ = ["SketchedKRRCV", "SISOKRCV", "GridEdgeWarning", "UnresolvedScoresError"]
