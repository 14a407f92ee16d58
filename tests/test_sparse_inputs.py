"""Sparse inputs: CSR rows kept sparse where that is cheaper, with the same
kernel values and the same fitted models as dense (standardised) rows.

Tolerances. Every product kernel computes squared distances from the expansion
‖a‖² + ‖b‖² − 2⟨a, b⟩ (``distsketch.kernels``, "Numerics"), whose rounding is an absolute
error of a few ulps of ‖a‖² + ‖b‖². Two representations of the same points (sparse rows
scaled by 1/std against dense standardised rows, or sparse against dense) therefore give
Gaussian exponents that differ by at most ``c·eps·γ·(‖a‖² + ‖b‖²)`` with the larger norms
of the two, c = 8 a margin over the handful of roundings; the kernel values then differ by
that amount relative to them. A ridge solution moves by at most ``cond × (relative
perturbation of the system)``, and the systems here have ``cond ≤ (max k + λ)/λ ≤ 2/λ``
(k ≤ 1, kernel matrices scaled by 1/n), which bounds the relative change of predictions and
decoding scores: ``(2/λ)·ε_K``, times a safety factor of 100 for the whitening and the
accumulated products.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

import distsketch as ds
from distsketch.backends.base import backend_of
from distsketch.kernels import families as kernel_families
from distsketch.kernels import sparse as kernel_sparse
from distsketch.kernels import standardized as kernel_standardized
from distsketch.kernels.base import CallableKernel
from distsketch.kernels.families import Gaussian, Laplacian, Linear, Matern, Tanimoto
from distsketch.kernels.standardized import Standardized

EPS = np.finfo(np.float64).eps


@pytest.fixture
def tuning():
    """``tuning(**fields)``: the kernel products of the rest of the test (in this thread) under
    ``Tuning(**fields)`` (:func:`distsketch.kernels.tuned`; a later call wins)."""
    with contextlib.ExitStack() as stack:
        yield lambda **fields: stack.enter_context(kernel_sparse.tuned(ds.Tuning(**fields)))


def binary_sparse(n: int, d: int, density: float, seed: int) -> sp.csr_array:
    """Binary CSR rows of the given density (as Bibtex's bag-of-words rows)."""
    return sp.random_array((n, d), density=density, rng=np.random.default_rng(seed), format="csr",
                           data_sampler=lambda size: np.ones(size))


def standardise(X: sp.csr_array):
    """Dense standardised rows ``(X − mean)/std`` and sparse scaled rows ``X diag(1/std)``
    (constant columns keep scale 1), and the scale."""
    D = X.toarray()
    mean, std = D.mean(axis=0), D.std(axis=0)
    std[std == 0] = 1.0
    return (D - mean) / std, sp.csr_array(X @ sp.diags_array(1.0 / std)), mean, std


def exponent_bound(gamma: float, *blocks) -> float:
    """``8·eps·γ·(max‖a‖² + max‖b‖²)`` over every representation passed (see the module notes)."""
    norms = [float(np.max(np.asarray(B.multiply(B).sum(axis=1)) if sp.issparse(B)
                          else (B * B).sum(axis=1))) for B in blocks]
    return 8.0 * EPS * gamma * 2.0 * max(norms)


# ---------------------------------------------------------------------------- the density rule


def test_keep_sparse_threshold(tuning):
    X = binary_sparse(100, 50, 0.1, seed=0)  # exactly 500 stored entries: density 0.1
    assert X.nnz == 500
    tuning(sparse_max_density=0.1)
    assert kernel_sparse._keep_sparse(X)  # at the threshold: sparse
    tuning(sparse_max_density=0.099)
    assert not kernel_sparse._keep_sparse(X)
    assert kernel_sparse._keep_sparse(sp.csr_array((0, 5)))  # empty blocks stay sparse


@pytest.mark.parametrize("kernel", [Gaussian(0.05), Matern(1.5, 3.0), Linear(), Tanimoto()], ids=repr)
def test_density_rule_picks_each_branch_with_equal_values(kernel, monkeypatch, tuning):
    """Threshold 0: every sparse operand is densified (the dense route runs: the Gaussian's
    tiled GEMM); threshold 1: none is (CSR × dense column panels: 64-column panels with
    ``sparse_panel_bytes = 1``, one panel with a huge one; CSR × CSR with 0). Every route
    gives the dense values, for ``kernel(A, B)``, ``kernel(B, A)`` and ``kernel(A, A)``."""
    A, B = binary_sparse(130, 20, 0.15, seed=1), binary_sparse(150, 20, 0.15, seed=2)
    expected = kernel(A.toarray(), B.toarray())
    Ad = A.toarray()
    expected_aa = kernel(Ad, Ad)
    seen = []
    real_dense = kernel_sparse.dense
    for module in (kernel_sparse, kernel_families, kernel_standardized):  # where dense is called
        monkeypatch.setattr(module, "dense", lambda a: (seen.append(sp.issparse(a)), real_dense(a))[1])
    bound = exponent_bound(getattr(kernel, "gamma", 1.0), A, B) + 1e-15
    for threshold, panel_bytes, densified in [(0.0, 4 << 20, True), (1.0, 1, False),
                                              (1.0, 1 << 40, False), (1.0, 0, False)]:
        tuning(sparse_max_density=threshold, sparse_panel_bytes=panel_bytes)
        seen.clear()
        got = kernel(A, B)
        # sparse operands densified by dense() at threshold 0, never otherwise (a CSR × CSR
        # product's sparse result is densified by dense() too: only for panel_bytes = 0)
        assert (seen[:2] == [True, True]) if densified else (panel_bytes == 0 or not any(seen))
        assert_allclose(got, expected, rtol=bound, atol=1e-15)
        assert_allclose(kernel(B, A), expected.T, rtol=bound, atol=1e-15)
        assert_allclose(kernel(Ad, B), expected, rtol=bound, atol=1e-15)  # dense A, sparse B
        same = kernel(A, A)
        assert_allclose(same, expected_aa, rtol=bound, atol=1e-15)
        if isinstance(kernel, (Gaussian, Tanimoto)):
            assert np.all(np.diag(same) == 1.0)  # A is B: exact diagonal
        out = np.empty(expected.shape, dtype=np.float32)
        kernel.fill(A, B, out)
        assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
        out64 = np.empty((len(expected), 2 * expected.shape[1]))
        kernel.fill(A, B, out64[:, ::2], scale=np.full(B.shape[0], 0.5))  # strided out, scaled
        assert_allclose(out64[:, ::2], 0.5 * expected, rtol=bound, atol=1e-15)


def test_density_rule_uses_the_block_density(tuning):
    """A block above the threshold is densified, one below it is not (the same kernel call)."""
    tuning(sparse_max_density=0.1)
    sparse_block, dense_block = binary_sparse(40, 30, 0.05, seed=3), binary_sparse(40, 30, 0.3, seed=4)
    be = backend_of(sparse_block)
    assert sp.issparse(kernel_sparse.cheaper_form(sparse_block, be))
    assert isinstance(kernel_sparse.cheaper_form(dense_block, be), np.ndarray)


def test_callable_kernels_get_their_blocks_as_given():
    """The rule is measured for the built-in products only: a user's function receives CSR
    blocks however dense they are."""
    seen = []

    def func(A, B):
        seen.append((sp.issparse(A), sp.issparse(B)))
        return (A @ B.T).toarray()

    A = sp.csr_array(np.ones((4, 3)))  # density 1
    assert not kernel_sparse._keep_sparse(A)
    assert_allclose(CallableKernel(func)(A, A), np.full((4, 4), 3.0))
    assert seen == [(True, True)]


# ---------------------------------------------------------------------------- odd CSR and float32


def odd_csr() -> sp.csr_array:
    """CSR rows with unsorted column indices, explicit zeros and a duplicate entry."""
    data = np.array([2.0, 0.0, 1.0, 3.0, 0.0, 0.5, -1.0, 4.0])
    indices = np.array([4, 0, 4, 1, 3, 2, 5, 0])  # row 0: 4, 0, 4 (duplicate 4, explicit 0)
    indptr = np.array([0, 3, 5, 5, 8])  # row 2 is empty
    X = sp.csr_array((data, indices, indptr), shape=(4, 6))
    assert not X.has_canonical_format
    return X


@pytest.mark.parametrize("kernel", [Gaussian(0.2), Matern(0.5, 2.0), Matern(2.5, 2.0), Laplacian(0.3),
                                    Linear(), Tanimoto()], ids=repr)
@pytest.mark.parametrize("panel_bytes", [4 << 20, 0], ids=["csr-dense", "csr-csr"])
def test_unsorted_indices_explicit_zeros_and_duplicates(kernel, panel_bytes, tuning):
    tuning(sparse_max_density=1.0, sparse_panel_bytes=panel_bytes)
    X = odd_csr()
    D = X.toarray()
    B = np.random.default_rng(0).random((3, 6))
    # Matern ν = ½ is first order in the distance rounding: |Δk| ≤ √(|Δs|)/ℓ for coincident
    # points, |Δs| ≤ 8·eps·(‖a‖² + ‖b‖²) with ‖·‖² ≤ 26 here
    tol = np.sqrt(8 * EPS * 52) / 2.0 if isinstance(kernel, Matern) and kernel.nu == 0.5 else 1e-14
    assert_allclose(kernel(X, B), kernel(D, B), rtol=0, atol=tol)
    assert_allclose(kernel(B, X), kernel(B, D), rtol=0, atol=tol)
    assert_allclose(kernel(X, X), kernel(D, D), rtol=0, atol=tol)
    assert_allclose(np.diag(kernel(X, X)), kernel.diag(D), rtol=1e-14)


def test_float32_sparse_blocks(tuning):
    """float32 CSR rows are upcast (the values are exact in float64) and a float32 ``out`` is
    within the float32 rounding of the exponent and of exp (``distsketch.kernels``, "Backends")."""
    tuning(sparse_max_density=1.0)
    A = (binary_sparse(50, 40, 0.1, seed=5) * 0.3).astype(np.float32)
    B = (binary_sparse(30, 40, 0.1, seed=6) * 0.7).astype(np.float32)
    kernel = Gaussian(0.4)
    expected = kernel(A.toarray().astype(np.float64), B.toarray().astype(np.float64))
    got = kernel(A, B)
    assert got.dtype == np.float64
    assert_allclose(got, expected, rtol=exponent_bound(0.4, A.astype(np.float64)) + 1e-15)
    out = np.empty(expected.shape, dtype=np.float32)
    kernel.fill(A, B, out)
    # |e| ≤ γ·(‖a‖ + ‖b‖)² here; relative error (|e| + 1)·6e-8 + a few float32 ulps
    e_max = float(-np.log(expected.min()))
    assert_allclose(out, expected, rtol=(e_max + 1) * 6e-8 + 4 * np.finfo(np.float32).eps)


# ---------------------------------------------------------------------------- Standardized


@pytest.mark.parametrize("kernel", [Gaussian(0.05), Laplacian(0.05), Matern(1.5, 4.0), Matern(2.5, 4.0)],
                         ids=repr)
def test_standardized_translation_invariant_stays_sparse(kernel, tuning):
    """``k((x − μ)/s, (x' − μ)/s) = k(x/s, x'/s)``: sparse rows are scaled, not densified,
    and give the dense standardised values to the rounding of the distance expansion."""
    tuning(sparse_max_density=1.0)  # density 0.1: kept sparse
    X = binary_sparse(60, 30, 0.1, seed=7)
    Z, S, mean, std = standardise(X)
    st = Standardized(kernel, mean, std)
    assert st._translation_invariant
    transformed = st._transform(X, backend_of(X))
    assert sp.issparse(transformed) and transformed.nnz == X.nnz
    A, B = X[:35], X[35:]
    gamma = kernel.gamma if hasattr(kernel, "gamma") else 2 * kernel.nu / kernel.length_scale**2
    # Laplacian densifies after scaling: exact L1 differences, a few ulps
    rtol = (exponent_bound(gamma, Z, S) + 1e-15) * (2.0 if isinstance(kernel, Matern) else 1.0)
    expected = kernel(Z[:35], Z[35:])
    assert_allclose(st(A, B), expected, rtol=rtol, atol=1e-300)
    assert_allclose(st(A, B), st(A.toarray(), B.toarray()), rtol=rtol)
    assert_allclose(st.diag(A), kernel.diag(Z[:35]), rtol=1e-15)
    out = np.empty(expected.shape)
    st.fill(A, B, out)
    assert_allclose(out, expected, rtol=rtol)


def test_standardized_other_kernels_keep_the_densifying_path():
    """Linear and Tanimoto are not translation invariant: the mean matters, rows are densified
    and centred (the sparse shortcut would give different values)."""
    X = binary_sparse(40, 20, 0.2, seed=8)
    Z, S, mean, std = standardise(X)
    for kernel in (Linear(), Tanimoto(), Standardized(Linear(), mean, std)):
        st = Standardized(kernel, mean, std)
        assert not st._translation_invariant
        assert_allclose(st(X, X[:10]), st(X.toarray(), X[:10].toarray()), rtol=1e-13)
        assert isinstance(st._transform(X, backend_of(X)), np.ndarray)
    assert not np.allclose(Linear()(Z, Z[:10]), Linear()(S, S[:10]))  # the mean does not cancel
    assert Standardized(Standardized(Gaussian(), mean, std), mean, std)._translation_invariant


# ---------------------------------------------------------------------------- fitted models


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = binary_sparse(260, 40, 0.1, seed=12)
    y = np.asarray(X @ rng.standard_normal(40)).ravel() + 0.1 * rng.standard_normal(260)
    Y = (rng.random((260, 6)) < 0.3).astype(float)
    return X, y, Y


def _model_tolerance(gamma: float, lam: float, Z, S) -> float:
    return 100.0 * (2.0 / lam) * exponent_bound(gamma, Z, S)


@pytest.mark.parametrize("sparse_rule", [True, False], ids=["sparse-kept", "densified"])
def test_sketched_krr_sparse_equals_dense_standardised(data, sparse_rule):
    options = ds.EngineOptions(tuning=ds.Tuning(sparse_max_density=1.0 if sparse_rule else 0.0))
    X, y, _ = data
    Z, S, _, _ = standardise(X)
    gamma, lam = 0.01, 1e-3

    def fit(rows):
        return ds.SketchedKRR(Gaussian(gamma), sketch=ds.SubSampling(80), lam=lam,
                              random_state=0, options=options).fit(rows[:200], y[:200])

    dense_model, sparse_model = fit(Z), fit(S)
    p_dense, p_sparse = dense_model.predict(Z[200:]), sparse_model.predict(S[200:])
    tol = _model_tolerance(gamma, lam, Z, S)
    assert tol < 1e-8  # the bound has teeth
    assert_allclose(p_sparse, p_dense, rtol=0, atol=tol * np.abs(p_dense).max())
    # and through Standardized on the raw sparse rows (what a saved model does)
    Xtr = X[:200]
    std_model = ds.SketchedKRR(Standardized.from_data(Gaussian(gamma), Xtr), sketch=ds.SubSampling(80),
                               lam=lam, random_state=0, options=options).fit(Xtr, y[:200])
    Ztr, _, _, _ = standardise(Xtr)
    ref = ds.SketchedKRR(Gaussian(gamma), sketch=ds.SubSampling(80), lam=lam, random_state=0).fit(Ztr, y[:200])
    _, _, mean, std = standardise(Xtr)
    p_ref = ref.predict((X[200:].toarray() - mean) / std)
    assert_allclose(std_model.predict(X[200:]), p_ref, rtol=0, atol=tol * np.abs(p_ref).max())


@pytest.mark.slow
@pytest.mark.parametrize("sparse_rule", [True, False], ids=["sparse-kept", "densified"])
def test_sisokr_sparse_equals_dense_standardised(data, sparse_rule):
    options = ds.EngineOptions(tuning=ds.Tuning(sparse_max_density=1.0 if sparse_rule else 0.0))
    X, _, Y = data
    Z, S, _, _ = standardise(X)
    gamma, lam = 0.01, 1e-3

    def fit(rows):
        return ds.SISOKR(Gaussian(gamma), Gaussian(0.5), input_sketch=ds.SubSampling(80), lam=lam,
                         random_state=0, options=options).fit(rows[:200], Y[:200])

    dense_model, sparse_model = fit(Z), fit(S)
    cands = Y[:200]
    s_dense = dense_model.score_candidates(Z[200:], cands)
    s_sparse = sparse_model.score_candidates(S[200:], cands)
    tol = _model_tolerance(gamma, lam, Z, S)
    assert_allclose(s_sparse, s_dense, rtol=0, atol=tol * np.abs(s_dense).max())
    assert_allclose(sparse_model.score(S[200:], Y[200:]), dense_model.score(Z[200:], Y[200:]), rtol=tol)
    assert np.array_equal(sparse_model.predict(S[200:]), dense_model.predict(Z[200:]))
