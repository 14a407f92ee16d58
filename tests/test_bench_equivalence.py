"""The CASP benchmark compares like with like (benchmarks/bench_casp.py).

distsketch minimises ``(1/n) Σ (f(x_i) − y_i)² + λ‖f‖²``; scikit-learn's Ridge on Nyström
features ``Φ = K_nJ K_JJ^{-1/2}`` minimises ``‖Φw − y‖² + α‖w‖²`` with ``‖f‖ = ‖w‖``, and
KernelRidge minimises ``‖Kβ − y‖² + α βᵀKβ``. Both are ``n`` times the distsketch objective
when ``α = nλ``: at the same landmarks the predictions agree (Ridge without intercept).
"""

import functools

import numpy as np
import pytest

import distsketch as ds

pytest.importorskip("sklearn")
from sklearn.kernel_approximation import Nystroem
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)

GAMMA = 0.5
#: float64 blocks agree with scikit-learn to rounding; float32 blocks (the default) to the
#: float32 rounding of the kernel values, amplified by the conditioning (tests/conftest.py)
RTOL = {"float64": 1e-6, "float32": 1e-4}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 3))
    y = np.sin(X @ np.array([1.0, -0.5, 0.25])) + 3.0 + 0.1 * rng.normal(size=400)
    Xt = rng.normal(size=(50, 3))
    return X, y, Xt


def _nystroem_ridge(model, X, y, Xt, alpha, fit_intercept=False):
    nys = Nystroem(n_components=len(model.landmarks_), gamma=GAMMA).fit(model.landmarks_)
    reg = Ridge(alpha=alpha, fit_intercept=fit_intercept).fit(nys.transform(X), y)
    return reg.predict(nys.transform(Xt))


@pytest.mark.parametrize("lam", [1e-2, 1e-4, 1e-6])
def test_subsampling_matches_nystroem_ridge_with_alpha_n_lam(data, lam, block_dtype):
    X, y, Xt = data
    model = _KRR(ds.Gaussian(GAMMA), sketch=ds.SubSampling(40), lam=lam,
                           random_state=0, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, y)
    expected = _nystroem_ridge(model, X, y, Xt, alpha=len(X) * lam)
    np.testing.assert_allclose(model.predict(Xt), expected, rtol=RTOL[block_dtype], atol=1e-8)


def test_alpha_equal_lam_is_a_different_model(data):
    """Guards the convention: α = λ (without n) does not reproduce distsketch."""
    X, y, Xt = data
    lam = 1e-3
    model = _KRR(ds.Gaussian(GAMMA), sketch=ds.SubSampling(40), lam=lam,
                           random_state=0).fit(X, y)
    wrong = _nystroem_ridge(model, X, y, Xt, alpha=lam)
    assert np.max(np.abs(model.predict(Xt) - wrong)) > 1e-3


def test_set_lam_path_matches_nystroem_ridge(data, block_dtype):
    X, y, Xt = data
    grid = [1e-1, 1e-3, 1e-5]
    model = _KRR(ds.Gaussian(GAMMA), sketch=ds.SubSampling(40), lam=grid,
                           random_state=1, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, y)
    for lam in grid:
        expected = _nystroem_ridge(model, X, y, Xt, alpha=len(X) * lam)
        np.testing.assert_allclose(model.set_lam(lam).predict(Xt), expected, rtol=RTOL[block_dtype], atol=1e-8)


def test_centred_targets_match_ridge_on_centred_targets(data, block_dtype):
    """What the benchmark calls "y centred": fit on y − ȳ, add ȳ back (no feature centring)."""
    X, y, Xt = data
    lam, mean = 1e-3, y.mean()
    model = _KRR(ds.Gaussian(GAMMA), sketch=ds.SubSampling(40), lam=lam,
                           random_state=0, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, y - mean)
    expected = _nystroem_ridge(model, X, y - mean, Xt, alpha=len(X) * lam) + mean
    np.testing.assert_allclose(model.predict(Xt) + mean, expected, rtol=RTOL[block_dtype], atol=1e-8)


@pytest.mark.parametrize("lam", [1e-2, 1e-3, 1e-5, 1e-7])
def test_exact_matches_kernel_ridge_with_alpha_n_lam(data, lam, block_dtype):
    # the exact input side solves (K + nλI)β = y by Cholesky, every direction of K kept,
    # as KernelRidge does: the same predictions down to small λ
    X, y, Xt = data
    model = _KRR(ds.Gaussian(GAMMA), lam=lam, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, y)
    expected = KernelRidge(alpha=len(X) * lam, kernel="rbf", gamma=GAMMA).fit(X, y).predict(Xt)
    np.testing.assert_allclose(model.predict(Xt), expected, rtol=RTOL[block_dtype], atol=1e-8)
