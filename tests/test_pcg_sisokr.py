"""``SISOKR(solver="pcg")``: the input side by PCG, r_Y right-hand sides.

The input side of SISOKR is multi-output KRR of the whitened output features ``Ψ = D T_Y``:
``(K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ D T_Y``, ``W(λ) = α(λ)ᵀ`` in the input features
``k_X(X_J, x)``. Checked here: PCG = the direct SISOKR (same ``random_state``, float64 blocks,
``tol = 1e-12``) on decoding scores and predictions, for several λ, ranks and sketches; the
coefficients = a dense numpy solve; invariance to scheduler and block size; the errors, raised
before anything is written; save / load; resume after SIGKILL.

Tolerances: CG stops at a relative residual 1e-12 in the preconditioned norm; the solution's
error is that times cond(PᵀHP) (O(10²) here), so the scores agree to ~1e-10; 1e-8 leaves a
margin of 10².
"""

from __future__ import annotations

import dataclasses
import textwrap

import dask
import numpy as np
import pytest

import distsketch as ds
from killhelpers import run_killed
from reference.errors import norm_rel_err as _rel

F64 = ds.EngineOptions(block_dtype="float64", block_rows=64)
KX, KY = ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5)


def _data(n=300, seed=0):
    """Multi-label outputs (6 labels) driven by the inputs."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    logits = X[:, :1] * np.arange(1, 7) - X[:, 1:2]
    Y = (rng.random((n, 6)) < 1 / (1 + np.exp(-logits))).astype(float)
    return X, Y


def _pair(**kw):
    """The direct and the PCG SISOKR with the same arguments, fitted on ``_data()``."""
    X, Y = _data()
    args = dict(input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                random_state=3, options=F64)
    args.update(kw)
    direct = ds.SISOKR(KX, KY, **args).fit(X, Y)
    pcg = ds.SISOKR(KX, KY, solver="pcg", tol=1e-12, max_iter=500, **args).fit(X, Y)
    return X, Y, direct, pcg


def _check_same_model(direct, pcg, Xt, bound=1e-8):
    cand = direct.candidates_
    assert np.array_equal(cand, pcg.candidates_)
    assert _rel(pcg.score_candidates(Xt, cand), direct.score_candidates(Xt, cand)) < bound
    assert np.array_equal(pcg.predict(Xt), direct.predict(Xt))
    idx_d, sc_d = direct.predict_topk(Xt, k=3)
    idx_p, sc_p = pcg.predict_topk(Xt, k=3)
    assert np.array_equal(idx_p, idx_d) and _rel(sc_p, sc_d) < bound


@pytest.mark.slow
@pytest.mark.parametrize("output_sketch", [ds.SubSampling(30), ds.PSparsified(30, p=0.2)],
                         ids=["out-subsampling", "out-psparsified"])
@pytest.mark.parametrize("input_sketch", [ds.SubSampling(40), ds.LeverageScores(40)],
                         ids=["in-subsampling", "in-leverage"])
def test_pcg_equals_direct_and_dense(input_sketch, output_sketch):
    """Same landmarks, same output features (T_Y), decoding scores to 1e-8 on a λ path
    (path and set_lam); α equals a dense numpy solve of the normal equations."""
    lams = [1e-2, 1e-3, 1e-4]
    X, Y, direct, pcg = _pair(input_sketch=input_sketch, output_sketch=output_sketch, lam=lams)
    assert direct.solver_ == "direct" and pcg.solver_ == "pcg"
    assert pcg.input_solution_ is None and pcg.input_projection_ is None
    assert np.array_equal(pcg.input_sketch_.support, direct.input_sketch_.support)
    assert np.array_equal(pcg.output_sketch_.support, direct.output_sketch_.support)
    assert np.array_equal(pcg.output_whitening_, direct.output_whitening_)
    assert len(pcg.n_iters_) == 3 and pcg.n_passes_ == 1 + int(pcg.n_iters_.sum())
    assert pcg.residuals_.shape == (3, pcg.coef_.shape[0]) and pcg.residuals_.max() <= 1e-12
    Xt, _ = _data(n=60, seed=1)
    L = pcg.input_landmarks_
    Knm, Kmm = np.asarray(KX(X, L)), np.asarray(KX(L, L))
    Psi = np.asarray(pcg.output_features(Y))  # rows of D T_Y
    for lam in lams:
        direct.set_lam(lam)
        pcg.set_lam(lam)
        _check_same_model(direct, pcg, Xt)
        alpha = np.linalg.solve(Knm.T @ Knm + len(X) * lam * Kmm, Knm.T @ Psi)
        assert _rel(pcg.coef_.T, alpha) < 1e-6  # coefficients: cond(H) enters
        assert _rel(np.asarray(pcg.surrogate(Xt)), np.asarray(KX(Xt, L)) @ alpha) < 1e-8


@pytest.mark.slow
def test_reduced_rank_equals_direct():
    """Ranks (several p, set_rank) and rank_lam ≠ λ: the principal directions from
    ``αᵀ K_nmᵀ K_nm α`` (carried by the iterations) give the direct reduced-rank model."""
    lams = [1e-3, 1e-2]
    X, Y, direct, pcg = _pair(lam=lams, rank=[2, 1, 4], rank_lam=1e-2)
    Xt, _ = _data(n=60, seed=2)
    assert pcg.rank_ == 2 and pcg.rank_lam_ == 1e-2
    for lam in lams:
        direct.set_lam(lam)
        pcg.set_lam(lam)
        for p in (2, 1, 4, 5, None):
            direct.set_rank(p)
            pcg.set_rank(p)
            assert pcg.coef_.shape == direct.coef_.shape[:1] + (40,)
            if p is not None:
                assert _rel(pcg.principal_values_, direct.principal_values_) < 1e-8
            _check_same_model(direct, pcg, Xt)


@pytest.mark.slow
def test_linear_output_kernel_with_intercept():
    """Vector outputs (a Linear output kernel, fit_intercept=True): predict = the direct
    route's to 1e-8."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 3))
    Y = np.column_stack([np.sin(X[:, 0]), X[:, 1] * X[:, 2], np.cos(X[:, 1])]) + 3.0
    args = dict(input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(25),
                lam=[1e-3, 1e-4], fit_intercept=True, random_state=1, options=F64)
    direct = ds.SISOKR(KX, "linear", **args).fit(X, Y)
    pcg = ds.SISOKR(KX, "linear", solver="pcg", tol=1e-12, max_iter=500, **args).fit(X, Y)
    assert pcg.candidates_ is None and np.array_equal(pcg.intercept_, direct.intercept_)
    Xt = rng.normal(size=(50, 3))
    for lam in (1e-3, 1e-4):
        assert _rel(pcg.set_lam(lam).predict(Xt), direct.set_lam(lam).predict(Xt)) < 1e-8


@pytest.mark.slow
def test_invariant_to_scheduler_and_block_size():
    """Sync vs threads with the same blocks: bitwise. Other block sizes change the summation
    order (hence the CG trajectory): within tol × cond(PᵀHP); bound 1e-10."""
    X, Y = _data()
    fits = {}
    for rows in (64, 300):
        for scheduler in ("sync", "threads"):
            with dask.config.set(scheduler=scheduler):
                fits[rows, scheduler] = ds.SISOKR(
                    KX, KY, input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                    lam=1e-3, solver="pcg", tol=1e-12, max_iter=500, random_state=7,
                    options=ds.EngineOptions(block_dtype="float64", block_rows=rows)).fit(X, Y)
    for rows in (64, 300):
        assert np.array_equal(fits[rows, "sync"].coef_, fits[rows, "threads"].coef_)
    cand = fits[64, "sync"].candidates_
    assert _rel(fits[300, "sync"].score_candidates(X, cand),
                fits[64, "sync"].score_candidates(X, cand)) < 1e-10


@pytest.mark.parametrize("kw, match", [
    (dict(output_sketch=None), r"output_sketch: solver='pcg'.*exact output side"),
    (dict(input_sketch=ds.GaussianSketch(20)),
     r"solver='pcg'.*landmarks.*SubSampling.*input_sketch=GaussianSketch"),
    (dict(input_sketch=None), r"solver='pcg'.*input_sketch=None \(an exact input side\)"),
    (dict(rank=2, rank_lam=5e-3), r"rank_lam: 0.005 was not fitted.*solver='pcg'"),
    (dict(tol=0.0), "tol"),
    (dict(max_iter=0), "max_iter"),
    (dict(solver="cg"), "solver: expected 'auto', 'direct' or 'pcg'"),
])
def test_bad_input_refused_before_anything_is_written(kw, match, tmp_path):
    X, Y = _data(n=80)
    args = dict(input_sketch=ds.SubSampling(20), output_sketch=ds.SubSampling(10),
                lam=[1e-2, 1e-3], solver="pcg", store=tmp_path / "s.zarr")
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        ds.SISOKR(KX, KY, **args).fit(X, Y)
    assert not (tmp_path / "s.zarr").exists()


def test_set_lam_and_rank_lam_restricted_to_the_fitted_path():
    X, Y = _data(n=120)
    est = ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(20), output_sketch=ds.SubSampling(10),
                    lam=[1e-2, 1e-3], solver="pcg", tol=1e-10, random_state=0,
                    options=F64).fit(X, Y)
    with pytest.raises(ValueError, match=r"lam: 0.005 was not fitted.*solver='pcg'"):
        est.set_lam(5e-3)
    assert est.set_lam(1e-3).lam_ == 1e-3 and est.n_iter_ == est.n_iters_[1]


def test_auto_and_the_cv_subclass():
    """"auto" is direct at small m (and without a sketched output side); SISOKRCV has no
    solver parameter and stays direct."""
    X, Y = _data(n=120)
    kw = dict(input_sketch=ds.SubSampling(20), output_sketch=ds.SubSampling(10), lam=1e-3,
              random_state=0)
    assert ds.SISOKR(KX, KY, **kw).get_params()["solver"] == "direct"
    assert ds.SISOKR(KX, KY, solver="auto", **kw).fit(X, Y).solver_ == "direct"
    cv = ds.SISOKRCV(KX, KY, input_sketch=ds.SubSampling(20), output_sketch=ds.SubSampling(10),
                     lams=(1e-3, 1e-2, 1e-1), cv=3, random_state=0)
    assert "solver" not in cv.get_params()
    assert cv.fit(X, Y).solver_ == "direct"


def test_auto_takes_pcg_beyond_the_crossover():
    """With the crossover moved below m (``Tuning(auto_pcg_passes=0)``: PCG's passes cost
    nothing), "auto" takes PCG for a sketched output side and stays direct for an exact one."""
    X, Y = _data(n=120)
    options = dataclasses.replace(F64, tuning=ds.Tuning(auto_pcg_passes=0))
    kw = dict(input_sketch=ds.SubSampling(20), lam=1e-3, random_state=0, solver="auto",
              tol=1e-10, options=options)
    assert ds.SISOKR(KX, KY, output_sketch=ds.SubSampling(10), **kw).fit(X, Y).solver_ == "pcg"
    assert ds.SISOKR(KX, KY, output_sketch=None, **kw).fit(X, Y).solver_ == "direct"


@pytest.mark.slow
def test_saved_model_round_trips(tmp_path):
    X, Y, direct, pcg = _pair(lam=[1e-2, 1e-3], rank=[3, 1])
    pcg.save(tmp_path / "m.zarr")
    loaded = ds.load(tmp_path / "m.zarr")
    assert loaded.get_params()["solver"] == "pcg" and loaded.get_params()["tol"] == 1e-12
    assert loaded.solver_ == "pcg" and list(loaded.n_iters_) == list(pcg.n_iters_)
    assert loaded.n_passes_ == pcg.n_passes_ and loaded.input_solution_ is None
    cand = pcg.candidates_
    assert np.array_equal(loaded.score_candidates(X, cand), pcg.score_candidates(X, cand))
    loaded.set_lam(1e-3).set_rank(1)
    pcg.set_lam(1e-3).set_rank(1)
    assert np.array_equal(loaded.score_candidates(X, cand), pcg.score_candidates(X, cand))
    with pytest.raises(ValueError, match="not fitted"):
        loaded.set_lam(0.5)
    direct.save(tmp_path / "d.zarr")
    back = ds.load(tmp_path / "d.zarr")
    assert back.solver_ == "direct" and back.get_params()["solver"] == "direct"
    assert np.array_equal(back.score_candidates(X, cand), direct.score_candidates(X, cand))


_KILL_SCRIPT = textwrap.dedent("""
    import numpy as np
    import distsketch as ds
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    logits = X[:, :1] * np.arange(1, 7) - X[:, 1:2]
    Y = (rng.random((300, 6)) < 1 / (1 + np.exp(-logits))).astype(float)
    ds.SISOKR(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5), input_sketch=ds.SubSampling(40),
              output_sketch=ds.SubSampling(30), lam=[1e-2, 1e-4], solver="pcg", tol=1e-12,
              max_iter=500, random_state={seed},
              options=ds.EngineOptions(block_dtype="float64", block_rows=64),
              store={store!r}).fit(X, Y)
""")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [13, None], ids=["seeded", "random_state-None"])
def test_resume_after_sigkill_between_iterations(tmp_path, seed):
    """Killed by SIGKILL in the second λ's iterations, a fit on the same store recomputes the
    first pass (one pass: M, E, U; nothing of it is stored), finds its right-hand side equal
    to the recorded one, resumes from the last saved iterate and ends with the bitwise
    identical model. With random_state=None the seeds recorded in the store are reused.
    A finished store refits with the first pass alone; other data are refused, or with
    overwrite=True solved afresh."""
    X, Y = _data()
    kw = dict(input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
              lam=[1e-2, 1e-4], solver="pcg", tol=1e-12, max_iter=500, random_state=seed,
              options=F64)
    store = tmp_path / "killed.zarr"
    if seed is not None:
        whole = ds.SISOKR(KX, KY, store=tmp_path / "whole.zarr", **kw).fit(X, Y)
        assert whole.n_iters_[1] > 5
        kill_at = int(whole.n_iters_[0]) + 5  # λ = 1e-2's iterations, then 4 of λ = 1e-4's
    else:
        kill_at = 10  # in λ = 1e-2's iterations (more than 10 with these data)
    run_killed(_KILL_SCRIPT.format(store=str(store), seed=seed), kill_at=kill_at)
    resumed = ds.SISOKR(KX, KY, store=store, **kw).fit(X, Y)
    if seed is None:  # the recorded seeds: the same model as a fit from scratch with them
        import zarr

        cfg = zarr.open_group(str(store), mode="r").attrs["distsketch"]["pass"]
        assert resumed.input_sketch_.seed == cfg["input"]["sketch"]["seed"]
        assert resumed.output_sketch_.seed == cfg["output"]["sketch"]["seed"]
        assert resumed.n_passes_ == 1 + int(resumed.n_iters_.sum()) - (kill_at - 1)
        return
    assert np.array_equal(resumed.coef_, whole.coef_)
    assert list(resumed.n_iters_) == list(whole.n_iters_)
    assert resumed.n_passes_ == whole.n_passes_ - (kill_at - 1)
    again = ds.SISOKR(KX, KY, store=store, **kw).fit(X, Y)
    assert again.n_passes_ == 1 and np.array_equal(again.coef_, whole.coef_)
    import zarr

    grp = zarr.open_group(str(store), mode="r")
    assert "C" not in grp.get("pass", {}) and "D" not in grp.get("pass", {})
    X2 = X.copy()
    row = int(np.setdiff1d(np.arange(len(X)), resumed.input_sketch_.support)[-1])
    X2[row, 0] += 1.0
    with pytest.raises(ValueError, match=r"training data differ.*right-hand side"):
        ds.SISOKR(KX, KY, store=store, **kw).fit(X2, Y)
    redo = ds.SISOKR(KX, KY, store=store, **{
        **kw, "options": ds.EngineOptions(block_dtype="float64", block_rows=64,
                                          overwrite=True)}).fit(X2, Y)
    fresh = ds.SISOKR(KX, KY, **kw).fit(X2, Y)
    assert np.array_equal(redo.coef_, fresh.coef_)


def test_decoding_routes_fixed_and_per_query_sets():
    """Decoding goes through W and the feature maps unchanged: a fixed candidate array, the
    folded routes (forced; the input features have no projection, so "coef" / "kernel" fall
    back to "unfolded" / "features") and per-query sets give the direct model's top-k."""
    X, Y, direct, pcg = _pair(lam=1e-3, rank=3)
    rng = np.random.default_rng(5)
    Xq = rng.normal(size=(25, 4))
    C = (rng.random((200, 6)) < 0.4).astype(float)
    want_i, want_s = direct.predict_topk(Xq, C, k=4)
    for route in ("unfolded", "coef", "features", "kernel"):
        pcg._fold = route
        try:
            got_i, got_s = pcg.predict_topk(Xq, C, k=4)
        finally:
            pcg._fold = None
        assert np.array_equal(got_i, want_i) and _rel(got_s, want_s) < 1e-8
    sets, qs = [C[:60], C[60:]], np.arange(len(Xq)) % 2
    want_i, want_s = direct.predict_topk(Xq, k=3, candidate_sets=sets, query_sets=qs)
    got_i, got_s = pcg.predict_topk(Xq, k=3, candidate_sets=sets, query_sets=qs)
    assert np.array_equal(got_i, want_i) and _rel(got_s, want_s) < 1e-8


def test_dask_input_and_float32_blocks():
    """Dask rows give the numpy fit bitwise (the same blocks); float32 kernel blocks (the
    default, float64 sums) move the scores by the kernel's rounding (≈ 6e-8 relative) times
    the conditioning: 1e-3 bounds it."""
    da = pytest.importorskip("dask.array")
    X, Y = _data(n=200)
    kw = dict(input_sketch=ds.SubSampling(30), output_sketch=ds.SubSampling(20), lam=1e-3,
              solver="pcg", tol=1e-10, max_iter=500, random_state=2)
    a = ds.SISOKR(KX, KY, options=F64, **kw).fit(X, Y)
    b = ds.SISOKR(KX, KY, options=F64, **kw).fit(da.from_array(X, chunks=(64, 4)),
                                                 da.from_array(Y, chunks=(64, 6)))
    assert np.array_equal(a.coef_, b.coef_)
    c = ds.SISOKR(KX, KY, options=ds.EngineOptions(block_rows=64), **kw).fit(X, Y)
    cand = a.candidates_
    err = _rel(c.score_candidates(X, cand), a.score_candidates(X, cand))
    assert 0 < err < 1e-3


@pytest.mark.slow
def test_toml_config_selects_the_solver(tmp_path):
    """``[model] solver = "pcg"`` (with ``tol``, ``max_iter``) reaches a SISOKR."""
    from distsketch.cli.config import load_config

    X, Y = _data(n=120)
    np.savez(tmp_path / "train.npz", X=X, Y=Y)
    (tmp_path / "fit.toml").write_text(textwrap.dedent("""
        [model]
        type = "SISOKR"
        lam = 1e-3
        random_state = 0
        solver = "pcg"
        tol = 1e-9
        max_iter = 50

        [model.input_kernel]
        name = "gaussian"
        gamma = 0.3

        [model.output_kernel]
        name = "gaussian"
        gamma = 0.5

        [model.input_sketch]
        name = "subsampling"
        m = 20

        [model.output_sketch]
        name = "subsampling"
        m = 10

        [data]
        train = "train.npz"
    """))
    est = load_config(tmp_path / "fit.toml").estimator(n=len(X))
    assert (est.solver, est.tol, est.max_iter) == ("pcg", 1e-9, 50)
    assert est.fit(X, Y).solver_ == "pcg"
