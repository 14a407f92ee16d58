"""``SketchedRegressor(loss="squared", solver="pcg")``: Falkon's PCG for the squared loss.

With the squared loss and ``output_matrix=None`` the regressor is kernel ridge regression with
an unpenalised intercept fitted jointly: ``b₀ = ȳ − αᵀ s/n`` (``s = K_nmᵀ 1``) and
``(K_nmᵀ K_nm − s sᵀ/n + nλ K_mm) α = K_nmᵀ (Y − 1ȳᵀ)`` (the features' mean removed; without
an intercept the system of :class:`~distsketch.SketchedKRR`). Checked here against a dense
numpy solve of that system (the n × m matrix formed), the Newton route, SketchedKRR, across
block sizes and schedulers, resume after SIGKILL, save / load, ``"auto"`` and the errors.
"""

from __future__ import annotations

import dataclasses
import textwrap

import dask
import numpy as np
import pytest

import distsketch as ds
from distsketch.losses.radial import Huber
from killhelpers import run_killed
from pcghelpers import data as _data
from reference.errors import norm_rel_err as _rel

GAMMA = 0.5
F64 = ds.EngineOptions(block_dtype="float64", block_rows=96)


def _reg(**kw):
    return ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss="squared", **kw)


def _dense(X, y, landmarks, lam, intercept):
    """The regressor's squared-loss problem solved densely with numpy: ``(α, b₀, P)`` of
    ``min (1/2n)‖K_nm α + 1b₀ᵀ − Y‖² + (λ/2) Tr(αᵀ K_mm α)`` (one coefficient per landmark
    as given, and the objective ``P``: what ``reference.closed_forms.dense_distinct`` does not
    return)."""
    k = ds.Gaussian(gamma=GAMMA)
    n = len(X)
    Y = np.asarray(y, dtype=np.float64).reshape(n, -1)
    Knm = np.asarray(k(X, landmarks))
    Kmm = np.asarray(k(landmarks, landmarks))
    Kc = Knm - Knm.mean(axis=0) if intercept else Knm
    Yc = Y - Y.mean(axis=0) if intercept else Y
    alpha = np.linalg.solve(Kc.T @ Kc + n * lam * Kmm, Kc.T @ Yc)
    b0 = Y.mean(axis=0) - Knm.mean(axis=0) @ alpha if intercept else np.zeros(Y.shape[1])
    R = Knm @ alpha + b0 - Y
    P = 0.5 * np.sum(R * R) / n + 0.5 * lam * np.sum(alpha * (Kmm @ alpha))
    return alpha, b0, P


SKETCHES = {"subsampling": lambda: ds.SubSampling(40),
            "leverage": lambda: ds.LeverageScores(40)}


@pytest.mark.slow
@pytest.mark.parametrize("sketch", sorted(SKETCHES))
@pytest.mark.parametrize("t", [1, 3], ids=["single", "multi"])
@pytest.mark.parametrize("lam", [1e-2, 1e-4])
def test_pcg_equals_dense_and_newton(lam, t, sketch):
    """With the intercept: PCG at tol = 1e-12 equals the dense solve to 1e-8 relative on
    predictions (measured 2e-13 – 3e-12: a residual of 1e-12 times cond(PᵀHP)), and the
    Newton route run to a relative gap of 1e-15 (its predictions err by ≈ √gap: measured
    1.6e-10 – 2.3e-9 against the dense solve); objective_ is the dense objective (measured
    ≤ 1.4e-13 relative), residual_ ≤ tol."""
    X, y = _data(t=t)
    kw = dict(sketch=SKETCHES[sketch](), lam=lam, random_state=5, options=F64)
    pcg = _reg(solver="pcg", tol=1e-12, max_iter=500, **kw).fit(X, y)
    newton = _reg(solver="newton", tol=1e-15, max_iter=200, **kw).fit(X, y)
    assert pcg.solver_ == "pcg" and newton.solver_ == "newton"
    assert np.array_equal(pcg.sketch_.support, newton.sketch_.support)  # the same landmarks
    alpha, b0, P = _dense(X, y, pcg.landmarks_, lam, True)
    Xt, _ = _data(n=100, t=t, seed=1)
    for Z in (X, Xt):
        assert pcg.predict(Z).shape == newton.predict(Z).shape
        assert _rel(pcg.predict(Z), newton.predict(Z)) < 1e-8
    ref = np.asarray(ds.Gaussian(gamma=GAMMA)(X, pcg.landmarks_)) @ alpha + b0
    assert _rel(pcg.predict(X), ref[:, 0] if t == 1 else ref) < 1e-8
    assert _rel(pcg.dual_coef_, alpha) < 1e-7  # coefficients: cond(H) enters
    assert np.allclose(np.atleast_1d(pcg.intercept_), b0, rtol=1e-8)
    # objective from the pass's sums: rounding ≈ ε‖Y − ȳ‖²/n ≈ 1e-16 relative to P here
    assert abs(pcg.objective_ - P) <= 1e-10 * P
    assert abs(pcg.objective_ - newton.objective_) <= 1e-10 * P
    assert 0 <= pcg.residual_ <= 1e-12 and np.isnan(pcg.duality_gap_)
    assert pcg.whitening_ is None and newton.residual_ is None
    assert 1 < pcg.n_iter_ <= 500 and pcg.n_passes_ == pcg.n_iter_ + 1


@pytest.mark.slow
@pytest.mark.parametrize("t", [1, 3], ids=["single", "multi"])
def test_pcg_without_intercept_equals_sketched_krr(t):
    """fit_intercept=False: the problem of SketchedKRR(fit_intercept=False), whose direct and
    PCG routes the regressor's PCG equals to 1e-8 (and Newton, exact in one sweep here)."""
    X, y = _data(t=t)
    kw = dict(sketch=ds.SubSampling(40), lam=1e-3, fit_intercept=False, random_state=4,
              options=F64)
    reg = _reg(solver="pcg", tol=1e-12, max_iter=500, **kw).fit(X, y)
    newton = _reg(solver="newton", **kw).fit(X, y)
    direct = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), solver="direct", **kw).fit(X, y)
    kpcg = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), solver="pcg", tol=1e-12, max_iter=500,
                          **kw).fit(X, y)
    assert newton.n_iter_ == 1
    for other in (newton, direct, kpcg):
        assert _rel(reg.predict(X), other.predict(X)) < 1e-8
    # the same system and iterations as SketchedKRR's PCG: the same coefficients bitwise
    assert np.array_equal(reg.dual_coef_, kpcg.dual_coef_)
    assert np.all(np.atleast_1d(reg.intercept_) == 0)
    alpha, _, P = _dense(X, y, reg.landmarks_, 1e-3, False)
    assert abs(reg.objective_ - P) <= 1e-10 * P


@pytest.mark.slow
def test_lambda_path_and_set_lam():
    X, y = _data(t=2)
    lams = [1e-2, 1e-3, 1e-4]
    kw = dict(sketch=ds.SubSampling(40), lam=lams, random_state=2, options=F64)
    pcg = _reg(solver="pcg", tol=1e-12, max_iter=500, **kw).fit(X, y)
    assert pcg.lam_ == 1e-2 and len(pcg.n_iters_) == 3
    assert pcg.n_passes_ == 1 + int(pcg.n_iters_.sum())
    for lam in lams:
        pcg.set_lam(lam)
        alpha, b0, _ = _dense(X, y, pcg.landmarks_, lam, True)
        ref = np.asarray(ds.Gaussian(gamma=GAMMA)(X, pcg.landmarks_)) @ alpha + b0
        assert _rel(pcg.predict(X), ref) < 1e-8
    with pytest.raises(ValueError, match=r"lam: .*not fitted"):
        pcg.set_lam(5e-3)


@pytest.mark.slow
def test_invariant_to_block_size_and_scheduler():
    """Synchronous vs threads with the same blocks: bitwise (the engine's fixed reduction
    tree). Other block sizes change the summation order of ``Σ_I K_Iᵀ(K_I v)`` (rounding
    ~1e-16 per pass) and so the CG trajectory: both solutions lie within tol of the exact
    one, so they agree to tol × cond(PᵀHP), not bitwise (measured 4.1e-13 and 3.7e-13 for
    50 and 400 rows against 96; bound 1e-10)."""
    X, y = _data(t=2)
    kw = dict(sketch=ds.SubSampling(40), lam=1e-3, random_state=7, solver="pcg", tol=1e-12,
              max_iter=500)
    fits = {}
    for rows in (50, 96, 400):
        for scheduler in ("sync", "threads"):
            with dask.config.set(scheduler=scheduler):
                fits[rows, scheduler] = _reg(options=ds.EngineOptions(
                    block_dtype="float64", block_rows=rows), **kw).fit(X, y)
    for rows in (50, 96, 400):
        a, b = fits[rows, "sync"], fits[rows, "threads"]
        assert np.array_equal(a.dual_coef_, b.dual_coef_)
        assert np.array_equal(a.intercept_, b.intercept_)
    ref = fits[96, "sync"].predict(X)
    for rows in (50, 400):
        assert _rel(fits[rows, "sync"].predict(X), ref) < 1e-10


_KILL_SCRIPT = textwrap.dedent("""
    import numpy as np
    import distsketch as ds
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] + 0.3 * np.arange(2)[None, :] * X[:, 2:3] \\
        + 0.1 * rng.normal(size=(400, 2)) + 2.0
    ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss="squared", sketch=ds.SubSampling(40),
                         lam=[1e-2, 1e-4], solver="pcg", tol=1e-12, max_iter=500,
                         random_state=13,
                         options=ds.EngineOptions(block_dtype="float64", block_rows=96),
                         store={store!r}).fit(X, Y)
""")


@pytest.mark.slow
def test_resume_after_sigkill_between_iterations(tmp_path):
    """Killed by SIGKILL in the second λ's iterations (a subprocess whose sweeper kills it at
    a chosen pass), a fit on the same store resumes from the last saved iterate and ends with
    the bitwise identical model after one pass of fingerprints and the remaining iterations;
    refitting the finished store makes that one pass only."""
    X, y = _data(t=2)
    kw = dict(sketch=ds.SubSampling(40), lam=[1e-2, 1e-4], solver="pcg", tol=1e-12,
              max_iter=500, random_state=13, options=F64)
    whole = _reg(store=tmp_path / "whole.zarr", **kw).fit(X, y)
    first = int(whole.n_iters_[0])
    kill_at = 1 + first + 5  # the rhs pass, λ = 1e-2's iterations, then 4 of λ = 1e-4's
    assert whole.n_iters_[1] > 5
    store = tmp_path / "killed.zarr"
    run_killed(_KILL_SCRIPT.format(store=str(store)), kill_at=kill_at)
    resumed = _reg(store=store, **kw).fit(X, y)
    for name in ("coefs_", "intercepts_", "objectives_", "residuals_"):
        assert np.array_equal(getattr(resumed, name), getattr(whole, name)), name
    assert list(resumed.n_iters_) == list(whole.n_iters_)
    assert resumed.n_passes_ == whole.n_passes_ - kill_at + 2
    again = _reg(store=store, **kw).fit(X, y)
    assert again.n_passes_ == 1 and np.array_equal(again.coefs_, whole.coefs_)
    loaded = ds.load(store)  # the fit saved its model into the store
    assert loaded.solver_ == "pcg" and np.array_equal(loaded.predict(X), whole.predict(X))


@pytest.mark.slow
def test_store_shared_with_sketched_krr(tmp_path):
    """The regressor's PCG records SketchedKRR's pass configuration, so one store serves
    both; the centred system keeps its own iterates (keyed apart from SketchedKRR's): on a
    store a SketchedKRR PCG fit wrote, the regressor solves its own problem, and the
    SketchedKRR fit after it finds its finished solution (one pass: the data check)."""
    X, y = _data()
    kw = dict(sketch=ds.SubSampling(40), lam=1e-3, solver="pcg", tol=1e-12, max_iter=500,
              random_state=3, options=F64)
    path = tmp_path / "s.zarr"
    krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), store=path, **kw).fit(X, y)
    shared = _reg(store=path, **kw).fit(X, y)
    alone = _reg(**kw).fit(X, y)
    assert np.array_equal(shared.coefs_, alone.coefs_)
    assert np.array_equal(shared.intercepts_, alone.intercepts_)
    assert shared.n_passes_ == 1 + alone.n_iter_  # the data check, then its own iterations
    again = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), store=path, **kw).fit(X, y)
    assert again.n_passes_ == 1 and np.array_equal(again.dual_coef_, krr.dual_coef_)


@pytest.mark.slow
def test_saved_model_round_trips(tmp_path):
    X, y = _data()
    est = _reg(sketch=ds.SubSampling(40), lam=[1e-2, 1e-3], solver="pcg", tol=1e-10,
               max_iter=300, random_state=3, options=F64).fit(X, y)
    est.save(tmp_path / "m.zarr")
    loaded = ds.load(tmp_path / "m.zarr")
    assert type(loaded) is ds.SketchedRegressor
    assert loaded.get_params()["solver"] == "pcg" and loaded.solver_ == "pcg"
    assert (loaded.get_params()["tol"], loaded.get_params()["max_iter"]) == (1e-10, 300)
    assert loaded.whitening_ is None and np.isnan(loaded.duality_gap_)
    for name in ("n_iters_", "objectives_", "residuals_", "coefs_", "intercepts_"):
        assert np.array_equal(getattr(loaded, name), getattr(est, name)), name
    assert loaded.residual_ == est.residual_
    assert loaded.predict(X).shape == (len(X),)
    assert np.array_equal(loaded.predict(X), est.predict(X))
    assert np.array_equal(loaded.set_lam(1e-3).predict(X), est.set_lam(1e-3).predict(X))
    assert loaded.residual_ == est.residual_ and loaded.n_iter_ == est.n_iter_


@pytest.mark.parametrize("kw, match", [
    (dict(loss="huber"), r"solver='pcg'.*squared loss.*loss=.*[Hh]uber.*solver='newton'"),
    (dict(loss=Huber(1e6)), r"solver='pcg'.*squared loss"),
    (dict(loss="pinball"), r"solver='pcg'.*squared loss"),
    (dict(output_matrix=[[2.0, 0.5], [0.5, 1.0]]), r"solver='pcg'.*output_matrix=None"),
    (dict(output_matrix=2 * np.eye(2)), r"solver='pcg'.*output_matrix=None"),
    (dict(sketch=ds.GaussianSketch(15)),
     r"solver='pcg'.*landmarks.*SubSampling, LeverageScores.*solver='direct'"),
    (dict(sketch=ds.PSparsified(20, p=0.2)), r"solver='pcg'.*landmarks"),
    (dict(sketch=None), r"solver='pcg'.*sketch=None"),
    (dict(solver="cg"), "solver: expected 'admm', 'auto', 'newton' or 'pcg'"),
])
def test_bad_input_is_refused_before_anything_is_written(tmp_path, kw, match):
    X, y = _data(n=80, t=2)
    args = dict(kernel=ds.Gaussian(gamma=GAMMA), loss="squared", sketch=ds.SubSampling(10),
                solver="pcg", store=tmp_path / "s.zarr")
    with pytest.raises(ValueError, match=match):
        ds.SketchedRegressor(**{**args, **kw}).fit(X, y)
    assert not (tmp_path / "s.zarr").exists()


def test_identity_output_matrix_is_accepted():
    X, y = _data(n=200, t=2)
    kw = dict(sketch=ds.SubSampling(30), lam=1e-3, solver="pcg", tol=1e-10, random_state=0,
              options=F64)
    a = _reg(**kw).fit(X, y)
    b = _reg(output_matrix=np.eye(2), **kw).fit(X, y)
    assert np.array_equal(a.predict(X), b.predict(X))


def test_auto_picks_pcg_by_the_cost_model():
    """"auto": the squared loss follows distsketch.solvers.pcg.choose_solver (direct = the sweeps'
    own choice, Newton at this size); other losses and M ≠ I never take PCG."""
    X, y = _data(n=200)
    kw = dict(sketch=ds.SubSampling(30), lam=1e-3, solver="auto", tol=1e-10, max_iter=300,
              random_state=0, options=F64)
    assert _reg(**kw).fit(X, y).solver_ == "newton"  # m = 30 ≤ 8100: direct
    # PCG's passes now cost nothing
    kw["options"] = dataclasses.replace(F64, tuning=ds.Tuning(auto_pcg_passes=0))
    est = _reg(**kw).fit(X, y)
    assert est.solver_ == "pcg" and est.get_params()["solver"] == "auto"
    assert est.residual_ <= 1e-10
    huber = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss="huber", **kw).fit(X, y)
    assert huber.solver_ == "newton"
    X2, Y2 = _data(n=200, t=2)
    M = [[1.0, 0.5], [0.5, 1.0]]
    assert _reg(output_matrix=M, **kw).fit(X2, Y2).solver_ == "newton"
    # a sketch without landmarks stays on the sweeps whatever the cost
    assert _reg(**{**kw, "sketch": ds.GaussianSketch(15)}).fit(X, y).solver_ == "newton"
