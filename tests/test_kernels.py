"""Kernels against naive double-loop formulas, scikit-learn, and a shared contract."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

from distsketch import Tuning
from distsketch.kernels import base as kernel_base
from distsketch.kernels import families as kernel_families
from distsketch.kernels import sparse as kernel_sparse
from distsketch.kernels import standardized as kernel_standardized
from distsketch.kernels.base import (
    KERNELS,
    CallableKernel,
    Kernel,
    check_kernel,
    kernel_from_config,
)
from distsketch.kernels.families import (
    Gaussian,
    GaussianTanimoto,
    Laplacian,
    Linear,
    Matern,
    Polynomial,
    Tanimoto,
)
from distsketch.kernels.sparse import tuned
from distsketch.kernels.standardized import Standardized
from distsketch.testing.contracts import FLOAT32_EXP_ULPS, KernelContract
from reference.kernels import (
    naive_gaussian,
    naive_gaussian_tanimoto,
    naive_gram,
    naive_laplacian,
    naive_linear,
    naive_matern,
    naive_polynomial,
    naive_tanimoto,
)


def dot_kernel(A, B):
    """A user kernel for CallableKernel; returns a sparse matrix for sparse inputs."""
    return A @ B.T


# (kernel, naive formula, its parameters, rtol). Non-default parameters catch misuse of them.
NAIVE_CASES = [
    (Gaussian(gamma=0.7), naive_gaussian, {"gamma": 0.7}, 1e-12),
    (Laplacian(gamma=0.3), naive_laplacian, {"gamma": 0.3}, 1e-13),
    (Linear(), naive_linear, {}, 1e-13),
    (Polynomial(2, 0.5, 0.25), naive_polynomial, {"degree": 2, "gamma": 0.5, "coef0": 0.25}, 1e-13),
    (Polynomial(3, 0.8, -0.5), naive_polynomial, {"degree": 3, "gamma": 0.8, "coef0": -0.5}, 1e-12),
    (Matern(0.5, 0.8), naive_matern, {"nu": 0.5, "length_scale": 0.8}, 1e-12),
    (Matern(1.5, 0.8), naive_matern, {"nu": 1.5, "length_scale": 0.8}, 1e-12),
    (Matern(2.5, 1.7), naive_matern, {"nu": 2.5, "length_scale": 1.7}, 1e-12),
    (Tanimoto(), naive_tanimoto, {}, 1e-13),
    (GaussianTanimoto(gamma=0.6), naive_gaussian_tanimoto, {"gamma": 0.6}, 1e-13),
]

# Default parameters: all positive semi-definite.
ALL_KERNELS = [
    Gaussian(),
    Laplacian(),
    Linear(),
    Polynomial(),
    Matern(nu=0.5),
    Matern(),
    Matern(nu=2.5),
    Tanimoto(),
    GaussianTanimoto(),
    CallableKernel(dot_kernel),
]
REGISTERED = [k for k in ALL_KERNELS if not isinstance(k, CallableKernel)]


def kernel_id(kernel):
    """``repr`` without the memory address of a user function, so test ids are stable."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(kernel))


def _sparsify(X, threshold=0.4):
    X = X.copy()
    X[X < threshold] = 0.0
    return X


@pytest.fixture
def A():
    """Non-negative rows with zeros, one all-zero row (Tanimoto's special case)."""
    X = _sparsify(np.random.default_rng(0).random((9, 5)))
    X[4] = 0.0
    return X


@pytest.fixture
def B():
    X = _sparsify(np.random.default_rng(1).random((7, 5)))
    X[2] = 0.0
    return X


# ---------------------------------------------------------------------------- formulas


@pytest.mark.parametrize(
    ("kernel", "f", "params", "rtol"), NAIVE_CASES, ids=[repr(c[0]) for c in NAIVE_CASES]
)
def test_matches_naive_formula(kernel, f, params, rtol, A, B):
    assert_allclose(kernel(A, B), naive_gram(f, A, B, **params), rtol=rtol, atol=1e-15)
    assert_allclose(kernel(A, A), naive_gram(f, A, A, **params), rtol=rtol, atol=1e-15)


def _sklearn_cases():
    pairwise = pytest.importorskip("sklearn.metrics.pairwise")
    from sklearn.gaussian_process.kernels import Matern as SkMatern

    return [
        (Gaussian(gamma=0.7), lambda X, Y: pairwise.rbf_kernel(X, Y, gamma=0.7)),
        (Laplacian(gamma=0.3), lambda X, Y: pairwise.laplacian_kernel(X, Y, gamma=0.3)),
        (Linear(), pairwise.linear_kernel),
        (
            Polynomial(degree=2, gamma=0.5, coef0=0.25),
            lambda X, Y: pairwise.polynomial_kernel(X, Y, degree=2, gamma=0.5, coef0=0.25),
        ),
        (Gaussian(gamma=0.2), lambda X, Y: pairwise.pairwise_kernels(X, Y, "rbf", gamma=0.2)),
        *[(Matern(nu, 0.8), SkMatern(length_scale=0.8, nu=nu)) for nu in (0.5, 1.5, 2.5)],
    ]


def test_matches_sklearn(A, B):
    for kernel, reference in _sklearn_cases():
        assert_allclose(kernel(A, B), reference(A, B), rtol=1e-12, atol=1e-15, err_msg=repr(kernel))
        assert_allclose(kernel(A, A), reference(A, A), rtol=1e-12, atol=1e-15, err_msg=repr(kernel))


def test_tanimoto_on_binary_fingerprints():
    rng = np.random.default_rng(2)
    F = (rng.random((12, 40)) < 0.2).astype(np.int8)
    F[[3, 7]] = 0  # two empty fingerprints
    G = (rng.random((5, 40)) < 0.2).astype(np.int8)
    G[0] = 0

    def jaccard(x, y):
        union = np.sum(x | y)
        return 1.0 if union == 0 else np.sum(x & y) / union

    J = naive_gram(jaccard, F, G)
    assert J[3, 0] == J[7, 0] == 1.0 and J[3, 1] == 0.0  # the convention is exercised
    for Fx, Gx in [(F, G), (sp.csr_matrix(F), sp.csr_matrix(G))]:
        assert_allclose(Tanimoto()(Fx, Gx), J, rtol=1e-15, atol=0)
        assert_allclose(GaussianTanimoto(gamma=0.4)(Fx, Gx), np.exp(-0.4 * (2 - 2 * J)), rtol=1e-15)
    assert_allclose(Tanimoto().diag(F), 1.0)
    assert_allclose(np.diag(Tanimoto()(F, F)), 1.0, rtol=1e-15)


# ---------------------------------------------------------------------------- behaviour


def test_float32_sparse_and_dense_give_float64(A, B):
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    for kernel in ALL_KERNELS:
        expected = kernel(A32.astype(np.float64), B32.astype(np.float64))
        for Ax, Bx in [(A32, B32), (sp.csr_matrix(A32), B32)]:
            K = kernel(Ax, Bx)
            assert K.dtype == np.float64, kernel
            assert_allclose(K, expected, rtol=1e-13, atol=1e-15, err_msg=repr(kernel))


def test_output_is_c_contiguous_for_fortran_and_sparse_inputs(A, B):
    for kernel in ALL_KERNELS:
        for Ax, Bx in [(np.asfortranarray(A), np.asfortranarray(B)), (A, sp.csr_matrix(B))]:
            K = kernel(Ax, Bx)
            assert K.flags.c_contiguous and K.shape == (len(A), len(B)), kernel


def test_column_mismatch_raises(A):
    with pytest.raises(ValueError, match="Gaussian: A and B must have the same number of columns"):
        Gaussian()(A, A[:, :3])
    with pytest.raises(ValueError, match="2-D"):
        Gaussian()(A[0], A)


class _NoDensify(sp.csr_matrix):
    """A CSR matrix that refuses to become dense once ``guarded`` (new matrices derived
    from it, such as the product ``A @ B.T``, are not guarded)."""

    guarded = False

    def toarray(self, *args, **kwargs):
        if self.guarded:
            raise AssertionError("sparse operand densified")
        return super().toarray(*args, **kwargs)

    def todense(self, *args, **kwargs):
        return np.asmatrix(self.toarray(*args, **kwargs))


def _no_densify(X):
    M = _NoDensify(X)
    M.guarded = True
    return M


PRODUCT_KERNELS = [k for k in REGISTERED if not isinstance(k, Laplacian)]


@pytest.mark.parametrize("kernel", PRODUCT_KERNELS, ids=repr)
def test_sparse_operands_are_never_densified(kernel, A, B):
    """With the cost rule's knobs at "always sparse" (these dense fixtures are above any
    density threshold), no product kernel densifies a sparse operand."""
    with tuned(Tuning(sparse_max_density=1.0, sparse_panel_bytes=0)):
        expected = kernel(A, B)
        assert_allclose(kernel(_no_densify(A), _no_densify(B)), expected, rtol=1e-13,
                        atol=1e-15)
        assert_allclose(kernel(A, _no_densify(B)), expected, rtol=1e-13, atol=1e-15)
        assert_allclose(kernel.diag(_no_densify(A)), kernel.diag(A), rtol=1e-13)
        with pytest.raises(AssertionError, match="densified"):  # the guard works: Laplacian
            Laplacian()(_no_densify(A), B)


@pytest.mark.parametrize("inner", [Gaussian(gamma=0.3), Matern(nu=2.5, length_scale=2.0)], ids=repr)
def test_standardized_translation_invariant_never_densifies(inner, A, B, monkeypatch):
    """``Standardized`` of a kernel of ``x − x'`` scales sparse rows by 1/scale instead of
    densifying and centring them (the mean cancels): neither the guarded operands nor the
    scaled rows derived from them reach ``dense``; a non-translation-invariant kernel
    (Linear) still centres, so it densifies (the guard trips)."""
    mean, scale = A.mean(axis=0), A.std(axis=0) + 0.5
    st = Standardized(inner, mean, scale)
    expected = inner((A - mean) / scale, (B - mean) / scale)
    real_dense = kernel_standardized.dense

    def dense_of_dense_only(a):
        if sp.issparse(a) and a.shape in (A.shape, B.shape):
            raise AssertionError("sparse operand densified")
        return real_dense(a)  # the CSR × CSR product's result may be densified

    for module in (kernel_standardized, kernel_families, kernel_sparse):  # where dense is called
        monkeypatch.setattr(module, "dense", dense_of_dense_only)
    with tuned(Tuning(sparse_max_density=1.0, sparse_panel_bytes=0)):
        assert_allclose(st(_no_densify(A), _no_densify(B)), expected, rtol=1e-12, atol=1e-15)
        out = np.empty(expected.shape, dtype=np.float32)
        st.fill(_no_densify(A), _no_densify(B), out)
        assert_allclose(out, expected, rtol=1e-6)
        with pytest.raises(AssertionError, match="densified"):
            Standardized(Linear(), mean, scale)(_no_densify(A), B)


def test_every_exponential_goes_through_the_hook(monkeypatch, A, B):
    """The backend's ``exp`` (distsketch.backends.Backend.exp) is the one hook."""
    from distsketch.backends.base import NUMPY

    calls = []

    def counting_exp(a, out=None):
        calls.append(a.shape)
        return np.exp(a, out=a if out is None else out, casting="same_kind")

    monkeypatch.setattr(NUMPY, "exp", counting_exp)
    exponential = [Gaussian(), Laplacian(), Matern(0.5), Matern(1.5), Matern(2.5)]
    for kernel in [*exponential, GaussianTanimoto()]:
        for out in (None, np.empty((len(A), len(B)), np.float32)):
            calls.clear()
            kernel(A, B, out=out)
            assert calls == [(len(A), len(B))], kernel


# ---------------------------------------------------------------------------- out=


EXPONENTIAL = (Gaussian, Laplacian, GaussianTanimoto)


@pytest.mark.parametrize("kernel", ALL_KERNELS, ids=kernel_id)
def test_out_float32_rounds_the_kernel_values(kernel, A, B):
    """Into float32: exponential kernels evaluate exp in float32 from the float64 exponent
    e = log k, so |k32 − k| <= (|e| + 4)·2⁻²⁴·k: the exponent's rounding |e|·2⁻²⁴, numpy's
    float32 exp (validated by numpy to within 3 ulp, SIMD paths differ by CPU) and the final
    rounding (FLOAT32_EXP_ULPS in distsketch.testing); other kernels are
    their float64 values rounded."""
    rng = np.random.default_rng(5)
    A, B = A + 0.3 * rng.random(A.shape), B + 0.3 * rng.random(B.shape)  # a spread of values
    want = kernel(A, B)
    got = kernel(A, B, out=np.empty((len(A), len(B)), np.float32))
    assert got.dtype == np.float32
    if isinstance(kernel, EXPONENTIAL):
        e = np.log(want)
        bound = (np.abs(e) + FLOAT32_EXP_ULPS) * 2.0**-24 * want
        assert np.all(np.abs(got - want) <= bound), kernel
    else:
        np.testing.assert_array_equal(got, want.astype(np.float32))


def test_out_float32_exponential_on_a_wide_range():
    """Kernel values from 1 down to 1e-30: the relative error stays (|e| + 4)·2⁻²⁴."""
    rng = np.random.default_rng(8)
    A, B = rng.normal(size=(300, 4)), rng.normal(size=(200, 4)) * 3
    for kernel in (Gaussian(gamma=0.5), Laplacian(gamma=1.0)):
        want = kernel(A, B)
        got = kernel(A, B, out=np.empty(want.shape, np.float32)).astype(np.float64)
        keep = want > 1e-30  # float32's normal range ends at 1.2e-38
        e = np.log(want[keep])
        rel = np.abs(got[keep] - want[keep]) / want[keep]
        assert np.all(rel <= (np.abs(e) + FLOAT32_EXP_ULPS) * 2.0**-24), kernel
        assert rel.max() > 2.0**-24  # the exponent's rounding shows: not just a final rounding


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gaussian_row_tiles_equal_one_tile(monkeypatch, dtype):
    """Gaussian writes into out in row tiles (8 rows here, 1 tile by default for 30 rows):
    the same values to rounding (BLAS may sum a short tile's products in another order),
    exact zeros on the diagonal of k(A, A), and the scale applied per tile."""
    rng = np.random.default_rng(4)
    A = rng.normal(size=(30, 3))
    scale = rng.random(30) + 0.5
    k = Gaussian(gamma=0.3)
    one = k.fill(A, A, np.empty((30, 30), dtype), scale)
    monkeypatch.setattr(kernel_families, "_TILE_BYTES", 16)
    tiled = k.fill(A, A, np.empty((30, 30), dtype), scale)
    assert_allclose(tiled, one, rtol=2e-16 if dtype == np.float64 else 1.2e-7)
    assert_allclose(np.diag(tiled), scale.astype(dtype), rtol=0, atol=0)
    want = (k(A, A) * scale).astype(dtype)
    assert_allclose(tiled, want, rtol=1e-15 if dtype == np.float64 else 5e-7)


@pytest.mark.parametrize(("out", "match"), [
    (np.empty((9, 6)), r"out has shape \(9, 6\), expected \(len\(A\), len\(B\)\) = \(9, 7\)"),
    (np.empty((9, 7), np.float16), "out must be a float64 or float32 ndarray, got float16"),
    ([[0.0] * 7] * 9, "out must be a float64 or float32 ndarray, got list"),
])
def test_out_is_checked(A, B, out, match):
    with pytest.raises(ValueError, match=match):
        Gaussian()(A, B, out=out)


def test_zero_distance_on_the_diagonal_when_a_is_b():
    # Rows with large norms: the expansion alone would leave k(x, x) ≈ 1 − 1e-5 for ν = ½.
    X = np.random.default_rng(3).normal(size=(6, 4)) * 100 + 1000
    for Xs in [X, X.tolist(), sp.coo_matrix(X)]:  # the last two are converted on input
        assert_allclose(np.diag(Matern(nu=0.5)(Xs, Xs)), 1.0, rtol=0, atol=0)
        assert_allclose(np.diag(Gaussian()(Xs, Xs)), 1.0, rtol=0, atol=0)


def test_coincident_rows_in_different_blocks_stay_finite():
    # The expansion gives slightly negative squared distances for some of these pairs;
    # without clipping at 0, Matern would take the square root of a negative number.
    X = np.random.default_rng(6).normal(size=(50, 3)) * 100 + 1000
    K = Matern(nu=0.5)(X, X.copy())
    assert np.all(np.isfinite(K)) and np.all(K <= 1.0)
    assert_allclose(np.diag(K), 1.0, atol=1e-4)
    assert np.all(Gaussian()(X, X.copy()) <= 1.0)


# ---------------------------------------------------------------------------- value objects


def test_equality_and_hash():
    assert Gaussian(0.5) == Gaussian(gamma=0.5) and hash(Gaussian(0.5)) == hash(Gaussian(gamma=0.5))
    assert Gaussian(0.5) != Gaussian(0.6)
    assert Gaussian(0.5) != Laplacian(0.5)
    assert Gaussian() != "gaussian"
    assert len({Matern(), Matern(1.5, 1.0), Matern(2.5)}) == 2
    assert CallableKernel(dot_kernel) == CallableKernel(dot_kernel)
    assert CallableKernel(dot_kernel) != CallableKernel(naive_linear)


def test_repr():
    assert repr(Gaussian()) == "Gaussian()"
    assert repr(Gaussian(gamma=0.5)) == "Gaussian(gamma=0.5)"
    assert repr(Polynomial(coef0=0.0, degree=2)) == "Polynomial(degree=2, coef0=0.0)"
    assert repr(Matern(nu=2.5)) == "Matern(nu=2.5)"
    assert repr(CallableKernel(dot_kernel)).startswith("CallableKernel(<function dot_kernel")
    namespace = {cls.__name__: cls for cls in KERNELS.values()}
    for kernel in REGISTERED + [Polynomial(2, 0.5, -1.0), GaussianTanimoto(3.0)]:
        assert eval(repr(kernel), namespace) == kernel


NUMPY_PARAMS = Polynomial(np.int64(2), np.float32(0.5))


@pytest.mark.parametrize("kernel", [*REGISTERED, NUMPY_PARAMS], ids=repr)
def test_config_round_trip(kernel, A, B):
    cfg = json.loads(json.dumps(kernel.to_config()))
    assert cfg["name"] in KERNELS and KERNELS[cfg["name"]] is type(kernel)
    again = kernel_from_config(cfg)
    assert again == kernel
    assert_allclose(again(A, B), kernel(A, B), rtol=1e-7)  # float32 params are rounded in JSON


def test_config_values():
    cfg = Polynomial(2).to_config()
    assert cfg == {"name": "polynomial", "coef0": 1.0, "degree": 2, "gamma": 1.0}
    assert kernel_from_config({"name": "rbf", "gamma": 2.0}) == Gaussian(2.0)
    assert kernel_from_config({"name": "matern"}) == Matern()


def test_callable_kernel_has_no_config():
    with pytest.raises(TypeError, match="user callable cannot be written to a config file"):
        CallableKernel(dot_kernel).to_config()


def test_kernel_from_config_errors():
    names = r"unknown kernel name 'foo'; valid names are \[.*'gaussian_tanimoto'"
    with pytest.raises(ValueError, match=names):
        kernel_from_config({"name": "foo"})
    with pytest.raises(ValueError, match="unknown kernel name None"):
        kernel_from_config({"gamma": 1.0})
    params = r"unknown parameter 'sigma' for kernel 'gaussian'; valid parameters are \['gamma'\]"
    with pytest.raises(ValueError, match=params):
        kernel_from_config({"name": "gaussian", "sigma": 1.0})
    with pytest.raises(ValueError, match="Gaussian: gamma must be a positive float, got -2.0"):
        kernel_from_config({"name": "gaussian", "gamma": -2.0})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Gaussian(gamma=-1.0), "Gaussian: gamma must be a positive float, got -1.0"),
        (lambda: Gaussian(gamma=0), "Gaussian: gamma must be a positive float, got 0"),
        (lambda: Gaussian(gamma="1"), "Gaussian: gamma must be a positive float, got '1'"),
        (lambda: Gaussian(gamma=np.inf), "Gaussian: gamma must be a positive float, got inf"),
        (lambda: Gaussian(gamma=True), "Gaussian: gamma must be a positive float, got True"),
        (lambda: Laplacian(gamma=np.nan), "Laplacian: gamma must be a positive float, got nan"),
        (lambda: Polynomial(degree=0), "Polynomial: degree must be a positive int, got 0"),
        (lambda: Polynomial(degree=2.0), "Polynomial: degree must be a positive int, got 2.0"),
        (lambda: Polynomial(gamma=-0.5), "Polynomial: gamma must be a positive float, got -0.5"),
        (lambda: Polynomial(coef0=None), "Polynomial: coef0 must be a finite float, got None"),
        (lambda: Polynomial(coef0=-np.inf), "Polynomial: coef0 must be a finite float, got -inf"),
        (lambda: Matern(nu=1.0), "Matern: nu must be one of 0.5, 1.5, 2.5, got 1.0"),
        (lambda: Matern(nu="1.5"), "Matern: nu must be one of 0.5, 1.5, 2.5, got '1.5'"),
        (
            lambda: Matern(length_scale=0.0),
            "Matern: length_scale must be a positive float, got 0.0",
        ),
        (
            lambda: GaussianTanimoto(gamma=-3),
            "GaussianTanimoto: gamma must be a positive float, got -3",
        ),
        (lambda: CallableKernel(3), "CallableKernel: func must be callable, got 3"),
        (
            lambda: Gaussian().set_params(gamma=-1.0),
            "Gaussian: gamma must be a positive float, got -1.0",
        ),
    ],
)
def test_invalid_parameters(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_set_params_revalidates_and_updates():
    kernel = Matern().set_params(nu=0.5, length_scale=2.0)
    assert kernel == Matern(0.5, 2.0)


def test_check_kernel_accepts():
    k = Laplacian(0.2)
    assert check_kernel(k, name="input_kernel") is k
    assert check_kernel("rbf", name="input_kernel") == Gaussian()
    assert check_kernel("gaussian_tanimoto", name="input_kernel") == GaussianTanimoto()
    assert check_kernel({"name": "matern", "nu": 0.5}, name="input_kernel") == Matern(0.5)
    wrapped = check_kernel(dot_kernel, name="input_kernel")
    assert isinstance(wrapped, CallableKernel) and wrapped.func is dot_kernel


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("foo", r"^input_kernel: unknown kernel 'foo'; use one of \['gaussian', 'gaussian_tan"),
        ("Gaussian", r"^input_kernel: unknown kernel 'Gaussian'; .*a callable kernel\(A, B\)"),
        (3, r"^input_kernel: cannot use 3 \(type int\) as a kernel; use one of"),
        (None, r"^input_kernel: cannot use None"),
        (Gaussian, r"^input_kernel: cannot use <class"),  # a class, not an instance
        ({"name": "gaussian", "sigma": 1}, r"^input_kernel: kernel_from_config: unknown param"),
        ({"name": "linear", "gamma": 1}, r"^input_kernel: .*unknown parameter 'gamma'"),
    ],
)
def test_check_kernel_rejects(value, message):
    with pytest.raises(ValueError, match=message):
        check_kernel(value, name="input_kernel")


def test_callable_kernel_output_handling(A, B):
    seen = []

    def spy(X, Y):
        seen.append((type(X), X.dtype))
        return [[1.0] * Y.shape[0]] * X.shape[0]  # a nested list

    K = CallableKernel(spy)(A.astype(np.float32), sp.csr_matrix(B))
    assert K.dtype == np.float64 and K.shape == (len(A), len(B)) and np.all(K == 1.0)
    assert seen == [(np.ndarray, np.float64)]
    K = CallableKernel(dot_kernel)(sp.csr_matrix(A), sp.csr_matrix(B))  # sparse result
    assert_allclose(K, A @ B.T, rtol=1e-14)


def test_callable_kernel_wrong_shape_raises(A, B):
    bad = CallableKernel(lambda X, Y: (X @ Y.T).T)
    message = (
        "CallableKernel(<lambda>): func returned an array of shape (7, 9), "
        "expected (len(A), len(B)) = (9, 7)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        bad(A, B)
    with pytest.raises(ValueError, match="CallableKernel"):
        CallableKernel(lambda X, Y: np.zeros(len(X)))(A, B)


def test_callable_kernel_diag_in_sub_blocks(monkeypatch):
    monkeypatch.setattr(kernel_base, "_DIAG_ROWS", 4)
    X = np.random.default_rng(4).random((10, 3))
    shapes = []

    def spy(P, Q):
        shapes.append((P.shape[0], Q.shape[0]))
        return P @ Q.T

    assert_allclose(CallableKernel(spy).diag(X), np.sum(X * X, axis=1), rtol=1e-14)
    assert shapes == [(4, 4), (4, 4), (2, 2)]


# ---------------------------------------------------------------------------- shared contract


class TestKernelContract(KernelContract):
    """distsketch.testing.KernelContract on every kernel (zarr's ``StoreTests`` habit)."""

    @pytest.fixture(params=ALL_KERNELS, ids=kernel_id)
    def kernel(self, request) -> Kernel:
        return request.param
