"""Test helpers for people extending distsketch: contract suites for kernels and sketches
(:mod:`.contracts`, re-exported here) and numpy dressed as a compute device for the CUDA
backend's code path (:mod:`.devices`)."""

from .contracts import (
    FLOAT32_EXP_ULPS,
    KernelContract,
    SketchContract,
    assert_rel_close,
    assert_same,
    dense,
    gram_inputs,
)

__all__ = ["KernelContract", "SketchContract", "dense", "assert_same", "assert_rel_close",
           "gram_inputs", "FLOAT32_EXP_ULPS"]
