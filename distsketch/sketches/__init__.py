"""Sketches ``R = R_mix · R_sub``: specifications and their realisations.

Block math: numpy and scipy only (no dask)."""

from .base import (TILE, Sketch, Identity, SubSampling, PSparsified, Accumulation, GaussianSketch,
    CountSketch, RealizedSketch, SparseSketch, TiledSketch, SKETCHES, check_sketch,
    sketch_from_config, approximate_leverage_scores, LeverageScores)

__all__ = ["TILE", "Sketch", "Identity", "SubSampling", "PSparsified", "Accumulation",
           "GaussianSketch", "CountSketch", "RealizedSketch", "SparseSketch", "TiledSketch",
           "SKETCHES", "check_sketch", "sketch_from_config", "approximate_leverage_scores",
           "LeverageScores"]
