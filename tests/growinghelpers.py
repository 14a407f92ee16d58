"""What the tests of appended rows share: a regression problem, and a model fitted on the
first rows with the further slices appended batch by batch."""

import numpy as np


def problem(n=150, d=4, seed=0):
    """``n`` rows of ``d`` standard normal inputs and a smooth target with noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def appended(model, X, Y, cuts):
    """``model`` fitted on the rows before ``cuts[0]``, then each further slice appended."""
    model.fit(X[: cuts[0]], Y[: cuts[0]])
    for a, b in zip(cuts, cuts[1:] + [len(X)]):
        model.partial_fit(X[a:b], Y[a:b])
    return model
