"""The fast paths of the Lipschitz solver (ε-SVR against the Nystroem pipelines):
the restricted polish's primal–dual active-set steps (checked against CVXPY on the same
features), the sweeps over held blocks without a dask graph (bitwise the dask sweep's sums),
the line-search grid's lean loss values (bitwise the profile's) and the predictions and
direction of a Newton sweep read from ``C`` at once."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
from distsketch.solvers.lipschitz import newton, polish
from distsketch.losses.quantile import Pinball
from distsketch.losses.radial import EpsilonInsensitive, Huber, _Radial

from reference.lipschitz import cvx_scalar, held_sweep_data, whole_window

cp = pytest.importorskip("cvxpy")


def _restricted_problem(loss, intercept, n=300, r=12, seed=0, lam=1e-3):
    """Every entry in the window (nothing kept linear): the restricted problem is the whole
    one, solved by CVXPY (Clarabel) as the reference ``(objective, x, b)``."""
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, r))
    y = Phi @ rng.normal(size=r) * 0.5 + rng.standard_t(3, size=n)
    ref = cvx_scalar(Phi, y, lam, loss, intercept)
    return Phi, y, lam, ref


def _objective(loss, Phi, y, lam, x, b):
    u = Phi @ x + b - y
    return float(loss.value(u[:, None], 0.0).sum()) / len(y) + lam / 2 * float(x @ x)


@pytest.mark.parametrize("loss", [Pinball(0.3), EpsilonInsensitive(0.0)], ids=lambda l: l.name)
@pytest.mark.parametrize("intercept", [False, True])
def test_active_set_steps_repair_a_wide_band(loss, intercept):
    """A smoothing band wider than the solution's kinks (as after a stage of the restricted
    polish): the solution's partition with the entry nearest its kink also held. The
    active-set steps (polish._active_set) release it and return the non-smooth problem's
    minimiser: CVXPY's objective (to its 1e-8), no worse than it, its point and partition,
    and multipliers that are a subgradient there (λx = −Φᵀβ/n, Σβ = 0 with b₀)."""
    Phi, y, lam, (ref, x_ref, b_ref) = _restricted_problem(loss, intercept, r=40, lam=3e-2)
    n, r = Phi.shape
    t = y.copy()  # kinks at 0: pinball, ε = 0
    cols = np.zeros(n, dtype=np.int64)
    lo, hi = loss.kink_bounds(cols, np.zeros(n), 1)
    u = Phi @ x_ref + b_ref - y
    held = np.abs(u) <= 1e-6
    assert 2 <= held.sum() < r + intercept
    beta = np.where(u < 0, lo, hi).astype(np.float64)
    wide = held.copy()
    wide[np.argmin(np.where(held, np.inf, np.abs(u)))] = True
    Eb = np.ones((n, 1)) if intercept else None
    found = polish._active_set(Phi, Eb, t, lo, hi, np.zeros(r + (1 if intercept else 0)), cols,
                               lam, n, wide, beta)
    assert found is not None
    x, bk, beta_k, held_k, steps = found
    assert steps >= 2  # the wide band was moved, not accepted
    b = float(bk[0]) if intercept else 0.0
    obj = _objective(loss, Phi, y, lam, x, b)
    assert abs(obj - ref) <= 1e-8 * abs(ref)
    assert obj <= ref + 1e-12 * abs(ref)
    np.testing.assert_allclose(x, x_ref, atol=1e-5 * np.abs(x_ref).max())
    np.testing.assert_array_equal(held_k, held)
    assert np.all(beta_k >= lo - 1e-9) and np.all(beta_k <= hi + 1e-9)
    np.testing.assert_allclose(lam * x, -Phi.T @ beta_k / n, atol=1e-10)
    if intercept:
        assert abs(beta_k.sum()) <= 1e-9 * n


def test_active_set_gives_up_far_from_the_solution():
    """A partition far from the solution's (every entry near its kink held at random): the
    steps would move more than ACTIVE_SHARE of the held entries, so they give up (None) and
    the restricted polish's continuation goes on, rather than oscillate."""
    loss = Pinball(0.3)
    Phi, y, lam, _ = _restricted_problem(loss, False)
    n, r = Phi.shape
    cols = np.zeros(n, dtype=np.int64)
    lo, hi = loss.kink_bounds(cols, np.zeros(n), 1)
    rng = np.random.default_rng(1)
    held = np.zeros(n, dtype=bool)
    held[rng.choice(n, size=r, replace=False)] = True
    beta = np.where(rng.random(n) < 0.5, lo, hi)
    assert polish._active_set(Phi, None, y.copy(), lo, hi, np.zeros(r), cols, lam, n, held,
                              beta) is None


@pytest.mark.parametrize("loss", [Pinball(0.3), EpsilonInsensitive(0.0)], ids=lambda l: l.name)
def test_restricted_polish_still_exact_from_zero(loss):
    """The whole restricted polish (continuation, then active-set steps after each stage)
    from a start far from the solution (zero): CVXPY's objective and a valid subgradient."""
    Phi, y, lam, (ref, x_ref, _) = _restricted_problem(loss, False, seed=2)
    n, r = Phi.shape
    prob, s = whole_window(Phi, y, loss, False)
    Xi, _, fix = polish.restricted_polish(prob, lam, s, np.zeros((r, 1)), np.zeros(1), 1.0)
    obj = _objective(loss, Phi, y, lam, Xi[:, 0], 0.0)
    assert abs(obj - ref) <= 1e-8 * abs(ref)
    np.testing.assert_allclose(lam * Xi[:, 0], -Phi.T @ fix["fix_beta"] / n, atol=1e-10)


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

    from distsketch.solvers.lipschitz.routes import HeldSweeps
    from distsketch.engine.sweep import Iterate

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
