"""Lipschitz-loss machines: optimality against an independent solver, equivalences, invariance,
resume and bad input.

The reference solves the paper's feature-space problem (Prop. 1 of El Ahmad et al., TMLR 2023)
with CVXPY on the realised sketch ``R = sketch_.matrix()``: its own whitening of
``B = R K Rᵀ`` (numpy ``eigh``), features ``Φ = K Rᵀ T``, ``M^{1/2}`` from ``eigh``, and the
losses written in CVXPY's atoms. distsketch's certified duality gap, its objective, the
feature-space KKT conditions and its predictions are checked against it.
"""

from __future__ import annotations

import os
import textwrap
import warnings

import numpy as np
import pytest

import distsketch as ds
from distsketch.losses.quantile import Pinball
from distsketch.losses.radial import EpsilonInsensitive, Huber, Squared
from killhelpers import run_killed
from reference.kernels import gaussian_gram
from reference.lipschitz import data, reference

cp = pytest.importorskip("cvxpy")

F64 = ds.EngineOptions(block_dtype="float64")
GAMMA = 0.5


def _data(n=150, d=1, seed=0, outliers=12):
    return data(n, d, seed, outliers)


def _reference(est, X, y, loss, lam, M=None, intercept=True):
    return reference(est, X, y, loss, lam, M, intercept, gamma=GAMMA)


LOSS_CASES = [Squared(), Huber(0.5), EpsilonInsensitive(0.2), Pinball(0.3)]
SKETCHES = {"subsampling": lambda: ds.SubSampling(25),
            "p-sparsified": lambda: ds.PSparsified(20, p=0.1),
            "gaussian": lambda: ds.GaussianSketch(15)}


@pytest.mark.parametrize("loss", LOSS_CASES, ids=lambda l: l.name)
@pytest.mark.parametrize("sketch", sorted(SKETCHES))
def test_optimal_against_cvxpy(loss, sketch):
    X, y = _data()
    lam = 1e-3
    est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=loss, sketch=SKETCHES[sketch](),
                               lam=lam, tol=1e-10, max_iter=400, random_state=1, options=F64)
    est.fit(X, y)
    assert est.duality_gap_ / est.objective_ <= 1e-8
    ref, pred, _ = _reference(est, X, y, loss, lam)
    assert abs(est.objective_ - ref) <= 1e-6 * abs(ref)
    # the objective of distsketch's own predictions, recomputed densely
    assert np.allclose(est.predict(X), pred[:, 0], atol=1e-4 * np.abs(y).max())


def _kkt_residual(est, X, Y, loss, lam, C, *, on_kink):
    """The feature-space KKT conditions of a non-smooth multi-output fit, checked from
    outside: with ``Φ = C T`` and ``r_i = S Ξᵀφ_i + b₀ − y_i``, every row off the kink keeps
    the loss's (unique) gradient ``α_i``; the rows (ε: ``‖r_i‖ = ε``) or entries (pinball:
    ``r_ij = 0``) within ``on_kink`` of it may take any subgradient ``s ∈ [lo, hi]``
    (ε: ``α_i = s_i r̂_i``, ``s_i ∈ [0, 1]``; pinball: ``α_ij = s ∈ [−τ_j, 1 − τ_j]``).
    Stationarity ``λΞ + (1/n) Φᵀ A S = 0`` and ``Σ_i α_i = 0`` (intercept) is linear in
    the free ``s``: its box-constrained least-squares residual (scipy's ``lsq_linear``,
    independent of distsketch) is 0 at a KKT point. Returns (residual, scale ``max|λΞ|``,
    number of free subgradients)."""
    from scipy.optimize import lsq_linear

    n = len(X)
    Phi = C @ est.whitening_
    S = est.output_sqrt_
    Xi, b0 = est.coefs_[0], est.intercepts_[0]
    R = Phi @ Xi @ S + b0 - Y
    cols, lo, hi = [], [], []
    if isinstance(loss, EpsilonInsensitive):
        t = np.linalg.norm(R, axis=1)
        free = np.abs(t - loss.epsilon) <= on_kink
        A = np.where((t > loss.epsilon)[:, None], R / t[:, None], 0.0)
        A[free] = 0.0
        for i in np.flatnonzero(free):
            u = R[i] / t[i]
            cols.append(np.concatenate([np.outer(Phi[i], u @ S).ravel(), u]) / n)
            lo.append(0.0)
            hi.append(1.0)
    else:
        tau = loss.taus(Y.shape[1])
        free = np.abs(R) <= on_kink
        A = np.where(R > 0, 1.0 - tau, -tau)
        A[free] = 0.0
        for i, j in zip(*np.nonzero(free)):
            E = np.zeros_like(R)
            E[i, j] = 1.0
            cols.append(np.concatenate([(Phi.T @ E @ S).ravel(), E[i]]) / n)
            lo.append(-tau[j])
            hi.append(1.0 - tau[j])
    rhs = -np.concatenate([(lam * Xi + Phi.T @ A @ S / n).ravel(), A.sum(axis=0) / n])
    if not cols:
        return np.abs(rhs).max(), np.abs(lam * Xi).max(), 0
    Amat = np.array(cols).T
    fit = lsq_linear(Amat, rhs, bounds=(lo, hi), method="bvls", tol=1e-14)
    return np.abs(Amat @ fit.x - rhs).max(), np.abs(lam * Xi).max(), len(cols)


MO_LOSSES = [Huber(0.8), EpsilonInsensitive(0.2), Pinball((0.2, 0.5, 0.8))]


# Huber (semismooth Newton) once per sketch; the smoothed losses with two seeds each
MO_CASES = [pytest.param(loss, sketch, seed, id=f"{loss.name}-{sketch}-{seed}")
            for loss in MO_LOSSES for sketch in sorted(SKETCHES)
            for seed in ((2,) if isinstance(loss, Huber) else (2, 3))]


@pytest.mark.slow
@pytest.mark.parametrize("loss, sketch, seed", MO_CASES)
def test_multi_output_with_output_matrix(loss, sketch, seed):
    """Radial losses (‖r‖₂) and pinball coupled by M, d = 3: certified to a relative duality
    gap of 1e-8 at tol = 1e-10 (the sphere polish for ε, the entry polish for pinball), the
    objective equal to CVXPY's to 1e-6 and, for the non-smooth ones, the feature-space KKT
    conditions."""
    X, Y = _data(n=120, d=3, seed=seed)
    M = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.5], [0.2, 0.5, 1.0]])
    lam = 1e-3
    est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=loss, sketch=SKETCHES[sketch](),
                               lam=lam, output_matrix=M, tol=1e-10, max_iter=400,
                               random_state=seed, options=F64)
    est.fit(X, Y)
    ref, _, C = _reference(est, X, Y, loss, lam, M=M)
    assert est.duality_gap_ / est.objective_ <= 1e-8
    assert abs(est.objective_ - ref) <= 1e-6 * abs(ref)
    # P − P* ≤ gap: the objective is within the certified gap of CVXPY's (CVXPY's own
    # accuracy, 1e-8 relative, on the other side)
    assert -1e-8 * abs(ref) <= est.objective_ - ref <= est.duality_gap_ + 1e-8 * abs(ref)
    assert est.predict(X).shape == Y.shape
    if not isinstance(loss, Huber):
        # The polish is Newton on the active set's KKT system and stops as soon as the gap is
        # ≤ tol: the held rows / entries end within ~1e-9 of their kink (1e-15 after one more
        # step), the others ≥ 5e-6 away in these data: 1e-7 of the targets' scale separates
        # them. Stationarity then holds to ≤ 1e-8 of |λΞ| (measured over 8 seeds × 3
        # sketches; 1e-14 for pinball); 1e-6 keeps a margin of 100, while a point certified
        # only to 1e-5 misses the kinks and leaves a residual of the order of |λΞ| itself.
        res, scale, free = _kkt_residual(est, X, Y, loss, lam, C,
                                         on_kink=1e-7 * np.abs(Y).max())
        assert free > 0
        assert res <= 1e-6 * scale, (res, scale)


def test_feature_space_kkt_smooth_losses():
    """Huber: λΞ + (1/n) Φᵀ ∇h(R) S = 0 and Σ ∇h(r_i) = 0 (intercept), with Φ = C T
    computed densely from the kernel and the realised sketch."""
    X, y = _data()
    lam = 1e-3
    loss = Huber(0.5)
    est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=loss, sketch=ds.SubSampling(25),
                               lam=lam, tol=1e-12, random_state=3, options=F64).fit(X, y)
    _, _, C = _reference(est, X, y, Squared(), lam)
    Phi = C @ est.whitening_
    Xi, b0 = est.coefs_[0], est.intercepts_[0]
    R = Phi @ Xi @ est.output_sqrt_ + b0 - y[:, None]
    g = loss.gradient(R)
    stat = lam * Xi + Phi.T @ g @ est.output_sqrt_ / len(X)
    assert np.abs(stat).max() <= 1e-8 * max(1.0, np.abs(lam * Xi).max())
    assert abs(g.sum()) <= 1e-8 * len(X)


def test_squared_equals_sketched_krr():
    X, y = _data()
    for sketch in (ds.SubSampling(25), ds.PSparsified(20, p=0.1), None):
        krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=sketch, lam=1e-3, random_state=4,
                             fit_intercept=False,
                             options=F64).fit(X, y)
        reg = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss="squared", sketch=sketch,
                                   lam=1e-3, fit_intercept=False, random_state=4,
                                   options=F64).fit(X, y)
        scale = np.abs(krr.predict(X)).max()
        assert np.allclose(reg.predict(X), krr.predict(X), rtol=0, atol=1e-9 * scale)
        assert reg.n_iter_ == 1  # the closed form is certified by the first sweep


def test_huber_with_large_kappa_is_krr():
    X, y = _data()
    krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(25), lam=1e-3,
                         fit_intercept=False, random_state=5, options=F64).fit(X, y)
    reg = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Huber(1e6),
                               sketch=ds.SubSampling(25), lam=1e-3, fit_intercept=False,
                               random_state=5, options=F64).fit(X, y)
    assert np.allclose(reg.predict(X), krr.predict(X), atol=1e-9 * np.abs(y).max())


def test_intercept_is_centring_for_squared_loss():
    """Squared loss with an intercept = KRR on centred targets and features' mean removed:
    checked against the dense problem (CVXPY), and the intercept matters for shifted y."""
    X, y = _data()
    lam = 1e-3
    est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss="squared", sketch=ds.SubSampling(25),
                               lam=lam, tol=1e-12, random_state=6, options=F64).fit(X, y + 100.0)
    ref, pred, _ = _reference(est, X, y + 100.0, Squared(), lam)
    assert abs(est.objective_ - ref) <= 1e-6 * ref
    shifted = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss="squared",
                                   sketch=ds.SubSampling(25), lam=lam, tol=1e-12,
                                   random_state=6, options=F64).fit(X, y)
    assert np.allclose(est.predict(X) - 100.0, shifted.predict(X), atol=1e-6)


def test_rank_deficient_sketch():
    """Repeated landmarks (duplicate rows): B = R K Rᵀ is singular; the whitening keeps its
    range and the model is still optimal."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=(12, 3))
    X = base[rng.integers(0, 12, size=150)]
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=150)
    est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Huber(0.3), sketch=ds.SubSampling(40),
                               lam=1e-3, tol=1e-10, random_state=7, options=F64).fit(X, y)
    assert est.whitening_.shape[1] <= 12
    ref, _, _ = _reference(est, X, y, Huber(0.3), 1e-3)
    assert abs(est.objective_ - ref) <= 1e-6 * ref


def test_joint_quantiles():
    X, y = _data(n=150)
    q = (0.1, 0.5, 0.9)
    est = ds.SketchedQuantileRegressor(ds.Gaussian(gamma=GAMMA), quantiles=q, quantile_gamma=2.0,
                                       sketch=ds.SubSampling(20), lam=1e-3, tol=1e-10,
                                       max_iter=400, random_state=8, options=F64).fit(X, y)
    P = est.predict(X)
    assert P.shape == (150, 3)
    M = gaussian_gram(np.reshape(q, (-1, 1)), gamma=2.0)
    ref, _, C = _reference(est, X, y, Pinball(q), 1e-3, M=M)
    assert est.duality_gap_ / est.objective_ <= 1e-8
    assert abs(est.objective_ - ref) <= 1e-6 * ref
    res, scale, free = _kkt_residual(est, X, np.repeat(y[:, None], 3, axis=1), Pinball(q), 1e-3,
                                     C, on_kink=1e-7 * np.abs(y).max())
    assert free > 0 and res <= 1e-6 * scale  # (see test_multi_output_with_output_matrix)
    # empirical coverage near the levels (the intercepts make them calibrated on training data)
    cover = (y[:, None] <= P + 1e-9).mean(axis=0)
    assert np.all(np.abs(cover - np.array(q)) < 0.1)
    assert ds.metrics.crossing_loss(P) < 1e-2


def test_lambda_path_and_set_lam():
    X, y = _data()
    lams = [1e-4, 1e-2, 1e-3]
    path = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Huber(0.5), sketch=ds.SubSampling(25),
                                lam=lams, tol=1e-9, random_state=9, options=F64).fit(X, y)
    assert path.lam_ == 1e-4
    for lam in lams:
        one = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Huber(0.5),
                                   sketch=ds.SubSampling(25), lam=lam, tol=1e-9, random_state=9,
                                   options=F64).fit(X, y)
        path.set_lam(lam)
        assert np.allclose(path.predict(X), one.predict(X), atol=1e-6)
    with pytest.raises(ValueError, match="lam"):
        path.set_lam(5e-3)


def test_invariance_across_blocks_and_schedulers():
    import dask

    X, y = _data(n=200)
    kw = dict(loss=Pinball(0.3), sketch=ds.SubSampling(20), lam=1e-3, tol=1e-8, max_iter=300,
              random_state=10)
    ref = None
    for rows, sched in ((64, "sync"), (37, "threads"), (200, "threads")):
        with dask.config.set(scheduler=sched):
            est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), **kw, options=ds.EngineOptions(
                block_dtype="float64", block_rows=rows)).fit(X, y)
        pred = est.predict(X)
        if ref is None:
            ref = pred
        assert np.allclose(pred, ref, rtol=0, atol=1e-8 * np.abs(ref).max())


@pytest.mark.slow
def test_sphere_polish_invariant_across_blocks():
    """The sphere polish holds rows by their global index (``Iterate.exclude``): block sizes
    that split its rows differently give the same certified model."""
    X, Y = _data(n=200, d=3)
    kw = dict(loss=EpsilonInsensitive(0.2), sketch=ds.SubSampling(20), lam=1e-3, tol=1e-10,
              max_iter=300, random_state=10)
    ref = None
    for rows in (64, 37, 200):
        est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), **kw, options=ds.EngineOptions(
            block_dtype="float64", block_rows=rows)).fit(X, Y)
        assert est.duality_gap_ / est.objective_ <= 1e-8
        pred = est.predict(X)
        if ref is None:
            ref = pred
        assert np.allclose(pred, ref, rtol=0, atol=1e-8 * np.abs(ref).max())


def test_same_on_a_local_cluster():
    distributed = pytest.importorskip("distributed")
    X, y = _data(n=160)
    kw = dict(loss=Huber(0.5), sketch=ds.SubSampling(20), lam=1e-3, tol=1e-10, random_state=11,
              options=ds.EngineOptions(block_dtype="float64", block_rows=40))
    local = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), **kw).fit(X, y)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        remote = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), **kw).fit(X, y)
    assert np.array_equal(local.dual_coef_, remote.dual_coef_)
    assert local.n_iter_ == remote.n_iter_


@pytest.mark.slow
def test_store_shared_with_krr_and_saved_model(tmp_path):
    X, y = _data()
    store = tmp_path / "fit.zarr"
    krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(25), lam=1e-3,
                         random_state=12, store=store).fit(X, y)
    reg = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Huber(0.5),
                               sketch=ds.SubSampling(25), lam=1e-3, random_state=12,
                               store=store).fit(X, y)
    assert np.array_equal(reg.sketch_.support, krr.sketch_.support)
    from distsketch.engine.store import open_fit_store

    # the regressor's extra sums were added from the stored blocks, SketchedKRR's kept
    assert {"G", "B", "b", "s", "y1"} <= set(open_fit_store(store).read_sums())
    loaded = ds.load(store)
    assert type(loaded) is ds.SketchedRegressor
    assert np.array_equal(loaded.predict(X), reg.predict(X))
    assert loaded.get_params()["loss"] == Huber(0.5)
    again = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Huber(0.5),
                                 sketch=ds.SubSampling(25), lam=1e-3, random_state=12,
                                 store=store).fit(X, y)
    assert np.array_equal(again.dual_coef_, reg.dual_coef_)


_KILL_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import distsketch as ds
    from distsketch.losses.quantile import Pinball
    from distsketch.losses.radial import EpsilonInsensitive
    sys.path.insert(0, {tests!r})
    from test_lipschitz import _data
    X, y = _data(n=200, d={d})
    ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss={loss}, sketch=ds.SubSampling(20),
                         lam=1e-3, tol=1e-9, max_iter=400, random_state=13,
                         store={store!r}).fit(X, y)
""")


@pytest.mark.slow
@pytest.mark.parametrize("loss, d", [(Pinball(0.3), 1), (EpsilonInsensitive(0.2), 3)],
                         ids=["pinball", "epsilon-radial"])
def test_resume_after_sigkill_mid_iterations(tmp_path, loss, d):
    """Killed mid-iterations, a fit resumes from the last sweep and ends bitwise equal. Both
    are killed at their last sweep, inside a polish: the pinball fit (every entry in the
    window: the probe, one certified sweep, the restricted polish's point) with the gathered
    entries and their multipliers pending, the radial ε (d = 3) inside the sphere polish with
    its held rows, their multipliers and the pending step; all come back from the store."""
    import zarr

    X, y = _data(n=200, d=d)
    kw = dict(loss=loss, sketch=ds.SubSampling(20), lam=1e-3, tol=1e-9, max_iter=400,
              random_state=13)
    whole = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), **kw,
                                 store=tmp_path / "whole.zarr").fit(X, y)
    assert whole.n_iter_ >= 3
    store = tmp_path / "killed.zarr"
    run_killed(_KILL_SCRIPT.format(tests=os.path.dirname(__file__), store=str(store),
                                   loss=repr(loss), d=d), kill_at=whole.n_iter_)
    solver = zarr.open_group(str(store), mode="r")["solver"]
    modes = [g.attrs["state"]["mode"] for _, g in solver.groups()]
    assert modes == (["polish"] if d == 1 else ["sphere"])  # killed inside the polish
    resumed = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), **kw, store=store).fit(X, y)
    assert np.array_equal(resumed.dual_coef_, whole.dual_coef_)
    assert np.array_equal(resumed.intercepts_, whole.intercepts_)
    assert resumed.n_iter_ == whole.n_iter_
    assert resumed.n_passes_ < whole.n_passes_  # the pass and the sweeps before were not redone


@pytest.mark.parametrize("make, match", [
    (lambda: ds.SketchedRegressor(loss=Huber(0.0)), "kappa"),
    (lambda: ds.SketchedRegressor(loss=Huber(-1.0)), "kappa"),
    (lambda: ds.SketchedRegressor(loss=EpsilonInsensitive(-0.1)), "epsilon"),
    (lambda: ds.SketchedRegressor(loss=Pinball(1.0)), "tau"),
    (lambda: ds.SketchedRegressor(loss=Pinball(0.0)), "tau"),
    (lambda: ds.SketchedRegressor(loss="hinge"), "loss"),
    (lambda: ds.SketchedQuantileRegressor(quantiles=(0.5, 0.1)), "quantiles"),
    (lambda: ds.SketchedQuantileRegressor(quantiles=(0.1, 0.1, 0.5)), "quantiles"),
    (lambda: ds.SketchedQuantileRegressor(quantiles=(0.1, 1.5)), "quantiles"),
    (lambda: ds.SketchedQuantileRegressor(quantile_gamma=-1.0), "quantile_gamma"),
    (lambda: ds.SketchedRegressor(output_matrix=np.array([[1.0, 2.0], [0.0, 1.0]])), "output_matrix"),
    (lambda: ds.SketchedRegressor(output_matrix=np.array([[1.0, 2.0], [2.0, 1.0]])), "output_matrix"),
    (lambda: ds.SketchedRegressor(output_matrix=np.eye(3)), "output_matrix"),
    (lambda: ds.SketchedRegressor(tol=0.0), "tol"),
    (lambda: ds.SketchedRegressor(max_iter=0), "max_iter"),
    (lambda: ds.SketchedRegressor(fit_intercept="yes"), "fit_intercept"),
])
def test_bad_input_before_anything_is_written(tmp_path, make, match):
    X, Y = _data(n=40, d=2)
    est = make()
    est.set_params(sketch=ds.SubSampling(10), store=tmp_path / "s.zarr")
    y = Y if "output_matrix" in match else Y[:, 0]
    with pytest.raises(ValueError, match=match):
        est.fit(X, y)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("whole, max_iter", [(4000, 2), (0, 3)], ids=["whole", "window"])
def test_max_iter_warns(whole, max_iter):
    """Stopped at max_iter short of tol, with a warning: the whole problem gathered (stopped
    with its polish pending) and the smoothing continuation."""
    X, y = _data()
    options = ds.EngineOptions(block_dtype="float64",
                               tuning=ds.Tuning(whole_problem_entries=whole))
    est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Pinball(0.3), sketch=ds.SubSampling(25),
                               lam=1e-4, tol=1e-12, max_iter=max_iter, random_state=14,
                               options=options)
    with pytest.warns(Warning, match="max_iter"):
        est.fit(X, y)
    assert est.n_iter_ == max_iter


@pytest.mark.slow
def test_stalled_continuation_returns_its_best_certified_point(monkeypatch):
    """Two pinball levels, no output matrix, tol = 1e-10 (found by the ADMM tests).

    A stall, made deterministic: the dual values are lowered by 3e-9 × the objective, so no
    point certifies tol but the best is within STALL_NEAR × tol. The iterations stop
    STALL_SWEEPS sweeps after the best point (not at max_iter) and return it, warning: the
    objective is the optimum's, the reported gap the best certified one.

    The case that found it: with the band polish alone (no restricted polish,
    ``newton.WINDOW = 0``) the KKT polish certifies about 1e-10, then the continuation shrinks
    μ towards 1e-9, where the smoothed dual point may certify only 1e-1. Whether that fit
    stalls or still certifies tol depends on the rounding of the BLAS kernels OpenBLAS picks
    for the CPU (it stalled on the AMD EPYC where this test was written, and certified
    5.9e-11 in 208 sweeps on an Intel Xeon, same numpy 2.4.6): either way it ends near the optimum, in fewer than 1000 sweeps, and a warning
    comes with a best certified gap ≤ 1e-8. With the restricted polish (the default) the
    same fit reaches tol itself, in fewer sweeps."""
    from distsketch.solvers.lipschitz import newton

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    Y = (np.sin(X[:, :1]) + 0.5 * X[:, 1:2] + 0.3 * np.arange(2)[None, :] * X[:, 2:3]
         + 0.1 * rng.normal(size=(200, 2)))
    Y[:12] += 4.0
    kw = dict(loss=Pinball((0.2, 0.7)), sketch=ds.SubSampling(30), lam=1e-3, max_iter=5000,
              random_state=1, options=ds.EngineOptions(block_dtype="float64", block_rows=64))
    ref = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), tol=1e-8, **kw).fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning with the restricted polish
        full = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), tol=1e-10, **kw).fit(X, Y)
    assert full.duality_gap_ <= 1e-10 * full.objective_

    real, offset = newton.dual_values, 3e-9 * ref.objective_
    with monkeypatch.context() as patch:
        patch.setattr(newton, "dual_values",
                      lambda *a: (lambda d: (d[0], d[1] - offset))(real(*a)))
        with pytest.warns(Warning, match="no better certified point") as record:
            stalled = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), tol=1e-10, **kw).fit(X, Y)
    assert any("ConvergenceWarning" in type(w.message).__name__ for w in record)
    assert newton.STALL_SWEEPS < stalled.n_iter_ < 1000
    assert offset <= stalled.duality_gap_ <= newton.STALL_NEAR * 1e-10 * stalled.objective_

    monkeypatch.setattr(newton, "WINDOW", 0.0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), tol=1e-10, **kw).fit(X, Y)
    warned = [w for w in record if "ConvergenceWarning" in type(w.message).__name__]
    if warned:
        assert "no better certified point" in str(warned[0].message)
        assert full.n_iter_ < est.n_iter_
        assert 0 <= est.duality_gap_ <= 1e-8 * est.objective_
    else:
        assert est.duality_gap_ <= 1e-10 * est.objective_
    assert est.n_iter_ < 1000
    for other in (est, full, stalled):
        assert abs(other.objective_ - ref.objective_) <= 1e-9 * ref.objective_
        np.testing.assert_allclose(other.predict(X), ref.predict(X), rtol=0, atol=1e-6)


REGRESSOR_TOML = """
[model]
type = "{type}"
lam = 1e-3
random_state = 0
{extra}

[model.kernel]
name = "gaussian"
gamma = 0.5

[model.sketch]
name = "subsampling"
m = 20

[data]
train = "train.npz"
test = "test.npz"

[store]
path = "fit.zarr"

[evaluate]
metrics = {metrics}
"""


@pytest.mark.slow
@pytest.mark.parametrize("type_, extra, metrics", [
    ("regressor", 'loss = {type = "huber", kappa = 0.5}', '["rmse", "mae"]'),
    ("SketchedRegressor", 'loss = "epsilon_insensitive"\ntol = 1e-4', '["mae"]'),
    ("quantile", "quantiles = [0.1, 0.5, 0.9]\nquantile_gamma = 2.0\ntol = 1e-4",
     '["pinball", "crossing"]'),
])
def test_cli_fits_regressors_from_toml(tmp_path, type_, extra, metrics):
    from distsketch.cli.commands import main

    X, y = _data(n=160)
    np.savez(tmp_path / "train.npz", X=X[:120], Y=y[:120])
    np.savez(tmp_path / "test.npz", X=X[120:], Y=y[120:])
    (tmp_path / "fit.toml").write_text(REGRESSOR_TOML.format(type=type_, extra=extra,
                                                             metrics=metrics))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["fit", "fit.toml"]) == 0
        assert main(["evaluate", "fit.zarr"]) == 0
    finally:
        os.chdir(cwd)
    model = ds.load(tmp_path / "fit.zarr")
    expected = ds.SketchedQuantileRegressor if type_ == "quantile" else ds.SketchedRegressor
    assert type(model) is expected
    assert model.predict(X[120:]).shape == ((40, 3) if type_ == "quantile" else (40,))


def test_cli_bad_loss_names_the_key(tmp_path):
    from distsketch.cli.config import ConfigError, load_config

    (tmp_path / "train.npz").write_bytes(b"")
    (tmp_path / "fit.toml").write_text(REGRESSOR_TOML.format(
        type="regressor", extra='loss = {type = "huber", kappa = -1.0}', metrics='["mae"]'))
    with pytest.raises(ConfigError, match="model.loss"):
        load_config(tmp_path / "fit.toml")


def test_no_gram_when_every_row_is_at_the_base_curvature():
    """Squared loss (or Huber without outliers): the d × d Grams of a block are not formed
    (a 0-d zero), so a multi-output fit never holds d²(m+1)² numbers for nothing."""
    from distsketch.engine.sweep import _grams
    from distsketch.losses.base import Curvature

    C = np.ones((5, 4))
    empty = Curvature(1.0, "full", np.array([], dtype=np.int64), np.zeros((0, 3, 3)))
    assert _grams(C, empty, 3).shape == ()
    some = Curvature(1.0, "full", np.array([1]), np.eye(3)[None])
    assert _grams(C, some, 3).shape == (3, 3, 5, 5)


@pytest.mark.parametrize("loss", [EpsilonInsensitive(0.2), Pinball(0.3), Huber(0.3)],
                         ids=lambda l: l.name)
def test_grams_at_every_curvature_level_give_the_same_hessian(loss):
    """A sweep subtracts the curvature level most rows sit at (``at_level``): the Grams of the
    rows off each level plus level·C̃ᵀC̃ are one Hessian, whatever the level (mixed-sign
    weights through the symmetric rank-k updates)."""
    from distsketch.engine.sweep import _grams

    rng = np.random.default_rng(3)
    C = rng.normal(size=(400, 7))
    R = rng.normal(scale=0.5, size=(400, 1))
    mu = 0.4
    Ct = np.hstack([C, np.ones((400, 1))])
    levels = loss.curvature_levels(1, mu)
    assert len(levels) == 2
    full = None
    for level in levels:
        curv = loss.curvature(R, mu, base=level)
        assert curv.base == level
        Q = _grams(C, curv, 1) + level * (Ct.T @ Ct)
        w = np.zeros(400)
        w[curv.rows] = curv.values
        naive = Ct.T @ ((w + level)[:, None] * Ct)
        assert np.allclose(Q, naive, rtol=0, atol=1e-12 * np.abs(naive).max())
        assert np.array_equal(Q, Q.T)
        if full is None:
            full = Q
        assert np.allclose(Q, full, rtol=0, atol=1e-12 * np.abs(full).max())


@pytest.mark.slow
def test_held_blocks_give_the_stored_and_the_recomputed_model(tmp_path, monkeypatch):
    """Without a store, the sweeps read the blocks the pass kept in memory (within
    ``sweep_memory``, as float64 copies of the block-dtype values): the model is bitwise the
    one that recomputes every block, and the one that reads them back from a store."""
    import distsketch.solvers.lipschitz.routes as lipschitz_routes

    used = []

    class Recording(lipschitz_routes.Sweeper):
        def __init__(self, data, *args, **kwargs):
            used.append(data.held is not None)
            super().__init__(data, *args, **kwargs)

    monkeypatch.setattr(lipschitz_routes, "Sweeper", Recording)
    X, y = _data(n=300)
    kw = dict(loss=EpsilonInsensitive(0.2), sketch=ds.SubSampling(30), lam=1e-3, tol=1e-8,
              max_iter=300, random_state=4)
    fits = {}
    for name, store, memory in (("held", None, 2**30), ("recomputed", None, 0),
                                ("stored", tmp_path / "s.zarr", 2**30)):
        fits[name] = ds.SketchedRegressor(
            ds.Gaussian(gamma=GAMMA), **kw, store=store,
            options=ds.EngineOptions(block_rows=64, sweep_memory=memory)).fit(X, y)
    assert used == [True, False, False]
    for name in ("recomputed", "stored"):
        assert np.array_equal(fits[name].dual_coef_, fits["held"].dual_coef_), name
        assert fits[name].n_iter_ == fits["held"].n_iter_
    # a budget below n·m·8 bytes: recomputed
    used.clear()
    ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), **kw, options=ds.EngineOptions(
        block_rows=64, sweep_memory=300 * 30 * 8 - 1)).fit(X, y)
    assert used == [False]


def test_sweep_leaves_the_held_rows_out():
    """``Iterate.exclude`` (the sphere polish): the sweep's gradient and conjugate sums and
    Grams without the held rows, plus those rows' own terms formed densely, are the full
    sweep's; the losses still cover every row. Held rows straddle the block boundaries."""
    from distsketch.engine.sweep import SWEEP_SUMS, Iterate, SweepData, _sweep_block

    rng = np.random.default_rng(5)
    n, m, d, rows = 50, 6, 3, 16
    C = rng.normal(size=(n, m))
    Y = rng.normal(size=(n, d))
    loss = EpsilonInsensitive(0.3)
    A, b0 = rng.normal(scale=0.3, size=(m, d)), rng.normal(scale=0.1, size=d)
    mu = 0.2
    blocks = tuple(C[s:s + rows] for s in range(0, n, rows))
    data = SweepData(n=n, block_rows=rows, m=m, d=d, C=None, crcs=(), x=None,
                     dtype=np.float64, held=blocks)
    held = np.array([0, 15, 16, 31, 47])

    def run(exclude):
        it = Iterate(loss, A, b0, None, None, mu, (), base=0.0, exclude=exclude)
        parts = [_sweep_block((data, it), (i, blocks[i], None, Y[i * rows:(i + 1) * rows]), None)
                 for i in range(len(blocks))]
        acc = parts[0]
        for part in parts[1:]:
            acc = SWEEP_SUMS.add(acc, part)
        return acc

    full, part = run(None), run(held)
    R = C[held] @ A + b0 - Y[held]
    alpha = loss.gradient(R, mu)
    curv = loss.curvature(R, mu, exact=True, base=0.0)
    Ct = np.hstack([C[held], np.ones((len(held), 1))])[curv.rows]
    Q = np.einsum("ep,ejk,eq->jkpq", Ct, curv.values, Ct)
    assert len(curv.rows) > 0 and np.any(alpha)  # the held rows carry curvature and gradient
    expected = {"Ca": C[held].T @ alpha, "sa": alpha.sum(axis=0),
                "aa": (alpha * alpha).sum(axis=0), "an": np.linalg.norm(alpha, axis=1).sum(),
                "ya": (Y[held] * alpha).sum(axis=0), "Q": Q}
    for key, value in expected.items():
        assert np.allclose(part[key] + value, full[key], rtol=0, atol=1e-12), key
    for key in ("loss", "loss_mu"):
        assert part[key] == full[key]
