"""``SketchedKRR(solver="pcg")``: Falkon's preconditioned conjugate gradient.

PCG solves ``(K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ (Y − 1ȳᵀ)`` from recomputed kernel blocks; the
direct route solves the same system through the eigendecomposition of ``H``. Checked here:
PCG = the direct route = a naive dense solve (numpy, the n × m matrix formed) on small data,
invariance to block size and scheduler, resume after SIGKILL, and the errors.
"""

from __future__ import annotations

import textwrap
import warnings

import dask
import numpy as np
import pytest

import distsketch as ds
from distsketch.solvers.pcg import choose_solver
from killhelpers import run_killed
from pcghelpers import data as _data
from reference.errors import norm_rel_err as _rel
from reference.kernels import gaussian_gram

GAMMA = 0.5
F64 = ds.EngineOptions(block_dtype="float64", block_rows=96)


def _naive_alpha(X, y, landmarks, lam, intercept):
    """``α = (K_nmᵀ K_nm + nλ K_mm)^{-1} K_nmᵀ (Y − 1ȳᵀ)`` with numpy, K_nm formed, one
    coefficient per landmark as given (``reference.closed_forms.dense_distinct`` merges
    repeated landmarks first: not the coefficients compared here)."""
    k = ds.Gaussian(gamma=GAMMA)
    Y = np.asarray(y, dtype=np.float64).reshape(len(X), -1)
    ybar = Y.mean(axis=0) if intercept else np.zeros(Y.shape[1])
    Knm = np.asarray(k(X, landmarks))
    Kmm = np.asarray(k(landmarks, landmarks))
    A = Knm.T @ Knm + len(X) * lam * Kmm
    return np.linalg.solve(A, Knm.T @ (Y - ybar)), ybar


@pytest.mark.slow
@pytest.mark.parametrize("t", [1, 3], ids=["single", "multi"])
@pytest.mark.parametrize("intercept", [True, False], ids=["intercept", "no-intercept"])
@pytest.mark.parametrize("lam", [1e-2, 1e-4])
def test_pcg_equals_direct_and_dense(lam, intercept, t):
    """Predictions of PCG at tol = 1e-12 (float64 blocks) equal the direct route's to 1e-8
    relative (1e-12 residual, amplified by cond(PᵀHP) = O(10²) here, leaves a
    margin of 10²), and both equal a dense numpy solve of the normal equations."""
    X, y = _data(t=t)
    kw = dict(sketch=ds.SubSampling(40), lam=lam, fit_intercept=intercept, random_state=5,
              options=F64)
    direct = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), solver="direct", **kw).fit(X, y)
    pcg = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), solver="pcg", tol=1e-12, max_iter=500,
                         **kw).fit(X, y)
    assert direct.solver_ == "direct" and pcg.solver_ == "pcg"
    assert np.array_equal(pcg.sketch_.support, direct.sketch_.support)  # the same landmarks
    Xt, _ = _data(n=100, t=t, seed=1)
    assert pcg.predict(Xt).shape == direct.predict(Xt).shape
    assert _rel(pcg.predict(Xt), direct.predict(Xt)) < 1e-8
    assert _rel(pcg.predict(X), direct.predict(X)) < 1e-8
    alpha, ybar = _naive_alpha(X, y, pcg.landmarks_, lam, intercept)
    assert _rel(pcg.dual_coef_, alpha) < 1e-7  # coefficients: cond(H) enters, not predictions
    assert np.allclose(pcg.intercept_, ybar, rtol=1e-14, atol=1e-14)
    assert 1 < pcg.n_iter_ <= 500 and pcg.n_passes_ == pcg.n_iter_ + 1


@pytest.mark.slow
def test_pcg_leverage_scores_and_lambda_path():
    """LeverageScores (landmarks with non-uniform scales) and a λ path: warm starts give every
    λ of the path; set_lam switches among them and matches the direct route."""
    X, y = _data(t=2)
    kw = dict(sketch=ds.LeverageScores(40), lam=[1e-2, 1e-3, 1e-4], random_state=2, options=F64)
    direct = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), solver="direct", **kw).fit(X, y)
    pcg = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), solver="pcg", tol=1e-12, max_iter=500,
                         **kw).fit(X, y)
    assert len(pcg.n_iters_) == 3 and pcg.n_passes_ == 1 + int(pcg.n_iters_.sum())
    for lam in (1e-2, 1e-3, 1e-4):
        direct.set_lam(lam)
        pcg.set_lam(lam)
        assert pcg.lam_ == lam
        assert _rel(pcg.predict(X), direct.predict(X)) < 1e-8
    with pytest.raises(ValueError, match=r"lam: .*not fitted.*solver='pcg'"):
        pcg.set_lam(5e-3)


@pytest.mark.slow
def test_invariant_to_block_size_and_scheduler():
    """Synchronous vs threads with the same blocks: bitwise (the engine's fixed reduction
    tree). Other block sizes change the summation order of ``Σ_I K_Iᵀ(K_I v)`` (rounding
    ~1e-16 per pass), hence the CG trajectory, and the stopping iteration may differ by one
    (46 / 47 here): both solutions lie within tol of the exact one, so they agree to
    tol × cond(PᵀHP), not bitwise. Measured 1.9e-13 and 5.8e-13 relative; bound 1e-10."""
    X, y = _data(t=2)
    kw = dict(sketch=ds.SubSampling(40), lam=1e-3, random_state=7, solver="pcg", tol=1e-12,
              max_iter=500)
    fits = {}
    for rows in (50, 96, 400):
        for scheduler in ("sync", "threads"):
            with dask.config.set(scheduler=scheduler):
                fits[rows, scheduler] = ds.SketchedKRR(
                    ds.Gaussian(gamma=GAMMA), options=ds.EngineOptions(
                        block_dtype="float64", block_rows=rows), **kw).fit(X, y)
    for rows in (50, 96, 400):
        assert np.array_equal(fits[rows, "sync"].dual_coef_, fits[rows, "threads"].dual_coef_)
    ref = fits[96, "sync"].predict(X)
    for rows in (50, 400):
        assert _rel(fits[rows, "sync"].predict(X), ref) < 1e-10


def test_float32_blocks_close_to_float64():
    """Kernel blocks rounded to float32 (accumulated in float64): the model moves by the
    rounding of the kernel (≈ 6e-8 relative) times the conditioning; 1e-3 relative bounds it."""
    X, y = _data()
    kw = dict(sketch=ds.SubSampling(40), lam=1e-3, random_state=7, solver="pcg", tol=1e-10)
    a = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), options=F64, **kw).fit(X, y)
    b = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA),
                       options=ds.EngineOptions(block_dtype="float32", block_rows=96),
                       **kw).fit(X, y)
    err = _rel(b.predict(X), a.predict(X))
    assert 0 < err < 1e-3


def test_max_iter_warns():
    X, y = _data()
    est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40), lam=1e-4,
                         solver="pcg", tol=1e-12, max_iter=3, random_state=1, options=F64)
    with pytest.warns(UserWarning, match="max_iter = 3"):
        est.fit(X, y)
    assert est.n_iter_ == 3 and est.n_passes_ == 4


_KILL_SCRIPT = textwrap.dedent("""
    import numpy as np
    import distsketch as ds
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] + 0.3 * np.arange(2)[None, :] * X[:, 2:3] \\
        + 0.1 * rng.normal(size=(400, 2)) + 2.0
    ds.SketchedKRR(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(40), lam=[1e-2, 1e-4],
                   solver="pcg", tol=1e-12, max_iter=500, random_state=13,
                   options=ds.EngineOptions(block_dtype="float64", block_rows=96),
                   store={store!r}).fit(X, Y)
""")


@pytest.mark.slow
def test_resume_after_sigkill_between_iterations(tmp_path):
    """Killed by SIGKILL in the second λ's iterations, a fit on the same store resumes from the
    last saved iterate (the right-hand side and the first λ are not recomputed) and ends with
    the bitwise identical model; refitting a finished store makes one pass (the data check);
    other data of the same shape are refused, or solved afresh with overwrite=True."""
    X, y = _data(t=2)
    kw = dict(sketch=ds.SubSampling(40), lam=[1e-2, 1e-4], solver="pcg", tol=1e-12,
              max_iter=500, random_state=13, options=F64)
    whole = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), store=tmp_path / "whole.zarr",
                           **kw).fit(X, y)
    first = int(whole.n_iters_[0])
    kill_at = 1 + first + 5  # the rhs pass, λ = 1e-2's iterations, then 4 of λ = 1e-4's
    assert whole.n_iters_[1] > 5
    store = tmp_path / "killed.zarr"
    run_killed(_KILL_SCRIPT.format(store=str(store)), kill_at=kill_at)
    resumed = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), store=store, **kw).fit(X, y)
    assert np.array_equal(resumed.dual_coef_, whole.dual_coef_)
    assert np.array_equal(resumed.intercept_, whole.intercept_)
    assert list(resumed.n_iters_) == list(whole.n_iters_)
    # one pass of fingerprints (the data checked), then the remaining iterations
    assert resumed.n_passes_ == whole.n_passes_ - kill_at + 2
    again = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), store=store, **kw).fit(X, y)
    assert again.n_passes_ == 1 and np.array_equal(again.dual_coef_, whole.dual_coef_)
    import zarr

    assert "C" not in zarr.open_group(str(store), mode="r")["pass"]  # no kernel blocks kept
    # other data of the same shape (landmarks unchanged): refused, naming the rows; or redone
    X2 = X.copy()
    row = int(np.setdiff1d(np.arange(len(X)), resumed.sketch_.support)[-1])
    X2[row, 0] += 1.0
    with pytest.raises(ValueError, match=r"training data differ.*\(X, rows 384–399\)"):
        ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), store=store, **kw).fit(X2, y)
    redo = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), store=store, **{
        **kw, "options": ds.EngineOptions(block_dtype="float64", block_rows=96,
                                          overwrite=True)}).fit(X2, y)
    fresh = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), **kw).fit(X2, y)
    assert np.array_equal(redo.dual_coef_, fresh.dual_coef_)


@pytest.mark.slow
def test_saved_model_round_trips(tmp_path):
    X, y = _data()
    est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40), lam=[1e-2, 1e-3],
                         solver="pcg", tol=1e-10, max_iter=300, random_state=3,
                         options=F64).fit(X, y)
    est.save(tmp_path / "m.zarr")
    loaded = ds.load(tmp_path / "m.zarr")
    assert loaded.get_params()["solver"] == "pcg"
    assert loaded.get_params()["tol"] == 1e-10 and loaded.get_params()["max_iter"] == 300
    assert loaded.solver_ == "pcg" and list(loaded.n_iters_) == list(est.n_iters_)
    assert np.array_equal(loaded.predict(X), est.predict(X))
    assert loaded.predict(X).shape == (len(X),)
    assert np.array_equal(loaded.set_lam(1e-3).predict(X), est.set_lam(1e-3).predict(X))
    direct = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40), lam=1e-2,
                            random_state=3, options=F64).fit(X, y)
    direct.save(tmp_path / "d.zarr")
    back = ds.load(tmp_path / "d.zarr")
    assert back.solver_ == "direct" and np.array_equal(back.predict(X), direct.predict(X))


@pytest.mark.parametrize("sketch", [None, ds.PSparsified(20, p=0.2), ds.GaussianSketch(20)],
                         ids=["exact", "p-sparsified", "gaussian"])
def test_unsupported_sketch_is_refused(sketch):
    X, y = _data(n=60)
    with pytest.raises(ValueError, match=r"solver='pcg'.*landmarks.*SubSampling, LeverageScores"):
        ds.SketchedKRR(sketch=sketch, solver="pcg").fit(X, y)


@pytest.mark.parametrize("kw, match", [
    (dict(solver="cg"), "solver: expected 'auto', 'direct' or 'pcg'"),
    (dict(solver="pcg", tol=0.0), "tol"),
    (dict(solver="pcg", tol=1.5), "tol"),
    (dict(solver="auto", tol="small"), "tol"),
    (dict(solver="pcg", max_iter=0), "max_iter"),
    (dict(solver="pcg", max_iter=2.5), "max_iter"),
])
def test_solver_arguments_are_validated(kw, match):
    X, y = _data(n=60)
    with pytest.raises(ValueError, match=match):
        ds.SketchedKRR(sketch=ds.SubSampling(10), **kw).fit(X, y)


def test_auto_is_direct_at_small_sizes_and_pcg_beyond():
    X, y = _data()
    est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40), lam=1e-3,
                         random_state=0).fit(X, y)
    assert est.get_params()["solver"] == "auto" and est.solver_ == "direct"
    sub = ds.SubSampling(20_000)
    # direct while 2nm² ≤ auto_pcg_passes·n·m·auto_pass_flops: m ≤ 8100 whatever n (the
    # crossover measured at n = 1e5 was m = 8000)
    m_star = ds.Tuning().auto_pcg_passes * ds.Tuning().auto_pass_flops // 2
    for n in (10**4, 10**6):
        assert choose_solver("auto", n=n, m=m_star, sketch=ds.SubSampling(m_star),
                             store=None) == "direct"
        assert choose_solver("auto", n=n, m=m_star + 1, sketch=ds.SubSampling(m_star + 1),
                             store=None) == "pcg"
    assert choose_solver("auto", n=10**6, m=20_000, sketch=sub, store=None) == "pcg"
    # n = 2e7, m = 500: cheap to form G, but a kept store's C (4nm bytes = 37 GiB) is not
    assert choose_solver("auto", n=2 * 10**7, m=500, sketch=ds.SubSampling(500),
                         store=None) == "direct"
    assert choose_solver("auto", n=2 * 10**7, m=500, sketch=ds.SubSampling(500),
                         store="s.zarr") == "pcg"
    # sketches without landmarks stay direct whatever the size
    assert choose_solver("auto", n=10**6, m=20_000, sketch=ds.GaussianSketch(20_000),
                         store=None) == "direct"
    assert choose_solver("direct", n=10**6, m=20_000, sketch=sub, store=None) == "direct"


def test_cv_subclass_stays_direct():
    """SketchedKRRCV (no solver parameter) keeps the one-pass direct route."""
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cv = ds.SketchedKRRCV(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40),
                              lams=(1e-5, 1e-4, 1e-3, 1e-2), cv=3, random_state=0).fit(X, y)
    assert cv.solver_ == "direct"


@pytest.mark.slow
def test_dask_input_equals_numpy_and_is_checked():
    """Dask rows give the numpy fit bitwise (same blocks), and a NaN in lazy rows is found by
    the first pass, naming the argument and the row."""
    da = pytest.importorskip("dask.array")
    X, y = _data()
    kw = dict(sketch=ds.SubSampling(40), lam=1e-3, solver="pcg", tol=1e-10, random_state=4,
              options=F64)
    a = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), **kw).fit(X, y)
    b = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), **kw).fit(da.from_array(X, chunks=(96, 3)),
                                                           da.from_array(y, chunks=96))
    assert np.array_equal(a.dual_coef_, b.dual_coef_)
    Xbad = X.copy()
    Xbad[123, 1] = np.nan
    with pytest.raises(ValueError, match=r"X: contains NaN or infinity \(first at row 123\)"):
        ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), **kw).fit(da.from_array(Xbad, chunks=(96, 3)), y)


def test_landmark_gram_recomputed_equals_held(monkeypatch):
    """Beyond KMM_MEMORY the driver recomputes ``K_mm v`` from the landmarks in row chunks
    instead of holding ``K_mm``: the same model up to rounding (the CG trajectory moves at
    ~1e-16 per product; bound 1e-10 relative at tol = 1e-12), and the held matrix equals the
    kernel of the landmarks (numpy reference)."""
    import distsketch.solvers.preconditioner as preconditioner
    from distsketch.engine.features import FeatureMap

    X, y = _data(t=2)
    kw = dict(sketch=ds.SubSampling(40), lam=1e-3, solver="pcg", tol=1e-12, max_iter=500,
              random_state=8, options=F64)
    held = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), **kw).fit(X, y)
    L = held.landmarks_
    gram = preconditioner.LandmarkGram(FeatureMap(ds.Gaussian(gamma=GAMMA), L, None), hold=True)
    assert gram.hold
    K = gaussian_gram(L, gamma=GAMMA)
    assert np.allclose(gram.matrix(), K, rtol=0, atol=1e-13)
    monkeypatch.setattr(preconditioner.LandmarkGram, "CHUNK", 16)  # several chunks for m = 40
    monkeypatch.setattr(preconditioner, "KMM_MEMORY", 0)
    lean = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), **kw).fit(X, y)
    assert _rel(lean.predict(X), held.predict(X)) < 1e-10
    v = np.random.default_rng(0).normal(size=(40, 3))
    chunked = preconditioner.LandmarkGram(FeatureMap(ds.Gaussian(gamma=GAMMA), L, None), hold=False)
    assert not chunked.hold
    assert np.allclose(chunked.dot(v), K @ v, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_toml_config_selects_the_solver(tmp_path):
    """``[model] solver = "pcg"`` (with ``tol``, ``max_iter``) reaches the estimator."""
    from distsketch.cli.config import load_config

    X, y = _data(n=120)
    np.savez(tmp_path / "train.npz", X=X, Y=y)
    (tmp_path / "fit.toml").write_text(textwrap.dedent("""
        [model]
        type = "SketchedKRR"
        lam = 1e-3
        random_state = 0
        solver = "pcg"
        tol = 1e-9
        max_iter = 50

        [model.kernel]
        name = "gaussian"
        gamma = 0.5

        [model.sketch]
        name = "subsampling"
        m = 20

        [data]
        train = "train.npz"
    """))
    est = load_config(tmp_path / "fit.toml").estimator(n=len(X))
    assert (est.solver, est.tol, est.max_iter) == ("pcg", 1e-9, 50)
    assert est.fit(X, y).solver_ == "pcg"


@pytest.mark.parametrize("b", [1, 255, 256, 700])
def test_gram_product_converts_float32_blocks_tile_by_tile(b, monkeypatch):
    """``Cᵀ(C V)`` of a float32 block in float64 tiles equals the float64 product of the same
    (float32-rounded) values to the rounding of float64 sums (m · ε relative); a float64 block
    is multiplied as it is (bitwise the plain product)."""
    from distsketch.engine.mapreduce import Workspace
    from distsketch.engine.sweep import gram_product

    rng = np.random.default_rng(b)
    C32 = rng.random((b, 37)).astype(np.float32)
    V = rng.standard_normal((37, 2))
    C64 = C32.astype(np.float64)
    want = C64.T @ (C64 @ V)
    got = gram_product(C32, V, Workspace())
    assert got.dtype == np.float64
    assert np.abs(got - want).max() <= 64 * np.finfo(float).eps * np.abs(C64).sum(0).max() * (
        np.abs(C64) @ np.abs(V)).max()
    assert np.array_equal(gram_product(C64, V, Workspace()), want)


@pytest.mark.parametrize("m,block", [(1, 4), (13, 4), (16, 4), (40, 1024)])
def test_upper_gram_blockwise_equals_the_product(m, block, monkeypatch):
    """The preconditioner's ``T Tᵀ`` computed block by block over the upper triangle equals
    the plain product there (same sums, other order: a few ulps of the row norms' product),
    for sizes that are and are not multiples of the block; and the preconditioner built on it
    satisfies ``AᵀA = T Tᵀ/m + λI`` (Falkon's definition) to the same rounding."""
    from scipy.linalg import cholesky

    import distsketch.solvers.preconditioner as preconditioner

    monkeypatch.setattr(preconditioner, "GRAM_BLOCK", block)
    rng = np.random.default_rng(m)
    A = rng.standard_normal((m, m))
    T = cholesky(A @ A.T + m * np.eye(m), lower=False)
    want = T @ T.T
    got = preconditioner.upper_gram(T)
    tol = 8 * m * np.finfo(float).eps * np.outer(*(2 * [np.linalg.norm(T, axis=1)]))
    upper = np.triu_indices(m)
    assert np.all(np.abs(got - want)[upper] <= tol[upper])
    lam = 1e-3
    P = preconditioner.Preconditioner(np.eye(m), lam, 10, T=T)
    assert np.allclose(P.A.T @ P.A, want / m + lam * np.eye(m), rtol=0,
                       atol=64 * m * np.finfo(float).eps * np.abs(want).max() / m)


def test_product_tiles_stay_in_cache_and_any_tiling_gives_the_sum(monkeypatch):
    """The tile rows shrink with m so that a float64 tile stays about PRODUCT_TILE_BYTES (within
    [8, 512] rows), and ``gram_product`` over a block with several tiles equals the float64
    product of the same values whatever the tile size (the sums of float64 tiles in order)."""
    import distsketch.engine.sweep as sw
    from distsketch.engine.mapreduce import Workspace

    assert sw.product_tile_rows(1000) == 262 and sw.product_tile_rows(20_000) == 13
    assert sw.product_tile_rows(10) == 512 and sw.product_tile_rows(10**6) == 8
    rng = np.random.default_rng(1)
    C32 = rng.random((301, 50)).astype(np.float32)
    V = rng.standard_normal((50, 3))
    C64 = C32.astype(np.float64)
    want = C64.T @ (C64 @ V)
    bound = 64 * np.finfo(float).eps * np.abs(C64).sum(0).max() * (np.abs(C64) @ np.abs(V)).max()
    for tile_bytes in (8 * 50 * 8, 8 * 50 * 37, 1 << 30):
        monkeypatch.setattr(sw, "PRODUCT_TILE_BYTES", tile_bytes)
        assert np.abs(sw.gram_product(C32, V, Workspace()) - want).max() <= bound


def test_a_user_sketch_declaring_landmarks_takes_the_pcg_route(tmp_path):
    """PCG asks a sketch whether it selects landmarks (``Sketch.selects_landmarks``), not for
    its class name: a user's sub-sampling sketch defined here fits by PCG as SubSampling does,
    and a user's mixing sketch is refused naming the sketches that select landmarks."""
    from distsketch.sketches.base import SKETCHES
    from distsketch.sketches.sampling import SubSampling
    from distsketch.sketches.tiled import GaussianSketch

    class MySubSampling(SubSampling):
        name = "test_my_subsampling"

    class MyMixing(GaussianSketch):
        name = "test_my_mixing"

    try:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(300, 3))
        y = np.sin(X[:, 0])
        kw = dict(lam=1e-3, solver="pcg", random_state=0,
                  options=ds.EngineOptions(block_dtype="float64"))
        mine = ds.SketchedKRR(ds.Gaussian(0.5), sketch=MySubSampling(40), **kw).fit(X, y)
        ref = ds.SketchedKRR(ds.Gaussian(0.5), sketch=ds.SubSampling(40), **kw).fit(X, y)
        np.testing.assert_array_equal(mine.predict(X[:20]), ref.predict(X[:20]))
        with pytest.raises(ValueError, match=r"needs landmarks.*SubSampling, LeverageScores, "
                                             r"MySubSampling\)"):
            ds.SketchedKRR(ds.Gaussian(0.5), sketch=MyMixing(40), **kw).fit(X, y)
    finally:
        SKETCHES.pop("test_my_subsampling", None)
        SKETCHES.pop("test_my_mixing", None)


@pytest.mark.parametrize("m", [1, 5, 1024, 1500, 2049])
def test_the_held_landmark_gram_is_the_symmetrised_kernel_matrix(m):
    """``LandmarkGram`` symmetrises ``K_mm`` in place tile by tile: bitwise ``½(K + Kᵀ)`` of
    the kernel matrix (each entry ``½(K_ij + K_ji)``; addition commutes), exactly
    symmetric, and ``matrix()`` a Fortran-ordered copy of it."""
    from distsketch.engine.features import FeatureMap
    from distsketch.solvers.preconditioner import LandmarkGram

    L = np.random.default_rng(m).random((m, 3))
    fmap = FeatureMap(ds.Gaussian(gamma=0.7), L, None, 700)
    K = LandmarkGram(fmap, hold=False).matrix()  # the kernel rows as computed, not symmetrised
    held = LandmarkGram(fmap)
    want = 0.5 * (K + K.T)
    np.testing.assert_array_equal(held._K, want)
    np.testing.assert_array_equal(held._K, held._K.T)
    got = held.matrix()
    assert got.flags.f_contiguous and not np.shares_memory(got, held._K)
    np.testing.assert_array_equal(got, want)
    v = np.random.default_rng(1).standard_normal((m, 2))
    np.testing.assert_array_equal(held.dot(v), np.ascontiguousarray(want) @ v)
