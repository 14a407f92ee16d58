"""The restricted polish of the Lipschitz solver (scalar ε-insensitive and pinball):
the driver's exact solution of the problem restricted to the entries near their kinks, checked
against CVXPY on the same features; its primal–dual active-set steps, which repair a band
wider than the kinks and give up far from the solution; and the sign-sided subdifferential of
ε at its kinks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import distsketch as ds
from distsketch.losses.quantile import Pinball
from distsketch.losses.radial import EpsilonInsensitive
from distsketch.solvers.lipschitz import polish
from reference.kernels import gaussian_gram
from reference.lipschitz import cvx_scalar, data, reference, whole_window

cp = pytest.importorskip("cvxpy")

F64 = ds.EngineOptions(block_dtype="float64")


def test_epsilon_kink_bounds_are_sign_sided():
    """∂ max(|r| − ε, 0) is [0, 1] at r = +ε, [−1, 0] at r = −ε and [−1, 1] at r = 0 (ε = 0):
    a held multiplier of the wrong sign means the entry belongs inside the tube."""
    lo, hi = EpsilonInsensitive(0.3).kink_bounds(np.zeros(3, dtype=np.int64),
                                                 np.array([0.3, -0.3, 0.0]), 1)
    np.testing.assert_array_equal(lo, [0.0, -1.0, -1.0])
    np.testing.assert_array_equal(hi, [1.0, 0.0, 1.0])
    lo, hi = Pinball(0.2).kink_bounds(np.zeros(2, dtype=np.int64), np.zeros(2), 1)
    np.testing.assert_allclose(lo, [-0.2, -0.2])
    np.testing.assert_allclose(hi, [0.8, 0.8])


def _cvx(Phi, y, lam, loss, intercept):
    return cvx_scalar(Phi, y, lam, loss, intercept)


@pytest.mark.parametrize("loss", [Pinball(0.3), EpsilonInsensitive(0.0)], ids=lambda l: l.name)
@pytest.mark.parametrize("intercept", [False, True])
def test_restricted_polish_with_every_entry_is_the_exact_solution(loss, intercept):
    """With every entry in the window (nothing kept linear), the restricted problem is the
    whole one: for pinball and ε = 0 (one kink per entry, at 0) restricted_polish must return
    the non-smooth problem's minimiser itself, equal to CVXPY's on the same features — from
    a start far from it (zero) and whatever μ it starts with."""
    rng = np.random.default_rng(0)
    n, r = 300, 12
    Phi = rng.normal(size=(n, r))
    y = Phi @ rng.normal(size=r) * 0.5 + rng.standard_t(3, size=n)
    lam = 1e-3
    prob, s = whole_window(Phi, y, loss, intercept)
    Xi, b0, fix = polish.restricted_polish(prob, lam, s, np.zeros((r, 1)), np.zeros(1), 1.0)
    ref, x_ref, b_ref = _cvx(Phi, y, lam, loss, intercept)
    x = Xi[:, 0]
    u = Phi @ x + b0[0] - y
    obj = float(loss.value(u[:, None], 0.0).sum()) / n + lam / 2 * float(x @ x)
    # exact up to rounding; CVXPY's interior point is accurate to ~1e-9 relative
    assert abs(obj - ref) <= 1e-8 * abs(ref)
    assert obj <= ref + 1e-12 * abs(ref)
    np.testing.assert_allclose(x, x_ref, atol=1e-5 * np.abs(x_ref).max())
    # the multipliers are a subgradient at the solution: λx = −Φᵀβ/n, and Σβ = 0 with b₀
    beta = fix["fix_beta"]
    np.testing.assert_allclose(lam * x, -Phi.T @ beta / n, atol=1e-10)
    if intercept:
        assert abs(beta.sum()) <= 1e-9 * n


@pytest.mark.slow
@pytest.mark.parametrize("intercept", [False, True])
def test_svr_certified_to_rounding_in_few_sweeps(intercept):
    """Scalar ε-SVR on 3000 rows: the restricted polish at a μ change finds the solution
    (the gap at rounding level, the objective CVXPY's) in a handful of sweeps, where the
    smoothing continuation alone took ~40 sweeps to reach 1e-6 on CASP-20 000."""
    X, y = data(3000, 1, 5, 60)
    lam = 1e-4
    est = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss=EpsilonInsensitive(0.1),
                               sketch=ds.SubSampling(40), lam=lam, tol=1e-10, max_iter=200,
                               fit_intercept=intercept, random_state=3, options=F64).fit(X, y)
    assert est.duality_gap_ / est.objective_ <= 1e-10
    assert est.n_iter_ <= 20, est.n_iter_
    ref, _, _ = reference(est, X, y, EpsilonInsensitive(0.1), lam, None, intercept, gamma=0.5)
    assert abs(est.objective_ - ref) <= 1e-6 * ref


def test_radial_epsilon_zero_multi_output_reaches_the_bar():
    """ε = 0 with d = 3 outputs and an output matrix: the loss ‖r‖₂ is a cone at r = 0, not a
    sphere, so neither polish applies; the smoothing continuation alone certifies the
    bar (relative gap ≤ 1e-8 at tol = 1e-10; measured 77–269 sweeps, 4e-11 to 2.3e-10 over
    3 sketches × 2 seeds) and the objective is CVXPY's."""
    X, Y = data(120, 3, 3, 12)
    M = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.5], [0.2, 0.5, 1.0]])
    loss = EpsilonInsensitive(0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss=loss,
                                   sketch=ds.PSparsified(20, p=0.1), lam=1e-3, output_matrix=M,
                                   tol=1e-10, max_iter=400, random_state=3, options=F64).fit(X, Y)
    assert est.duality_gap_ / est.objective_ <= 1e-8
    ref, _, _ = reference(est, X, Y, loss, 1e-3, M, True, gamma=0.5)
    assert abs(est.objective_ - ref) <= 1e-6 * ref


def test_joint_quantiles_degenerate_vertex():
    """Joint quantiles (d = 3, M from quantile_gamma) where the whitened features have rank
    20 < m: at μ = 2e-4 the band holds 58 entries of which only 57 are independent kinks; the
    KKT system on them is inconsistent and its least-squares point leaves held entries 6e-6
    off their kinks (a relative gap of 2.5e-7 at a worse objective, and 300 sweeps ending
    with a ConvergenceWarning before). The restricted polish accepts a KKT point only with
    its held entries on their kinks, so it goes on to μ = 2e-5, where the 57 kinks give the
    solution: certified to tol without a warning, in a few sweeps, CVXPY's objective."""
    X, y = data(120, 1, 5, 12)
    q = (0.1, 0.5, 0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = ds.SketchedQuantileRegressor(ds.Gaussian(gamma=0.5), quantiles=q,
                                           quantile_gamma=2.0, sketch=ds.PSparsified(20, p=0.1),
                                           lam=1e-4, tol=1e-10, max_iter=400, random_state=5,
                                           options=F64).fit(X, y)
    assert est.duality_gap_ <= 1e-10 * est.objective_
    assert est.n_iter_ <= 40, est.n_iter_
    M = gaussian_gram(np.reshape(q, (-1, 1)), gamma=2.0)
    ref, _, _ = reference(est, X, y, Pinball(q), 1e-4, M, True, gamma=0.5)
    assert abs(est.objective_ - ref) <= 1e-6 * ref


# --------------------------------------------------------------------------- active-set steps


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
