"""The error measures the tests bound: how far a computed result is from its reference."""

import numpy as np


def rel_err(a, b):
    """Max elementwise relative error |a − b| / |b|."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b) / np.abs(b)))


def norm_rel_err(a, b):
    """max|a − b| / max|b| (for sums whose entries may be near zero)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
