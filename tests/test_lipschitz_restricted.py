"""The restricted polish of the Lipschitz solver (scalar ε-insensitive and pinball, joint
quantiles): the driver's exact solution of the problem restricted to the entries near their
kinks (interior point, then the active set's vertex), checked against CVXPY on the same
features and against SciPy's solution of its dual; a wrong active set caught by the same
checks; its primal–dual active-set steps, which repair a band wider than the kinks and give up
far from the solution; the sign-sided subdifferential of ε at its kinks; and small problems
solved whole (every entry gathered) in three sweeps per λ."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import distsketch as ds
from distsketch.losses.quantile import Pinball
from distsketch.losses.radial import EpsilonInsensitive
from distsketch.solvers.lipschitz import restricted
from reference.kernels import gaussian_gram
from reference.lipschitz import (
    cvx_scalar,
    data,
    reference,
    restricted_dual_scipy,
    restricted_instance,
    restricted_objective,
    whole_window,
)

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
    Xi, b0, fix = restricted.restricted_polish(prob, lam, s, np.zeros((r, 1)), np.zeros(1))
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


@pytest.mark.parametrize("whole", [4000, 0], ids=["whole", "window"])
def test_joint_quantiles_degenerate_vertex(whole):
    """Joint quantiles (d = 3, M from quantile_gamma) where the whitened features have rank
    20 < m: a band of 58 entries holds only 57 independent kinks, whose KKT system is
    inconsistent; its least-squares point leaves held entries 6e-6 off their kinks (a
    relative gap of 2.5e-7 at a worse objective, and 300 sweeps ending with a
    ConvergenceWarning, with the band polish alone). The restricted polish accepts a KKT
    point only with its held entries on their kinks; its interior point names the 57 kinks
    (measured: 57 held, one active-set step), in the whole problem's three sweeps and in
    the smoothing continuation's (11): certified to tol without a warning, CVXPY's
    objective."""
    X, y = data(120, 1, 5, 12)
    q = (0.1, 0.5, 0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = ds.SketchedQuantileRegressor(ds.Gaussian(gamma=0.5), quantiles=q,
                                           quantile_gamma=2.0, sketch=ds.PSparsified(20, p=0.1),
                                           lam=1e-4, tol=1e-10, max_iter=400, random_state=5,
                                           options=ds.EngineOptions(
                                               block_dtype="float64",
                                               tuning=ds.Tuning(whole_problem_entries=whole))
                                           ).fit(X, y)
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
    """A partition wider than the solution's kinks (as an interior-point iterate may name):
    the solution's partition with the entry nearest its kink also held. The
    active-set steps (restricted.active_set) release it and return the non-smooth problem's
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
    found = restricted.active_set(Phi, Eb, t, lo, hi, np.zeros(r + (1 if intercept else 0)), cols,
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
    the restricted polish's interior point goes on, rather than oscillate."""
    loss = Pinball(0.3)
    Phi, y, lam, _ = _restricted_problem(loss, False)
    n, r = Phi.shape
    cols = np.zeros(n, dtype=np.int64)
    lo, hi = loss.kink_bounds(cols, np.zeros(n), 1)
    rng = np.random.default_rng(1)
    held = np.zeros(n, dtype=bool)
    held[rng.choice(n, size=r, replace=False)] = True
    beta = np.where(rng.random(n) < 0.5, lo, hi)
    assert restricted.active_set(Phi, None, y.copy(), lo, hi, np.zeros(r), cols, lam, n, held,
                              beta) is None


@pytest.mark.parametrize("loss", [Pinball(0.3), EpsilonInsensitive(0.0)], ids=lambda l: l.name)
def test_restricted_polish_still_exact_from_zero(loss):
    """The whole restricted polish (interior point, then active-set steps from its partition)
    from a start far from the solution (zero): CVXPY's objective and a valid subgradient."""
    Phi, y, lam, (ref, x_ref, _) = _restricted_problem(loss, False, seed=2)
    n, r = Phi.shape
    prob, s = whole_window(Phi, y, loss, False)
    Xi, _, fix = restricted.restricted_polish(prob, lam, s, np.zeros((r, 1)), np.zeros(1))
    obj = _objective(loss, Phi, y, lam, Xi[:, 0], 0.0)
    assert abs(obj - ref) <= 1e-8 * abs(ref)
    np.testing.assert_allclose(lam * Xi[:, 0], -Phi.T @ fix["fix_beta"] / n, atol=1e-10)


# --------------------------------------------------------------------------- the interior point


RESTRICTED_CASES = [(Pinball(0.3), 1), (EpsilonInsensitive(0.4), 1), (EpsilonInsensitive(0.0), 1),
                    (Pinball((0.1, 0.5, 0.9)), 3)]
RESTRICTED_IDS = ["pinball", "eps-two-kinks", "eps-zero", "joint-quantiles"]


@pytest.mark.parametrize("lam", [1e-2, 1e-6], ids=["lam-1e-2", "lam-1e-6"])
@pytest.mark.parametrize("intercept", [False, True], ids=["no-b0", "b0"])
@pytest.mark.parametrize("loss, d", RESTRICTED_CASES, ids=RESTRICTED_IDS)
def test_restricted_polish_is_scipys_optimum(loss, d, intercept, lam):
    """The restricted problem (every entry at each of its kinks — ε's rows twice, at ±ε —,
    a third of the rows kept linear, d = 3 outputs coupled by ``S = M^{1/2}``) solved by
    restricted_polish (interior point, then the active set's vertex) from a start far from
    it (zero): its objective is the optimum of the dual solved independently by SciPy
    (SLSQP on the box-constrained dual, strong duality), its point SciPy's ``x``, and its
    multipliers certify it exactly (``λx = −(g_x + Aᵀβ/n)``, the intercept's ``Σβ``)."""
    prob, s, A, Eb, t, lo, hi, g = restricted_instance(loss, d, intercept, seed=d)
    n, r = prob.n, prob.r
    out = restricted.restricted_polish(prob, lam, s, np.zeros((r, d)), np.zeros(d))
    assert out is not None
    Xi, b0, fix = out
    x = Xi.T.reshape(-1)
    obj = restricted_objective(A, Eb, t, lo, hi, g, lam, n, x, b0)
    dual, x_ref, _ = restricted_dual_scipy(A, Eb, t, lo, hi, g, lam, n)
    scale = max(abs(obj), 1.0)
    assert dual <= obj + 1e-10 * scale  # weak duality: SciPy's dual point is feasible
    assert obj - dual <= 1e-8 * scale  # and ours its optimum (SLSQP's accuracy)
    np.testing.assert_allclose(x, x_ref, rtol=0, atol=1e-4 * np.abs(x_ref).max())
    # the held multipliers (merged per row for ε's two kinks) are the polished point's dual
    rows, cols = np.asarray(s["E_row"]), np.asarray(s["E_col"])
    key = rows * d + cols
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    assert len(fix["fix_beta"]) == len(first)
    beta_e = np.zeros(len(t))
    beta_e[first] = fix["fix_beta"]  # a row's dual on its first entry: the same Aᵀβ
    grad = lam * x + g[: r * d] + A.T @ beta_e / n
    assert np.abs(grad).max() <= 1e-9 * max(np.abs(g).max(), 1.0)
    if intercept:
        assert np.abs(Eb.T @ beta_e / n + g[r * d:]).max() <= 1e-9


@pytest.mark.parametrize("loss, d", RESTRICTED_CASES, ids=RESTRICTED_IDS)
def test_a_wrong_active_set_is_caught(loss, d):
    """The checks above fail on a deliberately wrong active set: the KKT point with one
    held entry of the solution released to a bound (or one bound entry held) has an
    objective above SciPy's optimum by more than their tolerance, and its multipliers or
    residuals violate the KKT conditions (a multiplier outside its bounds, a held entry off
    its kink, a bound entry on the wrong side); the active-set steps do not accept it as it
    is."""
    lam = 1e-3
    prob, s, A, Eb, t, lo, hi, g = restricted_instance(loss, d, True, seed=d + 10)
    n, r = prob.n, prob.r
    rd = r * d
    cols = np.asarray(s["E_col"])
    Xi, b0, _ = restricted.restricted_polish(prob, lam, s, np.zeros((r, d)), np.zeros(d))
    x = Xi.T.reshape(-1)
    u = A @ x + b0[cols] - t
    tol_u = 1e-9 * max(np.abs(t).max(), 1.0)
    held = np.abs(u) <= tol_u
    beta = np.where(u > 0, hi, lo)
    dual, _, _ = restricted_dual_scipy(A, Eb, t, lo, hi, g, lam, n)
    for wrong in ("released", "held"):
        bad = held.copy()
        if wrong == "released":
            bad[np.flatnonzero(held)[0]] = False
        else:
            bad[np.argmin(np.where(held, np.inf, np.abs(u)))] = True
        out = ~bad
        gk = g[:rd] + A[out].T @ beta[out] / n
        sk = g[rd:] * n + np.bincount(cols[out], weights=beta[out], minlength=d)
        xw, bw, nu = restricted.kkt_point(A[bad], Eb[bad], t[bad], gk, sk, lam, n)
        obj = restricted_objective(A, Eb, t, lo, hi, g, lam, n, xw, bw)
        assert obj - dual > 1e-8 * max(abs(obj), 1.0), wrong
        bw_e = n * nu
        uw = A @ xw + bw[cols] - t
        violated = (np.any(bw_e < lo[bad] - 1e-9) or np.any(bw_e > hi[bad] + 1e-9)
                    or np.any(np.abs(uw[bad]) > tol_u)
                    or np.any((beta[out] == lo[out]) & (uw[out] > tol_u))
                    or np.any((beta[out] == hi[out]) & (uw[out] < -tol_u)))
        assert violated, wrong
        # and the active-set steps do not accept it as it is
        found = restricted.active_set(A, Eb, t, lo, hi, g, cols, lam, n, bad, beta)
        assert found is None or found[4] >= 2, wrong


# --------------------------------------------------------------------------- the whole problem


def _whole(entries):
    return ds.EngineOptions(block_dtype="float64", block_rows=64,
                            tuning=ds.Tuning(whole_problem_entries=entries))


@pytest.mark.parametrize("intercept", [False, True], ids=["no-b0", "b0"])
def test_small_svr_is_solved_whole_in_three_sweeps(intercept):
    """Scalar ε-SVR on 200 rows (400 entries: every row at +ε and −ε): the first certified
    sweep gathers the whole problem, the driver solves it exactly, and the next sweep
    certifies it to rounding — three sweeps (the probe, that sweep, the polished point's),
    CVXPY's objective, and the smoothing continuation's model (``whole_problem_entries =
    0``) to its certified tolerance; the same for any block size and scheduler."""
    X, y = data(200, 1, 4, 10)
    lam = 1e-4
    kw = dict(loss=EpsilonInsensitive(0.2), sketch=ds.SubSampling(30), lam=lam, tol=1e-10,
              max_iter=300, fit_intercept=intercept, random_state=2)
    whole = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), **kw, options=_whole(4000)).fit(X, y)
    assert whole.n_iter_ == 3
    assert whole.duality_gap_ <= 1e-12 * whole.objective_
    window = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), **kw, options=_whole(0)).fit(X, y)
    assert window.n_iter_ > 3
    assert window.duality_gap_ <= 1e-10 * window.objective_
    ref, _, _ = reference(whole, X, y, EpsilonInsensitive(0.2), lam, None, intercept,
                          gamma=0.5)
    assert abs(whole.objective_ - ref) <= 1e-7 * ref
    assert abs(whole.objective_ - window.objective_) <= 2e-10 * whole.objective_
    pw, pc = whole.predict(X), window.predict(X)
    np.testing.assert_allclose(pw, pc, rtol=0, atol=1e-4 * np.abs(pc).max())
    # a row's two entries split across blocks (37 rows each), another scheduler: the same
    # model, bitwise for the same blocks
    import dask

    for rows, sched in ((64, "sync"), (37, "threads")):
        with dask.config.set({"scheduler": sched, "distsketch.driver-threads": 1}):
            again = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), **kw, options=ds.EngineOptions(
                block_dtype="float64", block_rows=rows)).fit(X, y)
        assert again.n_iter_ == 3
        if rows == 64:
            assert np.array_equal(again.dual_coef_, whole.dual_coef_)
        else:
            np.testing.assert_allclose(again.predict(X), pw, rtol=0,
                                       atol=1e-8 * np.abs(pw).max())


def test_joint_quantile_path_is_solved_whole_to_rounding():
    """Joint quantiles (3 levels coupled by ``M``) over a λ path down to 1e-6, 150 rows (450
    entries): every λ in three sweeps, certified to rounding (the smoothing continuation,
    ``whole_problem_entries = 0``, takes 5, 12 and 10), CVXPY's objective at the smallest
    λ; and the same model for any block size and scheduler (bitwise for the same blocks)."""
    import dask

    X, y = data(150, 1, 6, 10)
    q = (0.1, 0.5, 0.9)
    lams = [1e-2, 1e-4, 1e-6]
    kw = dict(quantiles=q, quantile_gamma=2.0, sketch=ds.SubSampling(30), lam=lams,
              tol=1e-10, max_iter=300, random_state=1)
    ref_pred = None
    for rows, sched in ((64, "threads"), (64, "sync"), (37, "threads"), (150, "threads")):
        with dask.config.set({"scheduler": sched, "distsketch.driver-threads": 1}):
            est = ds.SketchedQuantileRegressor(ds.Gaussian(gamma=0.5), **kw, options=ds.EngineOptions(
                block_dtype="float64", block_rows=rows)).fit(X, y)
        assert list(est.n_iters_) == [3, 3, 3]
        assert np.all(est.duality_gaps_ <= 1e-10 * est.objectives_)
        est.set_lam(1e-6)
        pred = est.predict(X)
        if ref_pred is None:
            ref_pred, first = pred, est
            M = gaussian_gram(np.reshape(q, (-1, 1)), gamma=2.0)
            ref, _, _ = reference(est, X, y, Pinball(q), 1e-6, M, True, gamma=0.5)
            assert abs(est.objective_ - ref) <= 1e-6 * ref
        elif rows == 64:  # another scheduler, the same blocks: bitwise
            assert np.array_equal(est.dual_coef_, first.dual_coef_)
        else:
            np.testing.assert_allclose(pred, ref_pred, rtol=0, atol=1e-8 * np.abs(ref_pred).max())


def test_a_flat_intercept_is_the_middle_of_its_interval():
    """Joint quantiles at a large λ on 120 rows with 12 outliers: the 0.9 level holds no
    entry on its kink (τ·n = 108 targets below it, 12 above), so its intercept is not pinned — the
    objective is flat over the gap between them. The certified model takes its middle (the
    smallest positive residual equals minus the largest negative one), as the median of an
    even sample; any intercept in the gap has the same objective (checked at both ends)."""
    X, y = data(120, 1, 5, 12)
    q = (0.1, 0.5, 0.9)
    est = ds.SketchedQuantileRegressor(ds.Gaussian(gamma=0.5), quantiles=q, quantile_gamma=2.0,
                                       sketch=ds.SubSampling(25), lam=1e-2, tol=1e-10,
                                       random_state=3, options=F64).fit(X, y)
    assert est.duality_gap_ <= 1e-10 * est.objective_
    r = est.predict(X)[:, 2] - y
    assert np.all(np.abs(r) > 1e-6) and np.sum(r > 0) == 108  # targets below the level
    above, below = r[r > 0].min(), -r[r < 0].max()
    assert above > 0.1 and below > 0.1  # a wide gap
    assert abs(above - below) <= 1e-9 * max(above, below)
    pinball = Pinball(0.9)

    def loss(shift):
        return float(pinball.value((r + shift)[:, None], 0.0).sum())

    for shift in (-below, above):  # the gap's ends: the same loss (flat), not lower
        assert abs(loss(shift) - loss(0.0)) <= 1e-12 * loss(0.0)
    assert loss(above + 0.05) > loss(0.0) and loss(-below - 0.05) > loss(0.0)
