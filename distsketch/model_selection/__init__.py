"""Model selection: the cross-validating estimators (:mod:`.krr_cv`, :mod:`.sisokr_cv`, with
their folds :mod:`.folds`, grids :mod:`.grid`, scoring :mod:`.scoring` and SISOKRCV's fold
algebra :mod:`.fold_algebra`), :func:`select` over λ, rank, kernels and widths
(:mod:`.select`), and candidate kernel grids (:mod:`.kernel_grid`)."""

from .grid import GridEdgeWarning
from .krr_cv import SketchedKRRCV
from .scoring import UnresolvedScoresError
from .sisokr_cv import SISOKRCV

__all__ = ["SketchedKRRCV", "SISOKRCV", "GridEdgeWarning", "UnresolvedScoresError"]
