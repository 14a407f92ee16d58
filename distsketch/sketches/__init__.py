"""Sketches ``R = R_mix · R_sub``: specifications and their realisations.

The base classes, the registry and the sketches drawn in one go (:mod:`.base`), the sketches
drawn tile by tile (:mod:`.tiled`) and leverage-score sampling (:mod:`.leverage`), re-exported
here.

Block math: numpy and scipy only (no dask)."""

from .base import (Sketch, Identity, SubSampling, Accumulation, RealizedSketch, SparseSketch,
    SKETCHES, check_sketch, sketch_from_config)
from .tiled import TILE, PSparsified, GaussianSketch, CountSketch, TiledSketch
from .leverage import approximate_leverage_scores, LeverageScores

__all__ = ["TILE", "Sketch", "Identity", "SubSampling", "PSparsified", "Accumulation",
           "GaussianSketch", "CountSketch", "RealizedSketch", "SparseSketch", "TiledSketch",
           "SKETCHES", "check_sketch", "sketch_from_config", "approximate_leverage_scores",
           "LeverageScores"]
