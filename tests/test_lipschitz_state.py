"""The Newton route's typed state maps to the solver state stored between iterations without
loss: every dict a fit saves (probe, Newton, polish and sphere-polish modes) comes back
unchanged through ``NewtonState``, so a store killed mid-iteration resumes bitwise."""

import numpy as np
import pytest

import distsketch as ds
from distsketch.losses.quantile import Pinball
from distsketch.losses.radial import EpsilonInsensitive, Huber
from distsketch.solvers.lipschitz import problem as lipschitz
from distsketch.solvers.lipschitz.newton import NewtonState


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and np.array_equal(a, b, equal_nan=True))
    return type(a) is type(b) and (a == b or (a != a and b != b))


@pytest.mark.slow
@pytest.mark.parametrize("loss, d", [(Huber(0.3), 1), (EpsilonInsensitive(0.2), 2),
                                     (Pinball(0.7), 1)], ids=["huber", "epsilon-radial", "pinball"])
@pytest.mark.parametrize("whole", [4000, 0], ids=["whole", "window"])
def test_every_saved_state_round_trips_through_newton_state(tmp_path, monkeypatch, loss, d,
                                                            whole):
    """Both routes of the entry-wise kinks: the whole problem gathered (pinball: probe, one
    certified sweep, the polish pending) and the smoothing continuation (``whole = 0``)."""
    saved = []
    real = lipschitz.SolverState.save
    monkeypatch.setattr(lipschitz.SolverState, "save",
                        lambda self, state: saved.append(state) or real(self, state))
    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 3))
    Y = np.sin(X[:, :d]) + 0.3 * rng.standard_t(2, size=(120, d))
    ds.SketchedRegressor(ds.Gaussian(0.5), loss=loss, sketch=ds.SubSampling(25), lam=1e-3,
                         solver="newton", random_state=0, store=tmp_path / "s",
                         options=ds.EngineOptions(
                             block_dtype="float64",
                             tuning=ds.Tuning(whole_problem_entries=whole))).fit(
        X, Y if d > 1 else Y[:, 0])
    unfinished = [s for s in saved if not s.get("done")]
    assert len(unfinished) >= (2 if whole and isinstance(loss, Pinball) else 3)
    modes = {s.get("mode") for s in unfinished}
    assert modes - {None}, modes  # some saved mid-step
    for state in unfinished:
        body = {k: v for k, v in state.items() if k != "done"}
        assert _same(NewtonState.from_dict(body).as_dict(), body)
