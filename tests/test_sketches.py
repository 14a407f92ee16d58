"""Sketches: a shared contract for every sketch type, exact structure per type, and Monte Carlo
checks of the distributions (DESIGN §2, the sketch table).

Every random check uses fixed seeds, so it is deterministic; its tolerance is stated in standard
errors of the statistic (5–6 SE, i.e. a two-sided normal tail below 1e-6 for a correct
implementation under a different seed), which still leaves the deviations produced by a wrong
scaling, a wrong mask probability or a correlated draw many SE outside the band.
"""

from __future__ import annotations

import json
import math
import pickle
import time
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

from distsketch import kernels
from distsketch.kernels import Gaussian
from distsketch.sketches import (
    TILE,
    Accumulation,
    CountSketch,
    GaussianSketch,
    Identity,
    PSparsified,
    RealizedSketch,
    SubSampling,
    check_sketch,
    sketch_from_config,
)
from distsketch.features import gram_dot

#: Spans more than one generation tile, so tile boundaries are exercised.
BIG = TILE + 123

#: (specification, n) per contract case. Small m at BIG keeps dense comparisons cheap.
CASES = {
    "identity-50": (Identity(), 50),
    "subsampling-50": (SubSampling(12), 50),
    "subsampling_m_eq_n-50": (SubSampling(50), 50),
    "psparse_rademacher-50": (PSparsified(12, p=0.15), 50),
    "psparse_gaussian-50": (PSparsified(12, p=0.15, kind="gaussian"), 50),
    "accumulation-50": (Accumulation(12, q=3), 50),
    "gaussian-50": (GaussianSketch(12), 50),
    "count-50": (CountSketch(12), 50),
    "identity-big": (Identity(), BIG),
    "subsampling-big": (SubSampling(40), BIG),
    "psparse_rademacher-big": (PSparsified(6, p=0.05), BIG),
    "psparse_gaussian-big": (PSparsified(5, p=0.05, kind="gaussian"), BIG),
    "accumulation-big": (Accumulation(30, q=4), BIG),
    "gaussian-big": (GaussianSketch(4), BIG),
    "count-big": (CountSketch(5), BIG),
}

KERNEL = Gaussian(gamma=0.5)
ALL_NAMES = ["accumulation", "count", "gaussian", "identity", "p_sparsified", "subsampling"]


# ---------------------------------------------------------------------------- helpers


def dense(x) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def assert_same(a, b) -> None:
    """Bitwise equality of two matrices (both sparse or both dense), never densifying sparse."""
    assert a.shape == b.shape
    assert sp.issparse(a) == sp.issparse(b), (type(a), type(b))
    if sp.issparse(a):
        assert (sp.csr_array(a) != sp.csr_array(b)).nnz == 0
    else:
        assert_array_equal(a, b, strict=True)


def nonnull_columns(R) -> np.ndarray:
    """Columns of R holding a non-zero value (explicitly stored zeros do not count)."""
    if sp.issparse(R):
        c = sp.csc_array(R, copy=True)
        c.sum_duplicates()
        c.eliminate_zeros()
        return np.flatnonzero(np.diff(c.indptr))
    return np.flatnonzero((R != 0).any(axis=0))


def col_spans(n: int) -> list[tuple[int, int]]:
    """Spans of [0, n): whole, edges, middle, empty, and across the first tile boundary."""
    spans = [(0, n), (0, 1), (n // 3, n // 2 + 1), (n - 1, n), (7, 7)]
    if n > TILE + 5:
        spans += [(TILE - 3, TILE + 5), (TILE - 1, TILE), (TILE, n), (1, TILE + 1)]
    return spans


def deterministic(spec, n) -> bool:
    """Sketches whose draw does not depend on the seed at all."""
    return isinstance(spec, Identity) or (isinstance(spec, SubSampling) and spec.m == n)


def gram_inputs(n: int, kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    X[rng.random(X.shape) < 0.4] = 0.0
    A = rng.normal(size=(9, 3))
    A[rng.random(A.shape) < 0.4] = 0.0
    if kind == "csr":
        return sp.csr_array(A), sp.csr_array(X)
    return A, X


def assert_rel_close(got, expected, rel=1e-12):
    """Entry-wise, relative to the block's largest entry (sums reordered across chunks)."""
    scale = max(float(np.abs(expected).max(initial=0.0)), 1e-300)
    assert_allclose(got, expected, rtol=rel, atol=rel * scale)


# ---------------------------------------------------------------------------- shared contract


@pytest.fixture(params=list(CASES), ids=list(CASES))
def case(request):
    return CASES[request.param]


class TestSketchContract:
    """Run for every sketch type, at n = 50 and at n = TILE + 123."""

    def test_realize_shape_and_types(self, case):
        spec, n = case
        spec.check(n, argument="sketch")  # valid settings do not raise
        R = spec.realize(n, seed=3)
        assert isinstance(R, RealizedSketch)
        assert (R.n, R.seed) == (n, 3)
        assert R.m == (n if isinstance(spec, Identity) else spec.m)
        M = R.matrix()
        assert M.shape == (R.m, n)
        if isinstance(spec, GaussianSketch):
            assert isinstance(M, np.ndarray)
        else:
            assert sp.issparse(M) and M.format == "csr"
        assert M.dtype == np.float64

    def test_factorisation_R_equals_mixing_times_selection(self, case):
        spec, n = case
        R = spec.realize(n, seed=4)
        M, J, mix = R.matrix(), R.support, R.mixing
        assert J.dtype == np.int64 and J.ndim == 1
        assert np.all(np.diff(J) > 0)  # sorted and unique
        assert J.size == 0 or (J[0] >= 0 and J[-1] < n)
        assert R.support_size == J.size
        # Exactly the non-null columns: everything else is zero, nothing null is kept.
        assert_array_equal(J, nonnull_columns(M))
        assert mix.shape == (R.m, J.size)
        assert sp.issparse(mix) == sp.issparse(M)
        assert_same(M[:, J], mix)
        s = J.size
        R_sub = sp.csr_array((np.ones(s), (np.arange(s), J)), shape=(s, n))
        assert_same(mix @ R_sub, M)

    def test_scale_only_for_diagonal_mixing(self, case):
        spec, n = case
        R = spec.realize(n, seed=5)
        if isinstance(spec, (Identity, SubSampling)):
            assert R.scale is not None and R.scale.shape == (R.m,) == (R.support_size,)
            assert_same(sp.csr_array(sp.diags_array(R.scale)), sp.csr_array(R.mixing))
        else:
            assert R.scale is None

    def test_same_seed_same_matrix_bitwise(self, case):
        spec, n = case
        np.random.seed(0)  # the legacy global state must play no part
        R1 = spec.realize(n, seed=11)
        np.random.seed(1)
        np.random.random(17)
        R2 = spec.realize(n, seed=np.int64(11))
        assert_same(R1.matrix(), R2.matrix())
        assert_array_equal(R1.support, R2.support)
        assert_same(R1.mixing, R2.mixing)

    def test_different_seed_different_matrix(self, case):
        spec, n = case
        A, B = spec.realize(n, seed=1).matrix(), spec.realize(n, seed=2).matrix()
        if deterministic(spec, n):
            assert_same(A, B)
        elif sp.issparse(A):
            assert (A != B).nnz > 0
        else:
            assert not np.array_equal(A, B)

    def test_columns_match_matrix(self, case):
        spec, n = case
        R = spec.realize(n, seed=6)
        M = R.matrix()
        for a, b in col_spans(n):
            C = R.columns(a, b)
            assert C.shape == (R.m, b - a), (a, b)
            assert_same(C, M[:, a:b])

    def test_mixing_t_block_matches_mixing(self, case):
        spec, n = case
        R = spec.realize(n, seed=7)
        mix = R.mixing
        s = R.support_size
        for a, b in col_spans(s):
            block = R.mixing_t_block(a, b)
            assert block.shape == (b - a, R.m), (a, b)
            assert_same(block, mix[:, a:b].T)

    def test_left_columns_matches_matrix_product(self, case):
        spec, n = case
        R = spec.realize(n, seed=8)
        M = R.matrix()
        rng = np.random.default_rng(0)
        for a, b in col_spans(n):
            block = rng.normal(size=(b - a, 3))
            got = R.left_columns(block, a, b)
            assert isinstance(got, np.ndarray) and got.shape == (R.m, 3), (a, b)
            expected = np.asarray(M[:, a:b] @ block)
            assert_rel_close(got, expected)

    def test_transpose_dot_matches_mixing(self, case):
        spec, n = case
        R = spec.realize(n, seed=9)
        T = np.random.default_rng(1).normal(size=(R.m, 4))
        got = R.transpose_dot(T)
        assert isinstance(got, np.ndarray) and got.shape == (R.support_size, 4)
        assert_rel_close(got, np.asarray(R.mixing.T @ T))

    @pytest.mark.parametrize("chunk", [1, 7, TILE, 3 * TILE + 1])
    def test_support_spans_cover_support_in_order(self, case, chunk):
        spec, n = case
        R = spec.realize(n, seed=10)
        spans = R.support_spans(chunk)
        s = R.support_size
        assert spans[0][0] == 0 and spans[-1][1] == s
        for (_, b), (c, _) in zip(spans, spans[1:]):
            assert b == c
        for a, b in spans:
            assert 0 < b - a <= max(chunk, TILE)
            if isinstance(spec, GaussianSketch):
                assert a % TILE == 0  # aligned with the generation tiles
            else:
                assert b - a <= chunk  # gram_dot's promise: one len(A) × chunk block at a time

    @pytest.mark.parametrize("inputs", ["dense", "csr"])
    @pytest.mark.parametrize("chunk", [1, 7, 10**6])
    def test_gram_dot_equals_dense_product(self, case, chunk, inputs):
        spec, n = case
        R = spec.realize(n, seed=12)
        A, X = gram_inputs(n, inputs)
        L = X[R.support]
        got = gram_dot(KERNEL, A, L, R, chunk=chunk)
        expected = np.asarray(KERNEL(A, L) @ R.mixing.T)
        assert isinstance(got, np.ndarray) and got.dtype == np.float64
        assert got.shape == (9, R.m)
        assert_rel_close(got, expected)

    @pytest.mark.parametrize("inputs", ["dense", "csr"])
    def test_gram_dot_float32_and_row_tiles(self, case, inputs, monkeypatch):
        """dtype=float32: placed columns are the kernel written into float32 (float32
        exponentials) and scaled; mixed columns are the float64 result rounded once. Row
        tiles (forced to the minimum, 8 rows: tiles of 8 and 1 here) give the same values as
        one tile, to rounding (BLAS
        may sum a 1-row product in another order)."""
        spec, n = case
        R = spec.realize(n, seed=15)
        A, X = gram_inputs(n, inputs)
        L = X[R.support]
        got = gram_dot(KERNEL, A, L, R, chunk=7, dtype=np.float32)
        assert got.dtype == np.float32 and got.shape == (9, R.m)
        f64 = gram_dot(KERNEL, A, L, R, chunk=7)
        if R.scale is not None:  # placed: each column one scaled kernel column
            want = KERNEL(A, L, out=np.empty((9, len(R.support)), np.float32)) * R.scale
            assert_array_equal(got, want.astype(np.float32))
        else:
            assert_array_equal(got, f64.astype(np.float32))
        assert_rel_close(got, f64, rel=1e-6)
        monkeypatch.setattr(kernels, "_TILE_BYTES", 16)  # the minimum tile: 8 rows
        assert_rel_close(gram_dot(KERNEL, A, L, R, chunk=7), f64, rel=1e-15)
        assert_rel_close(gram_dot(KERNEL, A, L, R, chunk=7, dtype=np.float32), got, rel=1.2e-7)

    def test_pickle_round_trip(self, case):
        spec, n = case
        R = spec.realize(n, seed=13)
        R2 = pickle.loads(pickle.dumps(R))
        assert (R2.m, R2.n, R2.seed) == (R.m, R.n, R.seed)
        assert R2.spec == spec
        assert_array_equal(R2.support, R.support)
        assert_same(R2.matrix(), R.matrix())

    def test_config_round_trip(self, case):
        spec, n = case
        cfg = json.loads(json.dumps(spec.to_config()))
        back = sketch_from_config(cfg)
        assert type(back) is type(spec)
        assert back == spec and hash(back) == hash(spec)
        R = spec.realize(n, seed=14)
        rcfg = json.loads(json.dumps(R.to_config()))
        assert rcfg == {"spec": cfg, "n": n, "seed": 14}
        again = sketch_from_config(rcfg["spec"]).realize(rcfg["n"], seed=rcfg["seed"])
        assert_same(again.matrix(), R.matrix())


# ---------------------------------------------------------------------------- gram_dot, right=


@pytest.mark.parametrize("inputs", ["dense", "csr"])
@pytest.mark.parametrize("chunk", [1, 7, 10**6])
def test_gram_dot_right_equals_dense_product(chunk, inputs):
    A, L = gram_inputs(50, inputs, seed=3)
    P = np.random.default_rng(4).normal(size=(50, 4))
    got = gram_dot(KERNEL, A, L, right=P, chunk=chunk)
    assert got.shape == (9, 4)
    assert_rel_close(got, KERNEL(A, L) @ P)


def test_gram_dot_right_nonpositive_chunk_not_silently_zero():
    A, L = gram_inputs(50, "dense", seed=3)
    P = np.random.default_rng(4).normal(size=(50, 4))
    try:
        got = gram_dot(KERNEL, A, L, right=P, chunk=0)
    except ValueError:
        return
    assert_rel_close(got, KERNEL(A, L) @ P)


# ---------------------------------------------------------------------------- Identity


def test_identity_is_the_identity_matrix():
    R = Identity().realize(50, seed=123)
    assert_array_equal(dense(R.matrix()), np.eye(50))
    assert_array_equal(R.support, np.arange(50))
    assert_array_equal(R.scale, np.ones(50))
    assert R.is_identity and not SubSampling(50).realize(50, seed=0).is_identity


# ---------------------------------------------------------------------------- SubSampling


def test_subsampling_one_scaled_entry_per_row():
    n, m = 50, 12
    R = SubSampling(m).realize(n, seed=21)
    M = R.matrix()
    assert_array_equal(np.diff(M.indptr), np.ones(m))  # exactly one stored entry per row
    assert_allclose(M.data, math.sqrt(n / m), rtol=1e-15)
    cols = M.indices
    assert np.unique(cols).size == m  # m distinct training rows
    assert_array_equal(np.sort(cols), R.support)


def test_subsampling_m_equal_n_is_a_permutation():
    n = 30
    M = dense(SubSampling(n).realize(n, seed=22).matrix())
    assert_array_equal((M != 0).sum(axis=0), np.ones(n))  # every training row covered once
    assert_array_equal((M != 0).sum(axis=1), np.ones(n))
    assert_array_equal(M.T @ M, np.eye(n))  # scale sqrt(n/m) = 1


def test_subsampling_check_rejects_m_greater_than_n():
    SubSampling(10).check(10, argument="input_sketch")
    with pytest.raises(ValueError, match=r"^input_sketch: .*\bm\b") as info:
        SubSampling(11).check(10, argument="input_sketch")
    assert "11" in str(info.value) and "10" in str(info.value)


# ---------------------------------------------------------------------------- argument checks

BAD_M = [0, -2, 2.5, True, "3", None]
SPEC_WITH_M = [
    pytest.param(lambda m: SubSampling(m), id="subsampling"),
    pytest.param(lambda m: PSparsified(m, 0.5), id="p_sparsified"),
    pytest.param(lambda m: Accumulation(m, 2), id="accumulation"),
    pytest.param(lambda m: GaussianSketch(m), id="gaussian"),
    pytest.param(lambda m: CountSketch(m), id="count"),
]


@pytest.mark.parametrize("make", SPEC_WITH_M)
def test_check_rejects_bad_m_naming_argument(make):
    for m in BAD_M:
        with pytest.raises(ValueError, match=r"^input_sketch: .*\bm must be a positive integer"):
            make(m).check(100, argument="input_sketch")


@pytest.mark.parametrize(
    "make", [lambda m: SubSampling(m), lambda m: PSparsified(m, 0.5), lambda m: Accumulation(m),
             lambda m: GaussianSketch(m), lambda m: CountSketch(m)],
    ids=["subsampling", "p_sparsified", "accumulation", "gaussian", "count"],
)
def test_realize_rejects_bad_m(make):
    for m in BAD_M:
        with pytest.raises(ValueError, match=r"\bm\b"):
            make(m).realize(100, seed=0)


@pytest.mark.parametrize("p", [0, 0.0, -0.1, 1.5, float("nan"), True, "0.5", None])
def test_psparsified_rejects_bad_p(p):
    with pytest.raises(ValueError, match=r"^output_sketch: .*\bp\b"):
        PSparsified(10, p).check(100, argument="output_sketch")
    with pytest.raises(ValueError, match=r"\bp\b"):
        PSparsified(10, p).realize(100, seed=0)


@pytest.mark.parametrize("kind", ["uniform", "Rademacher ", None])
def test_psparsified_rejects_bad_kind(kind):
    with pytest.raises(ValueError, match=r"^output_sketch: .*\bkind\b"):
        PSparsified(10, 0.5, kind=kind).check(100, argument="output_sketch")
    with pytest.raises(ValueError, match=r"\bkind\b"):
        PSparsified(10, 0.5, kind=kind).realize(100, seed=0)


def test_psparsified_accepts_edge_p():
    for p in (1, 1.0, 1e-9, np.float64(0.5)):
        PSparsified(10, p).check(100, argument="output_sketch")


@pytest.mark.parametrize("q", [0, -1, 1.5, True, None])
def test_accumulation_rejects_bad_q(q):
    with pytest.raises(ValueError, match=r"^input_sketch: .*\bq must be a positive integer"):
        Accumulation(10, q).check(100, argument="input_sketch")


# ---------------------------------------------------------------------------- PSparsified


@pytest.fixture(scope="module")
def psparse_draws():
    """m = 50, n = 20000 (5 tiles), p = 0.01: about 10^4 non-zeros per kind."""
    m, n, p = 50, 20000, 0.01
    return m, n, p, {
        kind: PSparsified(m, p, kind=kind).realize(n, seed=31).matrix()
        for kind in ("rademacher", "gaussian")
    }


@pytest.mark.parametrize("kind", ["rademacher", "gaussian"])
def test_psparsified_mask_density_and_support_size(psparse_draws, kind):
    m, n, p, draws = psparse_draws
    M = draws[kind]
    # nnz ~ Binomial(m n, p)
    mean, se = m * n * p, math.sqrt(m * n * p * (1 - p))
    assert abs(M.nnz - mean) <= 5 * se, (M.nnz, mean, se)
    # the columns are independent: s' ~ Binomial(n, 1 - (1-p)^m)
    q = 1 - (1 - p) ** m
    s = PSparsified(m, p, kind=kind).realize(n, seed=31).support_size
    assert abs(s - n * q) <= 5 * math.sqrt(n * q * (1 - q)), (s, n * q)
    # rows are equally likely: chi-square over the m row counts
    rows = np.diff(M.indptr)
    chi2 = float(((rows - n * p) ** 2 / (n * p)).sum())
    assert stats.chi2.sf(chi2, m - 1) > 1e-6
    # per-column counts follow Binomial(m, p): chi-square over 0, 1, 2, >= 3
    counts = np.bincount(np.diff(sp.csc_array(M).indptr), minlength=4)
    observed = np.array([*counts[:3], counts[3:].sum()])
    probs = stats.binom.pmf([0, 1, 2], m, p)
    expected = n * np.array([*probs, 1 - probs.sum()])
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert stats.chi2.sf(chi2, 3) > 1e-6, (observed, expected)
    # tile 1's mask is not a copy of tile 0's
    C = sp.csc_array(M)
    assert (C[:, :300] != C[:, TILE : TILE + 300]).nnz > 0


def test_psparsified_rademacher_entries_are_signs(psparse_draws):
    m, n, p, draws = psparse_draws
    M = draws["rademacher"]
    assert_allclose(np.abs(M.data), 1 / math.sqrt(m * p), rtol=1e-14)
    k = M.nnz
    assert abs((M.data > 0).sum() - k / 2) <= 5 * math.sqrt(k / 4)  # fair signs


def test_psparsified_gaussian_entries_are_standard_normal(psparse_draws):
    m, n, p, draws = psparse_draws
    z = draws["gaussian"].data * math.sqrt(m * p)
    k = z.size
    assert abs(z.mean()) <= 5 / math.sqrt(k)
    assert abs(z.var() - 1) <= 5 * math.sqrt(2 / k)
    assert np.unique(np.abs(z)).size > k // 2  # not a sign matrix in disguise
    assert stats.kstest(z, "norm").pvalue > 1e-6


def test_psparsified_p_one_is_a_dense_sign_matrix():
    m, n = 3, BIG
    R = PSparsified(m, 1.0).realize(n, seed=32)
    M = dense(R.matrix())
    assert_allclose(np.abs(M), 1 / math.sqrt(m), rtol=1e-14)
    assert R.support_size == n
    assert 0.45 < (M > 0).mean() < 0.55  # 12657 fair signs: SE 0.0044


def test_psparsified_huge_sparse_draw_has_no_dense_mask():
    """A dense m × n mask would need 400 MB as bool, 3.2 GB as float64."""
    m, n = 200, 2_000_000
    p = 20 / n
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        R = PSparsified(m, p).realize(n, seed=33)
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 150e6, peak  # ~32 MB measured: CSC index arrays of length n
    assert elapsed < 10, elapsed  # ~0.2 s measured; the bound only catches a dense mask
    nnz = R.matrix().nnz
    assert abs(nnz - m * n * p) <= 5 * math.sqrt(m * n * p), nnz


# ---------------------------------------------------------------------------- Accumulation


@pytest.mark.parametrize(("m", "q", "n"), [(12, 3, 50), (40, 4, 3)])
def test_accumulation_rows_sum_q_signed_unit_entries(m, q, n):
    """n = 3 forces repeated columns, whose ±1 units must add (or cancel)."""
    R = Accumulation(m, q).realize(n, seed=41)
    M = R.matrix()
    unit = math.sqrt(n / (m * q))
    K = dense(M) / unit
    assert_allclose(K, np.round(K), atol=1e-12)  # multiples of sqrt(n/(mq))
    K = np.round(K).astype(int)
    stored = np.diff(M.indptr)
    assert_array_equal(stored, (K != 0).sum(axis=1))  # no duplicates or zeros stored
    assert stored.max() <= q
    total = np.abs(K).sum(axis=1)
    assert np.all(total <= q)
    assert np.all(total % 2 == q % 2)  # a sum of q signs has the parity of q
    assert R.support_size <= m * q
    if n == 3:
        assert np.abs(K).max() >= 2  # duplicates added up
        assert np.any(total < q)  # and some cancelled


# ---------------------------------------------------------------------------- GaussianSketch


def test_gaussian_sketch_entries_have_variance_one_over_m():
    m = 20
    M = GaussianSketch(m).realize(BIG, seed=51).matrix()
    z = (M * math.sqrt(m)).ravel()
    k = z.size  # 84380
    assert abs(z.mean()) <= 5 / math.sqrt(k)
    assert abs(z.var() - 1) <= 5 * math.sqrt(2 / k)
    assert stats.kstest(z, "norm").pvalue > 1e-6
    # Tile 1 is not a copy of tile 0 and is uncorrelated with it (SE 1/sqrt(2460)).
    t0, t1 = M[:, :123].ravel(), M[:, TILE : TILE + 123].ravel()
    assert not np.array_equal(t0, t1)
    # No normal of tile 1 reappears in tile 0: the tiles come from distinct streams
    # (continuous draws never coincide; a reused or restarted stream shares values).
    assert np.intersect1d(M[:, :TILE], M[:, TILE:]).size == 0
    assert abs(np.corrcoef(t0, t1)[0, 1]) <= 5 / math.sqrt(t0.size)


def test_gaussian_sketch_request_order_does_not_matter():
    spec = GaussianSketch(6)
    first = spec.realize(BIG, seed=52)
    cols_first = first.columns(TILE - 3, TILE + 5)
    tail_first = first.columns(TILE, BIG)
    M_after = first.matrix()
    second = spec.realize(BIG, seed=52)
    M_before = second.matrix()
    assert_same(M_after, M_before)
    assert_same(cols_first, M_before[:, TILE - 3 : TILE + 5])
    assert_same(tail_first, second.columns(TILE, BIG))
    assert_same(second.mixing_t_block(TILE - 3, TILE + 5), M_before[:, TILE - 3 : TILE + 5].T)


# ---------------------------------------------------------------------------- CountSketch


def test_count_sketch_one_sign_per_column():
    m, n = 5, BIG
    M = CountSketch(m).realize(n, seed=61).matrix()
    C = sp.csc_array(M)
    assert_array_equal(np.diff(C.indptr), np.ones(n))  # exactly one entry per column
    assert set(np.unique(C.data)) == {-1.0, 1.0}
    assert abs((C.data > 0).sum() - n / 2) <= 5 * math.sqrt(n / 4)
    buckets = np.bincount(C.indices, minlength=m)
    chi2 = float(((buckets - n / m) ** 2 / (n / m)).sum())
    assert stats.chi2.sf(chi2, m - 1) > 1e-6, buckets
    # tile 1 hashes are not a copy of tile 0's
    assert not np.array_equal(C.indices[:123], C.indices[TILE : TILE + 123])


# ---------------------------------------------------------------------------- E[RᵀR] = I

MC_SPECS = [
    SubSampling(3),
    PSparsified(4, 0.3),
    PSparsified(4, 0.3, kind="gaussian"),
    Accumulation(4, q=2),
    GaussianSketch(4),
    CountSketch(3),
]


@pytest.mark.parametrize("spec", MC_SPECS, ids=repr)
def test_expected_gram_of_sketch_is_identity(spec):
    """Mean of RᵀR over 1000 seeds at n = 6, entry by entry within 6 SE (+1e-12 for entries
    that are constant, e.g. SubSampling's off-diagonal). A wrong scaling shifts the diagonal by
    a constant factor, which the pooled diagonal mean (SE ≈ 0.01–0.03) catches."""
    n, S = 6, 1000
    G = np.empty((S, n, n))
    for i in range(S):
        M = dense(spec.realize(n, seed=1000 + i).matrix())
        G[i] = M.T @ M
    mean = G.mean(axis=0)
    se = G.std(axis=0, ddof=1) / math.sqrt(S)
    assert np.all(np.abs(mean - np.eye(n)) <= 6 * se + 1e-12), (mean, se)
    diag = np.diagonal(G, axis1=1, axis2=2).mean(axis=1)  # per-draw average of the diagonal
    assert abs(diag.mean() - 1) <= 6 * diag.std(ddof=1) / math.sqrt(S) + 1e-12
    assert abs(diag.mean() - 1) <= 0.1


# ---------------------------------------------------------------------------- resolution


def test_check_sketch_resolves_arguments():
    assert check_sketch(None, argument="input_sketch") == Identity()
    assert isinstance(check_sketch(None, argument="input_sketch"), Identity)
    spec = CountSketch(7)
    assert check_sketch(spec, argument="input_sketch") is spec
    got = check_sketch({"name": "subsampling", "m": 4}, argument="input_sketch")
    assert type(got) is SubSampling and got == SubSampling(4)


@pytest.mark.parametrize("bad", ["subsampling", 5, SubSampling, [SubSampling(3)]], ids=repr)
def test_check_sketch_rejects_wrong_type(bad):
    with pytest.raises(ValueError, match=r"^input_sketch:"):
        check_sketch(bad, argument="input_sketch")


def test_sketch_from_config_unknown_name_lists_valid_names():
    for cfg in ({"name": "nope"}, {}):
        with pytest.raises(ValueError, match=r"^sketch: ") as info:
            sketch_from_config(cfg)
        for name in ALL_NAMES:
            assert repr(name) in str(info.value)


def test_sketch_from_config_bad_parameters():
    with pytest.raises(ValueError, match=r"^output_sketch: .*'subsampling'"):
        sketch_from_config({"name": "subsampling", "k": 3}, argument="output_sketch")
    with pytest.raises(ValueError, match=r"^input_sketch: .*'accumulation'"):
        check_sketch({"name": "accumulation", "m": 3, "r": 1}, argument="input_sketch")


def test_spec_equality_and_hash():
    assert SubSampling(5) == SubSampling(5) and hash(SubSampling(5)) == hash(SubSampling(5))
    assert SubSampling(5) != SubSampling(6)
    assert SubSampling(5) != CountSketch(5)  # same parameters, different type
    assert PSparsified(5, 0.1) != PSparsified(5, 0.1, kind="gaussian")
    assert Identity() == Identity() and Identity() != SubSampling(1)
    assert len({Accumulation(3, 2), Accumulation(3, 2), Accumulation(3, 3)}) == 2
