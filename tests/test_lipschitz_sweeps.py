"""The Newton sweeps of the Lipschitz solver (ε-SVR against the Nystroem pipelines).

Held blocks swept without a dask graph give bitwise the dask sweep's sums (a direction and its
line-search grid, Grams, the window gathered), and the grid's lean loss values are bitwise the
full profile's. A sweep from the last Grams' point forms only their change over the rows whose
curvature moved (``Iterate.delta``, the driver adds the Grams it kept), the first sweep counts
the rows at each curvature level for the μ it does not know yet (``Loss.level_counts``), and the
window's gradient sums are taken from the gathered rows (no second read of the block). Checked
against the dense formulas, and whole fits against the same fits without them and CVXPY."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
from distsketch.losses.quantile import Pinball
from distsketch.losses.radial import EpsilonInsensitive, Huber, _Radial
from distsketch.solvers.lipschitz import newton
from distsketch.solvers.lipschitz.direction import newton_direction
from reference.lipschitz import held_sweep_data


def _setup(n=230, m=9, rows=50, seed=5):
    return held_sweep_data(n=n, m=m, rows=rows, seed=seed)


def _dense_gram(loss, C, R, mu, base):
    """``Σ_i (h_μ''(r_i) − base) c̃_i c̃_iᵀ`` (c̃ = [c; 1]) by the dense formula."""
    curv = loss.curvature(R, mu, base=base)
    w = np.zeros(len(R))
    w[curv.rows] = curv.values
    Ct = np.hstack([C, np.ones((len(C), 1))])
    return Ct.T @ (w[:, None] * Ct)


@pytest.mark.parametrize("loss, mu, base", [
    (EpsilonInsensitive(0.3), 0.5, 0.0), (EpsilonInsensitive(0.3), 0.5, 2.0),
    (Pinball(0.3), 0.4, 0.0), (Pinball(0.3), 0.4, 2.5), (Huber(0.8), 0.0, 1.0)],
    ids=["eps-base0", "eps-base1/mu", "pinball-base0", "pinball-base1/mu", "huber"])
def test_delta_grams_are_the_change_from_the_iterate(loss, mu, base):
    """A sweep with ``delta`` returns ``Q(F + ΔF) − Q(F)`` (the dense Grams at the full step
    less those at the iterate, whatever the base), over fewer rows than the full Grams; the
    other sums are the full sweep's, bitwise."""
    from distsketch.engine.sweep import Iterate, Sweeper

    data, X, Y, C, y, rng = _setup()
    A, dA = rng.normal(size=(9, 1)) * 0.3, rng.normal(size=(9, 1)) * 0.05
    kw = dict(mu=mu, grid=newton.GRID, base=base, collect=True,
              window=3.0 if loss.smoothed else 0.0)
    full = Sweeper(data, X, Y, split_every=2)(Iterate(loss, A, np.array([0.1]), dA,
                                                      np.array([0.01]), **kw))
    part = Sweeper(data, X, Y, split_every=2)(Iterate(loss, A, np.array([0.1]), dA,
                                                      np.array([0.01]), delta=True, **kw))
    F = C @ A + 0.1 - y[:, None]
    R = F + C @ dA + 0.01
    change = _dense_gram(loss, C, R, mu, base) - _dense_gram(loss, C, F, mu, base)
    scale = np.abs(_dense_gram(loss, C, R, mu, 0.0)).max()
    np.testing.assert_allclose(part["Q"], change, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(full["Q"], _dense_gram(loss, C, R, mu, base), rtol=0,
                               atol=1e-12 * scale)
    assert np.any(part["Q"])  # some rows moved: a real test of the change
    for key in full:
        if key != "Q":
            assert np.array_equal(part[key], full[key]), key


def test_window_sums_are_the_dense_ones():
    """``Ca_out`` and ``sa_out`` (the gradient sums without the gathered window, taken from
    the gathered rows) are ``Cᵀα`` and ``Σα`` with the window's entries zeroed."""
    from distsketch.engine.sweep import Iterate, Sweeper

    data, X, Y, C, y, rng = _setup()
    loss, mu = EpsilonInsensitive(0.3), 0.4
    A = rng.normal(size=(9, 1)) * 0.3
    out = Sweeper(data, X, Y, split_every=2)(Iterate(loss, A, np.array([0.1]), None, None,
                                                     mu, (), collect=True, window=3.0))
    R = C @ A + 0.1 - y[:, None]
    alpha = loss.gradient(R, mu)
    rows, _, _ = loss.band(R, mu, width=3.0 * mu)
    assert 0 < len(rows) < len(R)
    np.testing.assert_array_equal(np.sort(out["E_row"]), rows)
    alpha[rows] = 0.0
    np.testing.assert_allclose(out["Ca_out"], C.T @ alpha, rtol=0,
                               atol=1e-13 * np.abs(C).sum(axis=0).max())
    np.testing.assert_allclose(out["sa_out"], alpha.sum(axis=0), rtol=0, atol=1e-13 * len(R))


@pytest.mark.parametrize("loss", [EpsilonInsensitive(0.3), EpsilonInsensitive(0.0),
                                  Pinball(0.3), Pinball(0.8)], ids=repr)
def test_level_counts_are_the_curvatures(loss):
    """``level_counts`` at each μ: the rows at each curvature level, as ``curvature`` finds
    them (its columns follow ``curvature_levels``)."""
    rng = np.random.default_rng(7)
    R = rng.normal(scale=1.3, size=(2000, 1))
    mus = 2.0 ** (np.arange(-24, 13) / 4.0)
    counts = loss.level_counts(R, mus)
    assert counts.shape == (len(mus), 2)
    for k, mu in enumerate(mus):
        levels = loss.curvature_levels(1, mu)
        assert len(levels) == 2
        for j, level in enumerate(levels):
            at = len(R) - len(loss.curvature(R, mu, base=level).rows)
            assert counts[k, j] == at, (mu, level)
    assert loss.level_counts(np.zeros((5, 2)), mus) is None  # d > 1: not counted
    assert Huber(1.0).level_counts(R, mus) is None


def _record_sweeps(monkeypatch):
    from distsketch.solvers.lipschitz import routes as lipschitz_routes

    seen = []
    real = lipschitz_routes.HeldSweeps.__call__

    def call(self, it):
        seen.append(it)
        return real(self, it)

    monkeypatch.setattr(lipschitz_routes.HeldSweeps, "__call__", call)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("loss, intercept", [(EpsilonInsensitive(0.1), False),
                                             (EpsilonInsensitive(0.1), True),
                                             (Pinball(0.3), True)], ids=["eps", "eps-b0", "pinball"])
def test_fit_with_delta_grams_is_certified_and_cvxpy(monkeypatch, loss, intercept):
    """Whole fits by the smoothing continuation (``whole_problem_entries = 0``: the entries
    are not gathered as the whole problem): with the kept Grams (some sweeps ask for their
    change only) and without them (DELTA_GRAM_BYTES = 0, every Gram whole) both certify the
    gap and reach CVXPY's objective on the same features; the first sweep picks the next
    one's level from its counts, which is the level most rows sit at there."""
    from reference.lipschitz import data, reference

    X, y = data(600, 1, 2, 20)
    kw = dict(loss=loss, sketch=ds.SubSampling(30), lam=1e-4, tol=1e-10, max_iter=300,
              fit_intercept=intercept, random_state=3,
              options=ds.EngineOptions(block_dtype="float64", block_rows=128,
                                       tuning=ds.Tuning(whole_problem_entries=0)))
    seen = _record_sweeps(monkeypatch)
    fast = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), **kw).fit(X, y)
    assert any(it.delta for it in seen)
    assert seen[0].level_mus is not None and not any(it.level_mus is not None
                                                     for it in seen[1:])
    seen.clear()
    monkeypatch.setattr(newton, "DELTA_GRAM_BYTES", 0)
    whole = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), **kw).fit(X, y)
    assert not any(it.delta for it in seen)
    ref, _, _ = reference(fast, X, y, loss, 1e-4, None, intercept, gamma=0.5)
    for est in (fast, whole):
        assert est.duality_gap_ <= 1e-10 * est.objective_
        assert abs(est.objective_ - ref) <= 1e-6 * ref
    assert abs(fast.objective_ - whole.objective_) <= 2e-10 * whole.objective_


def test_kept_grams_plus_their_change_are_the_full_grams(monkeypatch):
    """At every Newton sweep that asked for the change only, the Grams the driver solves with
    (the kept ones plus the change) are those the same sweep forms whole, to rounding. (The
    sweep counts of the two fits may differ: rounding moves the continuation's decisions.)
    The smoothing continuation: ``whole_problem_entries = 0``."""
    import dataclasses

    from distsketch.solvers.lipschitz import routes as lipschitz_routes
    from reference.lipschitz import data

    X, y = data(600, 1, 2, 20)
    real = lipschitz_routes.HeldSweeps.__call__
    whole = {}

    def call(self, it):
        out = real(self, it)
        whole.clear()
        if it.delta:
            whole["Q"] = real(self, dataclasses.replace(it, delta=False))["Q"]
        return out

    checked = []
    direction = newton_direction

    def recording(prob, lam, stats, kind, base, gXi, gb):
        if "Q" in whole:
            full = np.broadcast_to(whole["Q"], stats["Q"].shape)
            scale = max(np.abs(full).max(), 1.0)
            np.testing.assert_allclose(stats["Q"], full, rtol=0, atol=1e-12 * scale)
            checked.append(True)
        return direction(prob, lam, stats, kind, base, gXi, gb)

    monkeypatch.setattr(lipschitz_routes.HeldSweeps, "__call__", call)
    monkeypatch.setattr(newton, "newton_direction", recording)
    est = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss=EpsilonInsensitive(0.1),
                               sketch=ds.SubSampling(30), lam=1e-4, tol=1e-10, max_iter=300,
                               random_state=4, options=ds.EngineOptions(
                                   block_dtype="float64", block_rows=128,
                                   tuning=ds.Tuning(whole_problem_entries=0))).fit(X, y)
    assert len(checked) >= 3
    assert est.duality_gap_ <= 1e-10 * est.objective_


def test_first_level_is_the_commonest_at_the_first_mu(monkeypatch):
    """The level the first Gram sweep subtracts (from the probe's counts) is the one most of
    its rows sit at, as that sweep's own ``at_level`` counts confirm."""
    from distsketch.solvers.lipschitz import routes as lipschitz_routes
    from reference.lipschitz import data

    X, y = data(600, 1, 2, 20)
    outs = []
    real = lipschitz_routes.HeldSweeps.__call__

    def call(self, it):
        out = real(self, it)
        outs.append((it, out))
        return out

    monkeypatch.setattr(lipschitz_routes.HeldSweeps, "__call__", call)
    ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss=EpsilonInsensitive(0.05),
                         sketch=ds.SubSampling(30), lam=1e-4, tol=1e-8, max_iter=300,
                         random_state=3).fit(X, y)
    it, out = outs[1]  # the first sweep with Grams
    assert it.gram and len(it.levels) == 2
    assert it.base == it.levels[int(np.argmax(out["at_level"]))]


# --------------------------------------------------------------------------- held sweeps, lean values


@pytest.mark.parametrize("loss", [EpsilonInsensitive(0.4), EpsilonInsensitive(0.0),
                                  Huber(0.7)], ids=lambda l: f"{l.name}")
@pytest.mark.parametrize("d", [1, 3])
def test_lean_values_are_the_profiles(loss, d):
    """The radial losses' ``value`` (the line-search grid's, 13 per block and sweep) computes
    the profile alone: bitwise the value of the full profile, smoothed or not, in the tube,
    the band and beyond."""
    rng = np.random.default_rng(4)
    R = rng.normal(scale=1.5, size=(3000, d))
    for mu in (0.0, 0.05, 0.6, 10.0):
        np.testing.assert_array_equal(loss.value(R, mu), _Radial.value(loss, R, mu))


def _sweep_setup(n=230, m=9, rows=50, seed=5):
    from distsketch.engine.sweep import Sweeper

    return (Sweeper, *held_sweep_data(n=n, m=m, rows=rows, seed=seed))


def test_held_sweeps_are_bitwise_the_dask_sweep():
    """A sweep over held blocks without a dask graph (lipschitz_routes.HeldSweeps: the same block
    function, the same fixed tree of sums, on a thread pool or in this thread) returns bitwise
    the dask sweep's sums — with a direction and its line-search grid, Grams, the window
    gathered — and counts as one pass."""
    import dask

    from distsketch.engine.sweep import Iterate
    from distsketch.solvers.lipschitz.routes import HeldSweeps

    Sweeper, data, X, Y, C, y, rng = _sweep_setup()
    it = Iterate(EpsilonInsensitive(0.3), rng.normal(size=(9, 1)), np.array([0.1]),
                 rng.normal(size=(9, 1)) * 0.1, np.array([0.01]), 0.5, newton.GRID,
                 collect=True, window=3.0, levels=(0.0, 2.0))
    ref = Sweeper(data, X, Y, split_every=2)(it)
    for slots in (1, 2, 3):
        sweeper = Sweeper(data, X, Y, split_every=2)
        held = HeldSweeps(sweeper, slots)
        try:
            with dask.config.set(scheduler="sync"):  # its own threads, whatever the scheduler
                out = held(it)
        finally:
            held.close()
        assert held.count == sweeper.count == 1
        assert sorted(out) == sorted(ref)
        for key in ref:
            assert np.array_equal(out[key], ref[key]), key
    # the sums are those of the dense formulas
    A = it.A + it.dA
    R = C @ A + it.b0 + it.db0 - y[:, None]
    alpha = it.loss.gradient(R, it.mu)
    np.testing.assert_allclose(ref["Ca"], C.T @ alpha, rtol=0,
                               atol=1e-12 * np.abs(C.T @ alpha).max())
    F = C @ it.A + it.b0 - y[:, None]
    dF = C @ it.dA + it.db0
    grid = [it.loss.value(F + t * dF, it.mu).sum() for t in newton.GRID]
    np.testing.assert_allclose(ref["grid"], grid, rtol=1e-13)


def test_fit_with_held_sweeps_equals_the_dask_sweeps(monkeypatch):
    """A whole ε-SVR fit: held blocks swept without a graph (the default without a store) and
    with the dask sweeper (_held_sweeps disabled) give the bitwise same model, sweeps and
    passes; the fit is certified and its objective is CVXPY's on the same features."""
    from distsketch.solvers.lipschitz import routes as lipschitz_routes
    from reference.lipschitz import data, reference

    X, y = data(600, 1, 2, 20)
    kw = dict(loss=EpsilonInsensitive(0.1), sketch=ds.SubSampling(30), lam=1e-4, tol=1e-10,
              max_iter=200, fit_intercept=False, random_state=3,
              options=ds.EngineOptions(block_dtype="float64", block_rows=128))
    used = []
    real = lipschitz_routes.held_sweeps

    def recording(*args):
        out = real(*args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(lipschitz_routes, "held_sweeps", recording)
    fast = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), **kw).fit(X, y)
    monkeypatch.setattr(lipschitz_routes, "held_sweeps", lambda *args: None)
    slow = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), **kw).fit(X, y)
    assert used == [True]
    assert np.array_equal(fast.dual_coef_, slow.dual_coef_)
    assert fast.n_iter_ == slow.n_iter_ and fast.n_passes_ == slow.n_passes_
    assert fast.duality_gap_ <= 1e-10 * fast.objective_
    ref, _, _ = reference(fast, X, y, EpsilonInsensitive(0.1), 1e-4, None, False, gamma=0.5)
    assert abs(fast.objective_ - ref) <= 1e-6 * ref
