"""Progress bars: a fit shows the pass's bar and a bar per sweep only past
``SWEEP_PROGRESS_MINIMUM``, a bar keeps the in-memory sweeps of a fit without a store (the same
model), and ``progress`` from a numpy boolean is a plain bar while a number of seconds is a
threshold."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds


def _bars(out: str) -> int:
    return out.replace("\r", "\n").count("100% Completed")


@pytest.mark.slow
def test_an_iterative_fit_shows_the_pass_bar_and_no_bar_per_short_sweep(tmp_path, capsys,
                                                                        monkeypatch):
    """A Huber fit whose blocks are not held in memory (``sweep_memory=0``) sweeps its stored
    blocks once per iteration through dask: with ``progress=True`` the pass shows its bar, a
    sweep only past ``SWEEP_PROGRESS_MINIMUM`` (one bar per sweep before)."""
    from distsketch.engine import sweep

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_t(2, size=300)

    def fit(path):
        return ds.SketchedRegressor(ds.Gaussian(0.5), loss="huber", sketch=ds.SubSampling(30),
                                    lam=1e-3, random_state=0, store=str(tmp_path / path),
                                    options=ds.EngineOptions(progress=True, sweep_memory=0)
                                    ).fit(X, y)

    capsys.readouterr()
    model = fit("a.zarr")
    assert model.n_iter_ >= 2
    assert _bars(capsys.readouterr().out) == 1  # the pass
    monkeypatch.setattr(sweep, "SWEEP_PROGRESS_MINIMUM", 0.0)
    again = fit("b.zarr")
    assert _bars(capsys.readouterr().out) >= 1 + again.n_iter_  # a bar for every sweep
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


def test_progress_keeps_the_in_memory_sweeps(capsys, monkeypatch):
    """``store=None``: the sweeps read the pass's blocks held in memory whether or not a
    progress bar is asked for (a bar used to send every sweep through dask), bitwise the same
    model."""
    from distsketch.solvers.lipschitz import routes as lipschitz_routes

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = np.abs(X[:, 1]) + 0.1 * rng.standard_t(2, size=300)
    held = []
    real = lipschitz_routes.held_sweeps
    monkeypatch.setattr(lipschitz_routes, "held_sweeps",
                        lambda *a: held.append(real(*a)) or held[-1])

    def fit(progress):
        return ds.SketchedRegressor(ds.Gaussian(0.5), loss="huber", sketch=ds.SubSampling(30),
                                    lam=1e-3, random_state=0,
                                    options=ds.EngineOptions(progress=progress)).fit(X, y)

    quiet, shown = fit(False), fit(True)
    assert len(held) == 2 and all(h is not None for h in held)
    np.testing.assert_array_equal(shown.predict(X), quiet.predict(X))
    assert _bars(capsys.readouterr().out) == 1  # the pass of the second fit


def test_compute_progress_numpy_true_is_a_plain_bar(capsys):
    """``progress`` from a numpy boolean (a config value) shows the bar at once, as ``True``;
    a number of seconds is a threshold (a short computation then shows none)."""
    import dask

    from distsketch.engine.schedulers import compute

    task = dask.delayed(sum)([1, 2])
    capsys.readouterr()
    assert compute([task], progress=np.True_) == [3]
    assert _bars(capsys.readouterr().out) == 1
    assert compute([task], progress=5.0) == [3]
    assert _bars(capsys.readouterr().out) == 0
