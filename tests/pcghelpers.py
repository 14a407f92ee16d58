"""Shared data and error measure of the PCG tests (test_pcg, test_pcg_regressor,
test_pcg_sisokr)."""

import numpy as np


def data(n=400, t=1, seed=0):
    """Smooth targets of 3 inputs (t columns, 1-D when t = 1), offset 2 (an intercept to fit)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] + 0.3 * np.arange(t)[None, :] * X[:, 2:3] \
        + 0.1 * rng.normal(size=(n, t)) + 2.0
    return X, (Y[:, 0] if t == 1 else Y)


def rel(a, b) -> float:
    """``max |a − b| / max |b|``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.abs(a - b).max() / np.abs(b).max())
