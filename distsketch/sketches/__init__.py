"""Sketches ``R = R_mix · R_sub``: specifications and their realisations.

The base classes and the registry (:mod:`.base`), the sketches drawn in one go
(:mod:`.sampling`), the sketches drawn tile by tile (:mod:`.tiled`), leverage-score sampling
(:mod:`.leverage`), a fitted model's realised sketch replayed as a specification
(:mod:`.fixed`) and the realisation whitened before the pass (:mod:`.whitened`), re-exported
here.

Block math: numpy and scipy only (no dask)."""

from .base import (
    SKETCHES,
    RealizedSketch,
    Sketch,
    SparseSketch,
    check_sketch,
    sketch_from_config,
)
from .sampling import Accumulation, Identity, SubSampling

# isort: split
# (the sketches register in import order, which lists them in messages: the basic ones first)
from .fixed import Fixed
from .leverage import LeverageScores, approximate_leverage_scores
from .tiled import TILE, CountSketch, GaussianSketch, PSparsified, TiledSketch
from .whitened import WhitenedSketch

__all__ = ["TILE", "Sketch", "Identity", "SubSampling", "PSparsified", "Accumulation",
           "GaussianSketch", "CountSketch", "RealizedSketch", "SparseSketch", "TiledSketch",
           "SKETCHES", "check_sketch", "sketch_from_config", "approximate_leverage_scores",
           "LeverageScores", "Fixed", "WhitenedSketch"]
