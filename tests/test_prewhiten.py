"""Pre-whitening (``EngineOptions.prewhiten``): the whitened sketch ``R' = Tᵀ R`` against dense
formulas, the pass's blocks and sums on it, the models against the papers' closed forms with
the drawn sketch ``R``, an ill-conditioned problem where the order of whitening and summing
matters, its invariance to blocks and schedulers, and stores written with the other setting
(docs/design/math.md, "Pre-whitening")."""

import functools
import json
import pickle

import dask
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import distsketch as ds
from distsketch.engine.prewhiten import PREWHITEN_SUPPORT, landmark_gram, prewhitened, prewhitens
from distsketch.engine.rows import as_row_source
from distsketch.engine.store import open_fit_store
from distsketch.engine.storeguard import StoreError
from distsketch.linalg.blocks import gram_dot
from distsketch.sketches import RealizedSketch, WhitenedSketch
from passhelpers import sums_of
from reference.closed_forms import dense, pass_sums, sisokr_scores, sketched_krr_predict
from reference.errors import norm_rel_err, rel_err

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)

K = ds.Gaussian(gamma=0.5)
F64 = dict(block_dtype="float64", block_rows=17)
ON = dict(prewhiten=True)  # whitened whatever the conditioning (small problems are well conditioned)


def _data(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.3 * X[:, 1] ** 2 + 0.05 * rng.normal(size=n), \
        rng.normal(size=(7, d))


def _inner(name, X):
    n = len(X)
    if name == "leverage_scores":
        return ds.LeverageScores(15).realize(n, seed=3, data=as_row_source(X, argument="X"),
                                             kernel=K)
    spec = {"subsampling": ds.SubSampling(15), "accumulation": ds.Accumulation(15, q=2),
            "p_sparsified": ds.PSparsified(15, p=0.02)}[name]
    return spec.realize(n, seed=3)


INNERS = ["subsampling", "accumulation", "leverage_scores", "p_sparsified"]


def _whitened(name, X):
    R = _inner(name, X)
    return R, prewhitened(R, K, X[R.support], rtol=1e-14)


# --------------------------------------------------------------------------- the sketch


@pytest.mark.parametrize("name", INNERS)
def test_landmark_gram_and_whitening_are_dense_formulas(name):
    """``B0 = R K Rᵀ`` from the landmarks alone equals the dense product over all rows, and
    ``T`` whitens it: ``Tᵀ B0 T = I``."""
    X, _, _ = _data()
    R, W = _whitened(name, X)
    Rd = dense(R.matrix())
    B0 = Rd @ K(X, X) @ Rd.T
    assert norm_rel_err(landmark_gram(R, K, X[R.support]), B0) <= 1e-13
    assert np.abs(W.T.T @ B0 @ W.T - np.eye(W.m)).max() <= 1e-8
    assert W.inner is R and W.T.shape == (R.m, W.m)


@pytest.mark.parametrize("name", INNERS)
def test_whitened_sketch_operations_are_the_dense_products(name):
    """``matrix() = Tᵀ R``; columns, mixing, its transposed blocks, ``left_columns``,
    ``left_rows``, ``transpose_dot`` and the pass's block ``k(A, X_J) R'_mixᵀ`` (float64; float32
    rounded once from it) are the dense products."""
    X, _, Xq = _data()
    R, W = _whitened(name, X)
    n, T = len(X), W.T
    M = T.T @ dense(R.matrix())
    assert W.matrix().shape == (W.m, n) and W.matrix().dtype == np.float64
    assert norm_rel_err(W.matrix(), M) <= 1e-14
    assert norm_rel_err(W.columns(10, 40), M[:, 10:40]) <= 1e-14
    J = W.support
    assert np.array_equal(J, R.support) and W.support_size == R.support_size
    assert norm_rel_err(W.mixing, M[:, J]) <= 1e-14
    for a, b in W.support_spans(4):
        assert norm_rel_err(W.mixing_t_block(a, b), M[:, J[a:b]].T) <= 1e-14
    rng = np.random.default_rng(1)
    for a, b in [(0, 17), (17, 34), (34, 60)]:
        block = rng.normal(size=(b - a, 3))
        got = W.left_columns(block, a, b)
        assert norm_rel_err(got, M[:, a:b] @ block) <= 1e-13
        rows, values = W.left_rows(block, a, b)
        np.testing.assert_array_equal(got[rows], values)
        assert not np.delete(got, rows, axis=0).any()
    T2 = rng.normal(size=(W.m, 4))
    assert norm_rel_err(W.transpose_dot(T2), M[:, J].T @ T2) <= 1e-13
    want = K(Xq, X) @ M.T
    got = gram_dot(K, Xq, X[J], W, chunk=4)
    assert got.dtype == np.float64 and norm_rel_err(got, want) <= 1e-13
    f32 = gram_dot(K, Xq, X[J], W, chunk=4, dtype=np.float32)
    np.testing.assert_array_equal(f32, got.astype(np.float32))  # rounded once


@pytest.mark.parametrize("name", INNERS)
def test_state_config_and_pickle_round_trips(name):
    """``get_state`` / ``from_state`` (meta through JSON) and pickling rebuild the same
    whitened sketch bitwise; the recorded configuration is the inner sketch's with the
    whitening's rank, threshold and fingerprint (another ``T`` is another configuration)."""
    X, _, _ = _data()
    R, W = _whitened(name, X)
    arrays, meta = W.get_state()
    assert meta["kind"] == "whitened" and meta["m"] == W.m
    again = RealizedSketch.from_state(arrays, json.loads(json.dumps(meta)))
    assert type(again) is WhitenedSketch and type(again.inner) is type(R)
    np.testing.assert_array_equal(again.T, W.T)
    np.testing.assert_array_equal(again.matrix(), W.matrix())
    np.testing.assert_array_equal(again.support, W.support)
    P = W.mixing_t_block(0, W.support_size)
    unpickled = pickle.loads(pickle.dumps(W))
    assert "_proj" in W.__dict__ and "_proj" not in unpickled.__dict__  # rebuilt where used
    np.testing.assert_array_equal(unpickled.mixing_t_block(0, W.support_size), P)
    cfg = json.loads(json.dumps(W.to_config()))
    assert {k: v for k, v in cfg.items() if k != "whitened"} == R.to_config()
    assert cfg["whitened"]["rank"] == W.m and cfg["whitened"]["rtol"] == 1e-14
    other = WhitenedSketch(R, 2.0 * W.T, rtol=1e-14)
    assert other.to_config() != W.to_config()
    with pytest.raises(ValueError, match=r"T must have shape"):
        WhitenedSketch(R, W.T[:-1], rtol=1e-14)


def test_where_pre_whitening_applies():
    """None: a support of at most PREWHITEN_SUPPORT·m rows (never all n, never the identity);
    True: any support below n; False: never."""
    n = 400
    sub = ds.SubSampling(20).realize(n, seed=1)
    acc = ds.Accumulation(20, q=2).realize(n, seed=1)
    wide = ds.PSparsified(20, p=0.2).realize(n, seed=1)  # about 400·(1 − 0.8²⁰) = 395 rows
    assert 2 * 20 < wide.support_size < n
    gauss, count = ds.GaussianSketch(20).realize(n, seed=1), ds.CountSketch(20).realize(n, seed=1)
    ident, every = ds.Identity().realize(n, seed=1), ds.SubSampling(n).realize(n, seed=1)
    assert acc.support_size <= PREWHITEN_SUPPORT * acc.m
    for R, auto, forced in [(sub, True, True), (acc, True, True), (wide, False, True),
                            (gauss, False, False), (count, False, False), (ident, False, False),
                            (every, False, False), (None, False, False)]:
        assert prewhitens(R, None) is auto
        assert prewhitens(R, True) is forced
        assert prewhitens(R, False) is False
    X = np.random.default_rng(0).normal(size=(n, 2))
    assert prewhitens(prewhitened(sub, K, X[sub.support], rtol=1e-14), True) is False


def test_option_is_validated():
    for bad in (1, 0, "yes", np.bool_(True)):
        with pytest.raises(ValueError, match=r"^options\.prewhiten: must be None"):
            _KRR(K, sketch=ds.SubSampling(5), options=ds.EngineOptions(prewhiten=bad)).fit(
                *_data()[:2])
    opts = ds.EngineOptions()
    assert (opts.prewhiten_rtol, opts.eig_rtol) == (1e-14, 1e-10)
    assert ds.EngineOptions(rtol=1e-8).prewhiten_rtol == 1e-8


def test_a_kernel_without_positive_eigenvalue_is_named():
    X, y, _ = _data()
    zero = ds.kernels.CallableKernel(lambda A, B: np.zeros((len(A), len(B))))
    with pytest.raises(ValueError, match=r"^kernel: the sketched Gram matrix R K Rᵀ has no "
                                         r"positive eigenvalue"):
        _KRR(zero, sketch=ds.SubSampling(10), random_state=0).fit(X, y)


def test_a_landmark_with_nan_in_a_lazy_input_is_refused_before_anything_is_written(tmp_path):
    """A lazy input is checked block by block in the pass; the pre-whitening reads the
    landmarks before it: a NaN there is named as the pass names it, with its row, before the
    store records anything."""
    import dask.array as da

    X, y, _ = _data(n=80)
    clean = _KRR(K, sketch=ds.SubSampling(15), random_state=0,
                 options=ds.EngineOptions(block_rows=20, prewhiten=True)).fit(da.from_array(X, chunks=(20, 3)), y)
    row = int(clean.sketch_.support[3])
    X[row, 1] = np.nan
    with pytest.raises(ValueError, match=rf"^X: contains NaN or infinity \(at row {row}, a "
                                         r"landmark of the sketch\)"):
        _KRR(K, sketch=ds.SubSampling(15), random_state=0, store=tmp_path / "t",
             options=ds.EngineOptions(block_rows=20, prewhiten=True)).fit(da.from_array(X, chunks=(20, 3)), y)
    assert not open_fit_store(tmp_path / "t").meta_or_none()  # no pass recorded


# --------------------------------------------------------------------------- the pass


@pytest.mark.parametrize("block_dtype", ["float64", "float32"])
def test_pass_blocks_and_sums_are_the_dense_formulas(tmp_path, block_dtype):
    """The stored blocks are ``C' = K R'ᵀ`` (float32: rounded once from float64 kernel values
    and products) and the sums ``G = C'ᵀC'``, ``B = R'C'``, ``b = C'ᵀy`` of exactly those
    values; ``B ≈ I``."""
    X, y, _ = _data()
    m = _KRR(K, sketch=ds.SubSampling(15), random_state=1, store=tmp_path / "s",
             options=ds.EngineOptions(block_dtype=block_dtype, block_rows=17,
                                      gram_chunk=4, **ON)).fit(X, y)
    assert isinstance(m.sketch_, WhitenedSketch)
    Rw = dense(m.sketch_.matrix())
    C = zarr.open_group(str(tmp_path / "s"), mode="r")["pass/C"][:]
    assert C.dtype == np.dtype(block_dtype) and C.shape == (len(X), m.sketch_.m)
    assert norm_rel_err(C, K(X, X) @ Rw.T) <= (1e-13 if block_dtype == "float64" else 1e-7)
    want = pass_sums(K, Rw, X, targets=y, C=C)
    got = sums_of(tmp_path / "s")
    for key in ("G", "B", "b"):
        assert norm_rel_err(np.reshape(got[key], want[key].shape), want[key]) <= 1e-12, key
    assert np.abs(got["B"] - np.eye(m.sketch_.m)).max() <= 1e-5


def test_sums_independent_of_blocks_and_scheduler():
    """Any block size: the same sums to rounding; any local scheduler: bitwise the same."""
    X, y, _ = _data(n=90)

    def fit(block_rows, scheduler="threads"):
        with dask.config.set(scheduler=scheduler):
            return _KRR(K, sketch=ds.Accumulation(20), lam=1e-4, random_state=2,
                        options=ds.EngineOptions(block_rows=block_rows,
                                                 block_dtype="float64", **ON)).fit(X, y)

    base = fit(7)
    for other in (fit(25), fit(90)):
        np.testing.assert_array_equal(other.sketch_.T, base.sketch_.T)  # drawn before the pass
        assert norm_rel_err(other.predict(X), base.predict(X)) <= 1e-10
    for scheduler in ("synchronous", "processes"):
        np.testing.assert_array_equal(fit(7, scheduler).predict(X), base.predict(X))


# --------------------------------------------------------------------------- the models


@pytest.mark.parametrize("name", ["subsampling", "accumulation", "leverage"])
def test_krr_regressor_and_features_equal_the_closed_forms(name):
    """Pre-whitened or not, SketchedKRR, a squared-loss SketchedRegressor and SketchedFeatures
    are the papers' dense forms with the drawn sketch ``R`` (float64 blocks): ``R' = TᵀR`` with
    ``T`` invertible on the kept space is the same model."""
    X, y, Xq = _data()
    sketch = {"subsampling": ds.SubSampling(15), "accumulation": ds.Accumulation(15),
              "leverage": ds.LeverageScores(15)}[name]
    lam = 1e-4
    for setting in (True, False):
        opts = ds.EngineOptions(prewhiten=setting, **F64)
        krr = _KRR(K, sketch=sketch, lam=lam, random_state=5, options=opts).fit(X, y)
        assert isinstance(krr.sketch_, WhitenedSketch) is (setting is True)
        R = krr.sketch_.inner.matrix() if setting is True else krr.sketch_.matrix()
        want = sketched_krr_predict(K, R, X, y, Xq, lam)
        assert rel_err(krr.predict(Xq), want) <= 1e-8
        reg = ds.SketchedRegressor(K, loss="squared", sketch=sketch, lam=lam,
                                   fit_intercept=False, random_state=5, options=opts).fit(X, y)
        assert rel_err(reg.predict(Xq), want) <= 1e-8
        f = ds.SketchedFeatures(K, sketch=sketch, random_state=5, options=opts).fit(X)
        Rd = dense(R)
        s, U = np.linalg.eigh(Rd @ K(X, X) @ Rd.T)
        keep = s > 1e-12 * s[-1]
        pinv = (U[:, keep] / s[keep]) @ U[:, keep].T
        want_k = K(Xq, X) @ Rd.T @ pinv @ Rd @ K(X, Xq)
        assert norm_rel_err(f.transform(Xq) @ f.transform(Xq).T, want_k) <= 1e-8


@pytest.mark.parametrize("side", ["both", "input", "output"])
def test_sisokr_equals_prop1_with_the_drawn_sketches(small_problem, side):
    """SISOKR pre-whitened on either or both sides is Prop. 1 with the drawn sketches."""
    X, Y, Xq, Yc = small_problem
    kx, ky, lam = ds.Gaussian(gamma=1.0), ds.Gaussian(gamma=0.5), 1e-3
    sx = ds.SubSampling(15) if side in ("both", "input") else None
    sy = ds.SubSampling(12) if side in ("both", "output") else None
    model = ds.SISOKR(kx, ky, input_sketch=sx, output_sketch=sy, lam=lam, random_state=0,
                      options=ds.EngineOptions(block_dtype="float64", prewhiten=True)).fit(X, Y)
    assert isinstance(model.input_sketch_, WhitenedSketch) is (sx is not None)
    assert isinstance(model.output_sketch_, WhitenedSketch) is (sy is not None)

    def drawn(R):
        return R.inner.matrix() if isinstance(R, WhitenedSketch) else R.matrix()

    want = sisokr_scores(kx, ky, drawn(model.input_sketch_), drawn(model.output_sketch_),
                         X, Y, Xq, Yc, lam)
    assert rel_err(model.score_candidates(Xq, Yc), want) <= 1e-8


def _nystroem_ridge(X, y, Xq, L, gamma, lam, rtol=1e-14):
    """The Nyström ridge at the landmarks ``L``, SVD-stable: features ``Z = k(X, L) T`` with
    ``T = U_r s_r^{-1/2}`` (eigenvalues of ``K_LL`` above ``rtol`` of the largest), then
    ``w = V Σ (Σ² + nλ)^{-1} Uᵀ y`` from the SVD of ``Z`` (no normal equations)."""
    from scipy.spatial.distance import cdist

    def k(A, B):
        return np.exp(-gamma * cdist(A, B, "sqeuclidean"))

    s, U = np.linalg.eigh(k(L, L))
    keep = s > rtol * s[-1]
    T = U[:, keep] / np.sqrt(s[keep])
    Uz, sv, Vt = np.linalg.svd(k(X, L) @ T, full_matrices=False)
    return k(Xq, L) @ T @ (Vt.T @ (sv / (sv**2 + len(X) * lam) * (Uz.T @ y)))


def test_ill_conditioned_landmarks_reach_the_exact_nystroem_ridge():
    """An ill-conditioned ``K_JJ`` (400 landmarks of a smooth 3-d problem, 200 near-repeated
    rows, cond ≈ 2e10) and a small λ: summing ``CᵀC`` first loses ``K_JJ``'s small directions in
    its rounding (measured here: 8e-4 from the exact ridge with float64 blocks, 1.7e-3 with
    float32), whitening first keeps them (3e-11, 6e-8)."""
    rng = np.random.default_rng(0)
    n, d, gamma, lam = 2000, 3, 2.0, 1e-8
    X = rng.uniform(-1, 1, size=(n, d))
    X[1000:1200] = X[:200] + 1e-6 * rng.normal(size=(200, d))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.01 * rng.normal(size=n)
    Xq = rng.uniform(-1, 1, size=(200, d))
    err = {}
    for setting in (None, True, False):
        for dtype in ("float64", "float32"):
            m = _KRR(ds.Gaussian(gamma), sketch=ds.SubSampling(400), lam=lam, random_state=0,
                     options=ds.EngineOptions(prewhiten=setting, block_dtype=dtype)).fit(X, y)
            want = _nystroem_ridge(X, y, Xq, m.landmarks_, gamma, lam)
            err[setting, dtype] = np.linalg.norm(m.predict(Xq) - want) / np.linalg.norm(want)
    assert err[None, "float64"] <= 1e-9  # the default whitens this ill-conditioned K_JJ
    assert err[None, "float32"] <= 1e-6
    assert err[True, "float64"] == err[None, "float64"]
    # the other order, for the record: measurably further (a test of the test)
    assert err[False, "float64"] >= 100 * err[None, "float64"]
    assert err[False, "float32"] >= 100 * err[None, "float32"]


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")
def test_width_grid_whitens_each_width_for_its_own_kernel():
    """A γ grid shares the landmarks; each width's sketch is whitened for its kernel, and the
    refit at the best width is the plain fit at that width."""
    X, y, _ = _data(n=90)
    gammas = [0.2, 0.5, 2.0]
    cv = ds.SketchedKRRCV(ds.Gaussian(1.0), sketch=ds.SubSampling(20), lams=[1e-4, 1e-2],
                          gammas=gammas, cv=3, random_state=0,
                          options=ds.EngineOptions(**F64, **ON)).fit(X, y)
    g = cv.best_params_["gamma"]
    R = cv.sketch_
    assert isinstance(R, WhitenedSketch)
    B0 = landmark_gram(R.inner, ds.Gaussian(g), cv.landmarks_)
    assert np.abs(R.T.T @ B0 @ R.T - np.eye(R.m)).max() <= 1e-8
    for other in gammas:
        if other != g:  # another width's whitening does not whiten this one
            B = landmark_gram(R.inner, ds.Gaussian(other), cv.landmarks_)
            assert np.abs(R.T.T @ B @ R.T - np.eye(R.m)).max() > 1e-3
    plain = ds.SketchedKRR(ds.Gaussian(g), sketch=ds.SubSampling(20), lam=cv.lam_,
                           random_state=0, options=ds.EngineOptions(**F64, **ON)).fit(X, y)
    np.testing.assert_array_equal(plain.sketch_.T, R.T)
    assert norm_rel_err(cv.predict(X), plain.predict(X)) <= 1e-8


# --------------------------------------------------------------------------- stores


def test_store_written_with_the_other_setting_is_refused_or_replaced(tmp_path):
    """A store records whether its pass was pre-whitened: a fit with the other setting is
    refused (the option named), or with ``overwrite=True`` computed afresh; the same setting
    resumes it."""
    X, y, _ = _data()
    path = tmp_path / "s"

    def fit(**kw):
        return _KRR(K, sketch=ds.SubSampling(15), random_state=1, store=path,
                    options=ds.EngineOptions(block_rows=17, **kw)).fit(X, y)

    off = fit(prewhiten=False)
    with pytest.raises(StoreError, match=r"input\.sketch\.whitened.*EngineOptions\.prewhiten"):
        fit(prewhiten=True)
    np.testing.assert_array_equal(fit(prewhiten=False).predict(X), off.predict(X))
    on = fit(overwrite=True, prewhiten=True)
    assert isinstance(on.sketch_, WhitenedSketch)
    with pytest.raises(StoreError, match=r"EngineOptions\.prewhiten"):
        fit(prewhiten=False)
    np.testing.assert_array_equal(fit(prewhiten=True).predict(X), on.predict(X))
    loaded = ds.load(path)
    assert isinstance(loaded.sketch_, WhitenedSketch)
    np.testing.assert_array_equal(loaded.predict(X), on.predict(X))


def test_sparse_inputs_are_pre_whitened_as_dense_ones():
    X, y, Xq = _data()
    X[np.abs(X) < 0.8] = 0.0
    opts = ds.EngineOptions(**F64, **ON)
    a = _KRR(K, sketch=ds.SubSampling(15), random_state=3, options=opts).fit(X, y)
    b = _KRR(K, sketch=ds.SubSampling(15), random_state=3, options=opts).fit(
        sp.csr_array(X), y)
    assert norm_rel_err(b.sketch_.T, a.sketch_.T) <= 1e-12
    assert norm_rel_err(b.predict(Xq), a.predict(Xq)) <= 1e-10


def test_the_default_whitens_only_an_ill_conditioned_landmark_gram():
    """``prewhiten=None`` keeps the sketch as drawn where ``B0 = R K Rᵀ`` has a condition
    number below ``PREWHITEN_COND`` (the previous pass, bitwise), and whitens it above."""
    from distsketch.engine.prewhiten import PREWHITEN_COND, well_conditioned

    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 20))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=300)
    k = ds.Gaussian(gamma=1 / 40)

    def fit(setting):
        return _KRR(k, sketch=ds.SubSampling(60), lam=1e-4, random_state=0,
                    options=ds.EngineOptions(prewhiten=setting, **F64)).fit(X, y)

    R = fit(False).sketch_
    B0 = landmark_gram(R, k, X[R.support])
    assert np.linalg.cond(B0) < PREWHITEN_COND / 100 and well_conditioned(B0)
    auto = fit(None)
    assert not isinstance(auto.sketch_, WhitenedSketch)
    np.testing.assert_array_equal(auto.predict(X), fit(False).predict(X))
    assert isinstance(fit(True).sketch_, WhitenedSketch)
    ill = B0 + 0.0
    ill[:, 1] = ill[:, 0] * (1 + 1e-9)  # two landmarks almost the same direction
    ill[1, :] = ill[:, 1]
    assert not well_conditioned(ill)
