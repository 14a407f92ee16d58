"""What the tests of appended rows share: a regression problem, and a model fitted on the
first rows with the further slices appended batch by batch."""

import numpy as np
import pytest

import distsketch as ds


def problem(n=150, d=4, seed=0):
    """``n`` rows of ``d`` standard normal inputs and a smooth target with noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def cv_problem(n=200, seed=0):
    """``(X, y, Y)`` of the cross-validation tests: a scalar target with a mean and binary
    outputs of 6 columns, from 3 inputs."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] + 0.5 * rng.normal(size=n) + 2.0
    Y = (X @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(n, 6)) > 0.5).astype(float)
    return X, y, Y


def nan_rel(a, b):
    """``max |a − b| / max |b|`` over the entries that are not NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.nanmax(np.abs(a - b)) / np.nanmax(np.abs(b)))


def appended(model, X, Y, cuts):
    """``model`` fitted on the rows before ``cuts[0]``, then each further slice appended."""
    model.fit(X[: cuts[0]], Y[: cuts[0]])
    for a, b in zip(cuts, cuts[1:] + [len(X)]):
        model.partial_fit(X[a:b], Y[a:b])
    return model


def _killed(*args, **kw):
    raise KeyboardInterrupt("killed in the re-solve")


def killed_then_resumed(fitted, new, *, monkeypatch, module, name, path):
    """Append the rows ``new = (X, Y)`` to ``fitted`` (kept in the store ``path``) with
    ``module.name`` raising, a kill in the re-solve; then the model loaded from the store, which
    holds the fit's batch only, appends them again: that model."""
    monkeypatch.setattr(module, name, _killed)
    with pytest.raises(KeyboardInterrupt):
        fitted.partial_fit(*new)
    monkeypatch.undo()
    before = ds.load(str(path))  # the model of the first batch still loads
    assert [b["batch"] for b in before.batches_] == [0]
    return before.partial_fit(*new)

