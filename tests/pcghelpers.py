"""Shared data of the PCG tests (test_pcg, test_pcg_regressor, test_pcg_sisokr,
test_pcg_ill_conditioned); their dense references are in :mod:`reference.closed_forms`."""

import numpy as np


def data(n=400, t=1, seed=0):
    """Smooth targets of 3 inputs (t columns, 1-D when t = 1), offset 2 (an intercept to fit)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] + 0.3 * np.arange(t)[None, :] * X[:, 2:3] \
        + 0.1 * rng.normal(size=(n, t)) + 2.0
    return X, (Y[:, 0] if t == 1 else Y)


def repeated(n_distinct=50, copies=12, noise=0.0, seed=0):
    """``copies`` copies of ``n_distinct`` rows of 3 inputs (the issue's repeated rows) and
    their smooth targets; with ``noise`` every copy after the first is moved by
    ``noise · N(0, 1)`` (distinct rows, numerically coincident for small ``noise``)."""
    rng = np.random.default_rng(seed)
    Xd = rng.normal(size=(n_distinct, 3))
    yd = np.sin(Xd[:, 0]) + 0.5 * Xd[:, 1]
    X = np.tile(Xd, (copies, 1))
    if noise:
        X[n_distinct:] += noise * rng.normal(size=X[n_distinct:].shape)
    return X, np.tile(yd, copies)
