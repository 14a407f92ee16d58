"""Every estimator path against the papers' dense closed forms (docs/design/math.md, "Driver solve")."""

import functools

import numpy as np
import pytest

import distsketch as ds
from conftest import CLOSED_FORM_RTOL, all_sketches, dtype_options
from distsketch.solvers.direct import EIGEN_PATH_LENGTH
from reference.closed_forms import (
    exact_krr_predict,
    iokr_scores,
    sisokr_linear_predict,
    sisokr_scores,
    sketched_krr_predict,
)
from reference.errors import rel_err

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)

KX = ds.Gaussian(gamma=1.0)
KY = ds.Gaussian(gamma=0.5)
LAM = 1e-3
SKETCHES = all_sketches(40)


def _fit(X, Y, sx, sy, *, seed=0, lam=LAM, block_dtype="float32", **kw):
    return ds.SISOKR(KX, KY, input_sketch=sx, output_sketch=sy, lam=lam, random_state=seed,
                     options=dtype_options(block_dtype), **kw).fit(X, Y)


@pytest.mark.parametrize("name", sorted(SKETCHES))
@pytest.mark.parametrize("side", ["both", "input", "output"])
def test_sisokr_equals_prop1(small_problem, name, side, block_dtype):
    """score_candidates == k(y,y) − 2 k_Y(y,Y) R_Yᵀ(R_Y K_Y R_Yᵀ)^† R_Y K_Y K_X R_Xᵀ(…)^† R_X k_X(X,x)."""
    X, Y, Xq, Yc = small_problem
    sk = SKETCHES[name]
    sx = sk if side in ("both", "input") else None
    sy = sk if side in ("both", "output") else None
    model = _fit(X, Y, sx, sy, block_dtype=block_dtype)
    got = model.score_candidates(Xq, Yc)
    want = sisokr_scores(KX, KY, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                         X, Y, Xq, Yc, LAM)
    assert got.shape == (len(Xq), len(Yc))
    assert rel_err(got, want) <= CLOSED_FORM_RTOL[block_dtype]


def test_identity_sketches_equal_iokr(small_problem, block_dtype):
    X, Y, Xq, Yc = small_problem
    got = _fit(X, Y, None, None, block_dtype=block_dtype).score_candidates(Xq, Yc)
    assert rel_err(got, iokr_scores(KX, KY, X, Y, Xq, Yc, LAM)) <= CLOSED_FORM_RTOL[block_dtype]


def test_subsampling_m_equals_n_is_iokr(small_problem, block_dtype):
    X, Y, Xq, Yc = small_problem
    n = len(X)
    got = _fit(X, Y, ds.SubSampling(n), ds.SubSampling(n), block_dtype=block_dtype).score_candidates(Xq, Yc)
    assert rel_err(got, iokr_scores(KX, KY, X, Y, Xq, Yc, LAM)) <= CLOSED_FORM_RTOL[block_dtype]


@pytest.mark.parametrize("name", sorted(SKETCHES))
def test_sketched_krr_equals_eq3(small_problem, name, block_dtype):
    X, _, Xq, _ = small_problem
    rng = np.random.default_rng(1)
    y = np.sin(X @ np.array([1.0, -2.0, 0.5])) + 0.1 * rng.normal(size=len(X))
    model = _KRR(KX, sketch=SKETCHES[name], lam=LAM, random_state=3, options=dtype_options(block_dtype)).fit(X, y)
    got = model.predict(Xq)
    want = sketched_krr_predict(KX, model.sketch_.matrix(), X, y, Xq, LAM)
    assert got.shape == (len(Xq),)
    assert rel_err(got, want) <= CLOSED_FORM_RTOL[block_dtype]


def test_sketched_krr_multioutput_and_exact(small_problem, block_dtype):
    X, Y, Xq, _ = small_problem
    T = Y[:, :3] + 0.5 * X[:, :1]
    model = _KRR(KX, lam=LAM, options=dtype_options(block_dtype)).fit(X, T)
    got = model.predict(Xq)
    assert got.shape == (len(Xq), 3)
    assert rel_err(got, exact_krr_predict(KX, X, T, Xq, LAM)) <= CLOSED_FORM_RTOL[block_dtype]


@pytest.mark.parametrize("sy", [None, ds.GaussianSketch(15), ds.SubSampling(20)], ids=str)
def test_linear_output_kernel_predicts_vectors(small_problem, sy, block_dtype):
    X, Y, Xq, _ = small_problem
    T = Y + 1.0 + 0.3 * X[:, :1]
    model = ds.SISOKR(KX, ds.Linear(), input_sketch=ds.SubSampling(25), output_sketch=sy,
                      lam=LAM, random_state=5, options=dtype_options(block_dtype)).fit(X, T)
    got = model.predict(Xq)
    want = sisokr_linear_predict(KX, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                                 X, T, Xq, LAM)
    assert got.shape == (len(Xq), T.shape[1])
    assert rel_err(got, want) <= CLOSED_FORM_RTOL[block_dtype]


def test_linear_output_iokr_is_multioutput_krr(small_problem, block_dtype):
    X, Y, Xq, _ = small_problem
    T = Y + 1.0  # no all-zero column: elementwise relative error stays defined
    model = ds.SISOKR(KX, ds.Linear(), lam=LAM, options=dtype_options(block_dtype)).fit(X, T)
    assert rel_err(model.predict(Xq), exact_krr_predict(KX, X, T, Xq, LAM)) <= CLOSED_FORM_RTOL[block_dtype]


@pytest.mark.parametrize("lams", [(1e-1, 1e-3, 1e-5)])
def test_set_lam_equals_fresh_fit(small_problem, lams):
    X, Y, Xq, Yc = small_problem
    path = _fit(X, Y, ds.SubSampling(25), ds.PSparsified(12, p=0.2), seed=7)
    path.set_params(lam=list(lams))
    path.fit(X, Y)
    krr = _KRR(KX, sketch=ds.GaussianSketch(15), lam=list(lams), random_state=2).fit(X, Y[:, 0])
    for lam in lams:
        assert path.set_lam(lam) is path
        fresh = ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(25), output_sketch=ds.PSparsified(12, p=0.2),
                          lam=lam, random_state=7).fit(X, Y)
        np.testing.assert_allclose(path.score_candidates(Xq, Yc), fresh.score_candidates(Xq, Yc),
                                   rtol=1e-10, atol=0)
        np.testing.assert_array_equal(path.predict(Xq), fresh.predict(Xq))
        krr.set_lam(lam)
        fresh_krr = _KRR(KX, sketch=ds.GaussianSketch(15), lam=lam, random_state=2).fit(X, Y[:, 0])
        np.testing.assert_allclose(krr.predict(Xq), fresh_krr.predict(Xq), rtol=1e-10, atol=0)


def test_set_lam_changes_predictions(small_problem):
    X, Y, Xq, Yc = small_problem
    model = _fit(X, Y, ds.SubSampling(25), None)
    a = model.set_lam(1e-1).score_candidates(Xq, Yc)
    b = model.set_lam(1e-5).score_candidates(Xq, Yc)
    assert model.lam_ == 1e-5
    assert np.max(np.abs(a - b)) > 1e-3


def test_predict_returns_best_candidate(small_problem):
    X, Y, Xq, Yc = small_problem
    model = _fit(X, Y, ds.SubSampling(25), ds.CountSketch(10))
    scores = model.score_candidates(Xq, Yc)
    np.testing.assert_array_equal(model.predict(Xq, candidates=Yc), Yc[np.argmin(scores, axis=1)])
    # default candidates: unique training outputs in order of first appearance
    _, first = np.unique(Y, axis=0, return_index=True)
    np.testing.assert_array_equal(model.candidates_, Y[np.sort(first)])
    np.testing.assert_array_equal(model.candidate_index_, np.sort(first))
    np.testing.assert_array_equal(model.predict(Xq), model.predict(Xq, candidates=model.candidates_))


@pytest.mark.parametrize("sy", [None, ds.PSparsified(12, p=0.2)], ids=["IOKR", "ISOKR"])
def test_exact_input_lam_path_equals_dense_formula(small_problem, sy, block_dtype):
    """Exact input: (K_X + nλI) factored per λ; every λ of the path is the closed form."""
    X, Y, Xq, Yc = small_problem
    lams = [1e-1, 1e-3, 1e-6]
    model = ds.SISOKR(KX, KY, output_sketch=sy, lam=lams, random_state=4, options=dtype_options(block_dtype)).fit(X, Y)
    assert model.input_solution_.exact and model.input_solution_.V is None  # Cholesky per λ
    T = Y[:, :2] + 0.5 * X[:, :1]
    krr = _KRR(KX, lam=lams, options=dtype_options(block_dtype)).fit(X, T)
    for lam in lams:
        model.set_lam(lam)
        want = sisokr_scores(KX, KY, np.eye(len(X)), model.output_sketch_.matrix(), X, Y, Xq, Yc, lam)
        assert rel_err(model.score_candidates(Xq, Yc), want) <= CLOSED_FORM_RTOL[block_dtype], lam
        if sy is None:
            assert rel_err(model.score_candidates(Xq, Yc), iokr_scores(KX, KY, X, Y, Xq, Yc, lam)) <= CLOSED_FORM_RTOL[block_dtype]
        got = krr.set_lam(lam).predict(Xq)
        assert rel_err(got, exact_krr_predict(KX, X, T, Xq, lam)) <= CLOSED_FORM_RTOL[block_dtype], lam


def test_exact_input_falls_back_to_eigenvalues_where_cholesky_fails():
    """K_X singular (duplicated rows) and nλ below its rounding error: the Cholesky
    factorisation fails and that λ is solved by the (clipped) eigendecomposition."""
    X = np.repeat(np.arange(5.0)[:, None], 4, axis=0)
    y = np.arange(20.0)
    lam = 1e-300
    model = _KRR(ds.Linear(), lam=lam).fit(X, y)
    sol = model.input_solution_
    assert sol.V is None and sol._factor(lam) is None
    eig = sol.with_eigen()
    np.testing.assert_array_equal(model.dual_coef_[:, 0], eig.solve(y[:, None], lam)[:, 0])
    assert np.isfinite(model.predict(X)).all()


def test_long_lam_path_eigen_route_equals_cholesky_route(small_problem):
    """Exact input side: more than EIGEN_PATH_LENGTH values share one eigendecomposition
    of K_X; fewer factor K_X + nλI per λ. The same model either way. A sketched input side
    with a well-conditioned B and one λ takes the generalized route (G + nλB factored, no
    eigendecomposition; tests/test_driver_routes.py checks it against the others)."""
    X, Y, Xq, Yc = small_problem
    long_path = list(np.geomspace(1e-6, 1e-1, EIGEN_PATH_LENGTH + 1))
    eig = _fit(X, Y, None, ds.GaussianSketch(10), lam=long_path, seed=2)
    assert eig.input_solution_.V is not None
    for lam in (long_path[0], 3e-4, long_path[-1]):
        chol = _fit(X, Y, None, ds.GaussianSketch(10), lam=lam, seed=2)
        assert chol.input_solution_.V is None
        assert rel_err(eig.set_lam(lam).score_candidates(Xq, Yc),
                       chol.score_candidates(Xq, Yc)) <= 1e-9, lam
    assert _fit(X, Y, ds.SubSampling(25), None).input_solution_.route == "generalized"
