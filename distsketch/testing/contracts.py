"""Contract test suites for kernels and sketches (zarr's ``StoreTests`` habit).

A test module subclasses a contract and provides its cases as a fixture; every property the
engine relies on is then checked for them::

    import pytest
    from distsketch.testing import KernelContract, SketchContract

    class TestMyKernel(KernelContract):
        @pytest.fixture(params=[MyKernel(0.5)])
        def kernel(self, request):
            return request.param

    class TestMySketch(SketchContract):
        @pytest.fixture(params=[(MySketch(12), 50), (MySketch(5), 5000)])
        def case(self, request):          # (specification, n)
            return request.param

distsketch's own tests run these suites on every shipped kernel and sketch
(tests/test_kernels.py, tests/test_sketches.py). Needs pytest (the ``test`` extra); importing
``distsketch`` does not import this module.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from ..backends.base import dense
from ..kernels.base import Kernel
from ..kernels.families import Gaussian
from ..linalg.blocks import gram_dot
from ..sketches.base import RealizedSketch, Sketch, sketch_from_config
from ..sketches.tiled import TILE

__all__ = ["KernelContract", "SketchContract", "dense", "assert_same", "assert_rel_close",
           "gram_inputs", "FLOAT32_EXP_ULPS"]

#: Relative error of a kernel value written into float32 through a float32 ``exp``, in units
#: of 2⁻²⁴, on top of the exponent's rounding ``|e|·2⁻²⁴``: numpy's float32 ``exp`` (its own
#: validation allows up to 3 ulp; the SIMD path taken depends on the CPU) plus the rounding
#: of the result. Measured here at about 2.1 on a Haswell-class CPU.
FLOAT32_EXP_ULPS = 4.0


# --------------------------------------------------------------------------- helpers


def assert_same(a: Any, b: Any) -> None:
    """Bitwise equality of two matrices (both sparse or both dense), never densifying sparse.

    Parameters
    ----------
    a, b : ndarray or scipy.sparse matrix
        The matrices; the same shape, both sparse or both dense, the same dtype.

    Raises
    ------
    AssertionError
        They differ in any of these, or in a value.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.testing import assert_same
    >>> assert_same(np.eye(2), np.eye(2))
    """
    assert a.shape == b.shape
    assert sp.issparse(a) == sp.issparse(b), (type(a), type(b))
    if sp.issparse(a):
        assert (sp.csr_array(a) != sp.csr_array(b)).nnz == 0
    else:
        assert_array_equal(a, b, strict=True)


def assert_rel_close(got: Any, expected: Any, rel: float = 1e-12) -> None:
    """Entry-wise closeness, relative to the block's largest entry.

    For sums reordered across chunks, whose rounding scales with the largest terms.

    Parameters
    ----------
    got : array-like
        Computed values.
    expected : array-like
        Reference values.
    rel : float, default 1e-12
        Tolerance, relative to each entry and (absolute part) to ``max |expected|``.

    Raises
    ------
    AssertionError
        An entry out of tolerance.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.testing import assert_rel_close
    >>> assert_rel_close(np.array([1.0, 1e-20]), np.array([1.0, 0.0]))
    """
    scale = max(float(np.abs(expected).max(initial=0.0)), 1e-300)
    assert_allclose(got, expected, rtol=rel, atol=rel * scale)


def _sparsify(X, threshold=0.4):
    X = X.copy()
    X[X < threshold] = 0.0
    return X


def _nonnull_columns(R) -> np.ndarray:
    """Columns of R holding a non-zero value (explicitly stored zeros do not count)."""
    if sp.issparse(R):
        c = sp.csc_array(R, copy=True)
        c.sum_duplicates()
        c.eliminate_zeros()
        return np.flatnonzero(np.diff(c.indptr))
    return np.flatnonzero((R != 0).any(axis=0))


def _col_spans(n: int) -> list[tuple[int, int]]:
    """Spans of [0, n): whole, edges, middle, empty, and across the first tile boundary."""
    spans = [(0, n), (0, 1), (n // 3, n // 2 + 1), (n - 1, n), (7, 7)]
    if n > TILE + 5:
        spans += [(TILE - 3, TILE + 5), (TILE - 1, TILE), (TILE, n), (1, TILE + 1)]
    return spans


def gram_inputs(n: int, kind: str, seed: int = 0) -> tuple[Any, Any]:
    """Test rows ``A`` and training rows ``X``, with zeros, dense or CSR.

    Parameters
    ----------
    n : int
        Rows of ``X``.
    kind : {"dense", "csr"}
        ndarrays, or ``scipy.sparse.csr_array``.
    seed : int, default 0
        Seed of the values.

    Returns
    -------
    A : ndarray or csr_array of shape (9, 3)
        Rows to evaluate.
    X : ndarray or csr_array of shape (n, 3)
        Training rows.

    Examples
    --------
    >>> from distsketch.testing import gram_inputs
    >>> A, X = gram_inputs(20, "csr")
    >>> A.shape, X.shape, X.format
    ((9, 3), (20, 3), 'csr')
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    X[rng.random(X.shape) < 0.4] = 0.0
    A = rng.normal(size=(9, 3))
    A[rng.random(A.shape) < 0.4] = 0.0
    if kind == "csr":
        return sp.csr_array(A), sp.csr_array(X)
    return A, X


# --------------------------------------------------------------------------- kernels


class KernelContract:
    """Properties every kernel must have (pytest); subclasses provide a ``kernel`` fixture.

    Tolerances: kernel values of the test rows lie in [0, 2]; two evaluations of the same
    entry by different paths (sparse vs dense products, row blocks) differ by a few float64
    roundings of the terms, so 1e-13 relative with 1e-15 absolute.

    Examples
    --------
    In a test module (pytest collects the inherited ``test_*`` methods)::

        import pytest
        from distsketch.testing import KernelContract

        class TestMyKernel(KernelContract):
            @pytest.fixture(params=[MyKernel(0.5)])
            def kernel(self, request):
                return request.param
    """

    @pytest.fixture
    def kernel(self) -> Kernel:  # pragma: no cover - provided by subclasses
        raise NotImplementedError("subclass KernelContract and provide a `kernel` fixture")

    @pytest.fixture
    def A(self) -> np.ndarray:
        """Non-negative rows with zeros, one all-zero row (Tanimoto's special case)."""
        X = _sparsify(np.random.default_rng(0).random((9, 5)))
        X[4] = 0.0
        return X

    @pytest.fixture
    def B(self) -> np.ndarray:
        X = _sparsify(np.random.default_rng(1).random((7, 5)))
        X[2] = 0.0
        return X

    def test_shape_dtype_layout(self, kernel: Kernel, A: np.ndarray, B: np.ndarray) -> None:
        K = kernel(A, B)
        assert K.shape == (len(A), len(B))
        assert K.dtype == np.float64 and K.flags.c_contiguous

    def test_empty_blocks(self, kernel: Kernel, A: np.ndarray, B: np.ndarray) -> None:
        assert kernel(A[:0], B).shape == (0, len(B))
        assert kernel(A, B[:0]).shape == (len(A), 0)
        assert kernel.diag(A[:0]).shape == (0,)

    @pytest.mark.parametrize("d", [3, 100])  # narrow and wide inputs (kernels may tile rows)
    def test_fill_empty_blocks(self, kernel: Kernel, d: int) -> None:
        A, B = np.ones((0, d)), np.ones((4, d))
        for dtype in (np.float64, np.float32):
            assert kernel.fill(A, B, np.empty((0, 4), dtype)).shape == (0, 4)
            assert kernel.fill(B, A, np.empty((4, 0), dtype)).shape == (4, 0)

    @pytest.mark.parametrize("fmt", [sp.csr_matrix, sp.csr_array, sp.csc_matrix])
    def test_sparse_and_dense_agree(self, kernel: Kernel, A: np.ndarray, B: np.ndarray, fmt: type) -> None:
        expected = kernel(A, B)
        for Ax, Bx in [(fmt(A), fmt(B)), (fmt(A), B), (A, fmt(B))]:
            K = kernel(Ax, Bx)
            assert isinstance(K, np.ndarray) and K.flags.c_contiguous
            assert_allclose(K, expected, rtol=1e-13, atol=1e-15)
        assert_allclose(kernel.diag(fmt(A)), kernel.diag(A), rtol=1e-13)

    def test_diag_matches_gram(self, kernel: Kernel, A: np.ndarray) -> None:
        assert_allclose(kernel.diag(A), np.diag(kernel(A, A)), rtol=1e-13, atol=1e-15)
        assert kernel.diag(A).shape == (len(A),)

    def test_symmetric(self, kernel: Kernel, A: np.ndarray) -> None:
        K = kernel(A, A)
        assert_allclose(K, K.T, rtol=1e-13, atol=1e-15)

    def test_positive_semi_definite(self, kernel: Kernel) -> None:
        X = _sparsify(np.random.default_rng(5).random((30, 4)), 0.2)
        X[[3, 17]] = 0.0
        eigenvalues = np.linalg.eigvalsh(kernel(X, X))
        assert eigenvalues.min() >= -1e-12 * eigenvalues.max()

    def test_block_consistency(self, kernel: Kernel, A: np.ndarray, B: np.ndarray) -> None:
        whole = kernel(A, B)
        rows = np.vstack([kernel(A[i : i + 4], B) for i in range(0, len(A), 4)])
        cols = np.hstack([kernel(A, B[j : j + 3]) for j in range(0, len(B), 3)])
        assert_allclose(rows, whole, rtol=1e-13, atol=1e-15)
        assert_allclose(cols, whole, rtol=1e-13, atol=1e-15)

    def test_fill_float64_is_the_kernel_block_bitwise(self, kernel: Kernel, A: np.ndarray, B: np.ndarray) -> None:
        want = kernel(A, B)
        out = np.full((len(A), len(B) + 3), np.nan)[:, 1:-2]  # a strided view of a bigger array
        assert kernel.fill(A, B, out) is out
        assert_array_equal(out, want)
        out = np.full((len(A), len(B)), np.nan)
        assert_array_equal(kernel(A, B, out=out), want)
        assert_array_equal(kernel.fill(A, A, np.empty((len(A), len(A)))), kernel(A, A))

    def test_fill_float32_and_scale(self, kernel: Kernel, A: np.ndarray, B: np.ndarray) -> None:
        """Into float32: the float64 values to float32 rounding (2⁻²⁴ relative), or — for
        kernels that take ``exp`` in float32 — ``|k32 − k| <= (|log k| + 4)·2⁻²⁴·k``
        (:data:`FLOAT32_EXP_ULPS`). ``scale`` multiplies columns."""
        want = kernel(A, B)
        got = kernel.fill(A, B, np.empty(want.shape, np.float32)).astype(np.float64)
        safe = np.where(want > 0, want, 1.0)
        bound = (np.abs(np.log(safe)) + FLOAT32_EXP_ULPS) * 2.0**-24 * np.abs(want)
        assert np.all(np.abs(got - want) <= bound)
        scale = np.linspace(0.5, 2.0, len(B))
        assert_allclose(kernel.fill(A, B, np.empty(want.shape), scale), want * scale,
                        rtol=1e-15, atol=0)

    def test_pickle_round_trip(self, kernel: Kernel, A: np.ndarray, B: np.ndarray) -> None:
        again = pickle.loads(pickle.dumps(kernel))
        assert again == kernel and hash(again) == hash(kernel) and again is not kernel
        np.testing.assert_array_equal(again(A, B), kernel(A, B))

    def test_get_params_round_trip(self, kernel: Kernel) -> None:
        assert type(kernel)(**kernel.get_params()) == kernel


# --------------------------------------------------------------------------- sketches


class SketchContract:
    """Properties every sketch must have (pytest); subclasses provide a ``case`` fixture.

    The fixture gives ``(specification, n)``; use an ``n`` above
    :data:`~distsketch.sketches.TILE` in one case so tile boundaries are exercised.

    Examples
    --------
    In a test module (pytest collects the inherited ``test_*`` methods)::

        import pytest
        from distsketch.testing import SketchContract

        class TestMySketch(SketchContract):
            @pytest.fixture(params=[(MySketch(12), 50), (MySketch(5), 5000)])
            def case(self, request):          # (specification, n)
                return request.param
    """

    #: Kernel of the block-product checks.
    kernel = Gaussian(gamma=0.5)

    @pytest.fixture
    def case(self) -> tuple[Sketch, int]:  # pragma: no cover - provided by subclasses
        raise NotImplementedError("subclass SketchContract and provide a `case` fixture")

    def test_realize_shape_and_types(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        spec.check(n, argument="sketch")  # valid settings do not raise
        R = spec.realize(n, seed=3)
        assert isinstance(R, RealizedSketch)
        assert (R.n, R.seed) == (n, 3)
        if getattr(spec, "m", None) is not None:
            assert R.m == spec.m
        M = R.matrix()
        assert M.shape == (R.m, n)
        assert isinstance(M, np.ndarray) or (sp.issparse(M) and M.format == "csr")
        assert M.dtype == np.float64
        assert spec.realize(n, seed=3, data=None).m == R.m  # realize accepts the data

    def test_factorisation_R_equals_mixing_times_selection(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        R = spec.realize(n, seed=4)
        M, J, mix = R.matrix(), R.support, R.mixing
        assert J.dtype == np.int64 and J.ndim == 1
        assert np.all(np.diff(J) > 0)  # sorted and unique
        assert J.size == 0 or (J[0] >= 0 and J[-1] < n)
        assert R.support_size == J.size
        # Exactly the non-null columns: everything else is zero, nothing null is kept.
        assert_array_equal(J, _nonnull_columns(M))
        assert mix.shape == (R.m, J.size)
        assert sp.issparse(mix) == sp.issparse(M)
        assert_same(M[:, J], mix)
        s = J.size
        R_sub = sp.csr_array((np.ones(s), (np.arange(s), J)), shape=(s, n))
        assert_same(mix @ R_sub, M)

    def test_scale_means_diagonal_mixing(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        R = spec.realize(n, seed=5)
        if R.scale is not None:
            assert R.scale.shape == (R.m,) == (R.support_size,)
            assert_same(sp.csr_array(sp.diags_array(R.scale)), sp.csr_array(R.mixing))

    def test_same_seed_same_matrix_bitwise(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        np.random.seed(0)  # the legacy global state must play no part
        R1 = spec.realize(n, seed=11)
        np.random.seed(1)
        np.random.random(17)
        R2 = spec.realize(n, seed=np.int64(11))
        assert_same(R1.matrix(), R2.matrix())
        assert_array_equal(R1.support, R2.support)
        assert_same(R1.mixing, R2.mixing)

    def test_different_seed_different_matrix(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        A, B = spec.realize(n, seed=1).matrix(), spec.realize(n, seed=2).matrix()
        if spec.deterministic(n):
            assert_same(A, B)
        elif sp.issparse(A):
            assert (A != B).nnz > 0
        else:
            assert not np.array_equal(A, B)

    def test_columns_match_matrix(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        R = spec.realize(n, seed=6)
        M = R.matrix()
        for a, b in _col_spans(n):
            C = R.columns(a, b)
            assert C.shape == (R.m, b - a), (a, b)
            assert_same(C, M[:, a:b])

    def test_mixing_t_block_matches_mixing(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        R = spec.realize(n, seed=7)
        mix = R.mixing
        for a, b in _col_spans(R.support_size):
            block = R.mixing_t_block(a, b)
            assert block.shape == (b - a, R.m), (a, b)
            assert_same(block, mix[:, a:b].T)

    def test_left_columns_matches_matrix_product(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        R = spec.realize(n, seed=8)
        M = R.matrix()
        rng = np.random.default_rng(0)
        for a, b in _col_spans(n):
            block = rng.normal(size=(b - a, 3))
            got = R.left_columns(block, a, b)
            assert isinstance(got, np.ndarray) and got.shape == (R.m, 3), (a, b)
            assert_rel_close(got, np.asarray(M[:, a:b] @ block))
            rows, values = R.left_rows(block, a, b)
            assert_array_equal(got[rows], values)  # the non-zero rows, as left_rows says
            others = np.setdiff1d(np.arange(R.m), rows)
            assert not got[others].any()

    def test_transpose_dot_matches_mixing(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        R = spec.realize(n, seed=9)
        T = np.random.default_rng(1).normal(size=(R.m, 4))
        got = R.transpose_dot(T)
        assert isinstance(got, np.ndarray) and got.shape == (R.support_size, 4)
        assert_rel_close(got, np.asarray(R.mixing.T @ T))

    @pytest.mark.parametrize("chunk", [1, 7, TILE, 3 * TILE + 1])
    def test_support_spans_cover_support_in_order(self, case: tuple[Sketch, int], chunk: int) -> None:
        spec, n = case
        R = spec.realize(n, seed=10)
        spans = R.support_spans(chunk)
        s = R.support_size
        assert spans[0][0] == 0 and spans[-1][1] == s
        for (_, b), (c, _) in zip(spans, spans[1:]):
            assert b == c
        for a, b in spans:
            # one len(A) × chunk kernel block at a time, or whole generation tiles
            assert 0 < b - a <= max(chunk, TILE)
            assert b - a <= chunk or a % TILE == 0

    @pytest.mark.parametrize("inputs", ["dense", "csr"])
    @pytest.mark.parametrize("chunk", [1, 7, 10**6])
    def test_gram_dot_equals_dense_product(self, case: tuple[Sketch, int], chunk: int, inputs: str) -> None:
        spec, n = case
        R = spec.realize(n, seed=12)
        A, X = gram_inputs(n, inputs)
        L = X[R.support]
        got = gram_dot(self.kernel, A, L, R, chunk=chunk)
        expected = np.asarray(self.kernel(A, L) @ R.mixing.T)
        assert isinstance(got, np.ndarray) and got.dtype == np.float64
        assert got.shape == (9, R.m)
        assert_rel_close(got, expected)

    @pytest.mark.parametrize("inputs", ["dense", "csr"])
    def test_gram_dot_float32(self, case: tuple[Sketch, int], inputs: str) -> None:
        """dtype=float32: placed columns are the kernel written into float32 (float32
        exponentials) and scaled; mixed columns are the float64 result rounded once."""
        spec, n = case
        R = spec.realize(n, seed=15)
        A, X = gram_inputs(n, inputs)
        L = X[R.support]
        got = gram_dot(self.kernel, A, L, R, chunk=7, dtype=np.float32)
        assert got.dtype == np.float32 and got.shape == (9, R.m)
        f64 = gram_dot(self.kernel, A, L, R, chunk=7)
        if R.scale is not None:  # placed: each column one scaled kernel column
            want = self.kernel(A, L, out=np.empty((9, len(R.support)), np.float32)) * R.scale
            assert_array_equal(got, want.astype(np.float32))
        else:
            assert_array_equal(got, f64.astype(np.float32))
        assert_rel_close(got, f64, rel=1e-6)

    def test_pickle_round_trip(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        R = spec.realize(n, seed=13)
        R2 = pickle.loads(pickle.dumps(R))
        assert (R2.m, R2.n, R2.seed) == (R.m, R.n, R.seed)
        assert R2.spec == spec
        assert_array_equal(R2.support, R.support)
        assert_same(R2.matrix(), R.matrix())

    def test_config_round_trip(self, case: tuple[Sketch, int]) -> None:
        spec, n = case
        cfg = json.loads(json.dumps(spec.to_config()))
        back = sketch_from_config(cfg)
        assert type(back) is type(spec)
        assert back == spec and hash(back) == hash(spec)
        R = spec.realize(n, seed=14)
        assert json.loads(json.dumps(R.to_config())) == {"spec": cfg, "n": n, "seed": 14}

    def test_saved_state_is_the_realisation_bitwise(self, case: tuple[Sketch, int]) -> None:
        """What a saved model stores (``get_state``) rebuilds the same matrix, without
        drawing again (JSON part through JSON)."""
        spec, n = case
        R = spec.realize(n, seed=16)
        arrays, meta = R.get_state()
        meta = json.loads(json.dumps(meta))
        again = RealizedSketch.from_state(arrays, meta)
        assert type(again) is type(R) and (again.m, again.n) == (R.m, R.n)
        assert_array_equal(again.support, R.support)
        assert_same(again.matrix(), R.matrix())
        if R.scale is not None:
            assert_array_equal(again.scale, R.scale)

    def test_sketched_kernel_of_the_features(self, case: tuple[Sketch, int]) -> None:
        """``SketchedFeatures``: ``φ(x)ᵀφ(x') = k(x, X) Rᵀ (R K Rᵀ)^† R k(X, x')`` (float64
        blocks). The pseudo-inverse keeps eigenvalues above 1e-10 of the largest, as the
        whitening does; a well-conditioned kernel (Laplacian) keeps the comparison at the
        level of rounding times the condition number of ``R K Rᵀ``, far below 1e-8."""
        from ..kernels.families import Laplacian
        from ..models.transformers import SketchedFeatures
        from ..options import EngineOptions

        spec, n = case
        if n > 500:
            pytest.skip("the dense reference is O(n²); checked at the small n")
        rng = np.random.default_rng(3)
        X, X2 = rng.normal(size=(n, 3)), rng.normal(size=(7, 3))
        k = Laplacian(gamma=1.0)
        f = SketchedFeatures(k, sketch=spec, random_state=4,
                             options=EngineOptions(block_dtype="float64", block_rows=17)).fit(X)
        R = dense(f.sketch_.matrix())
        B = R @ k(X, X) @ R.T
        s, U = np.linalg.eigh(0.5 * (B + B.T))
        keep = s > 1e-10 * s.max()
        pinv = (U[:, keep] / s[keep]) @ U[:, keep].T
        for A in (X, X2):
            want = k(A, X) @ R.T @ pinv @ R @ k(X, X2)
            got = f.transform(A) @ f.transform(X2).T
            assert np.max(np.abs(got - want)) <= 1e-8 * np.max(np.abs(want))
