"""Sketches: a shared contract for every sketch type, exact structure per type, and Monte Carlo
checks of the distributions (docs/design/math.md, "Sketches").

Every random check uses fixed seeds, so it is deterministic; its tolerance is stated in standard
errors of the statistic (5–6 SE, i.e. a two-sided normal tail below 1e-6 for a correct
implementation under a different seed), which still leaves the deviations produced by a wrong
scaling, a wrong mask probability or a correlated draw many SE outside the band.
"""

from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

from conftest import SKETCH_TYPES, all_sketches, random_sketches
from distsketch.kernels import families as kernel_families
from distsketch.kernels.families import Gaussian
from distsketch.linalg.blocks import gram_dot
from distsketch.sketches.base import RealizedSketch, check_sketch, sketch_from_config
from distsketch.sketches.sampling import Accumulation, Identity, SubSampling
from distsketch.sketches.tiled import TILE, CountSketch, GaussianSketch, PSparsified
from distsketch.testing.contracts import (
    SketchContract,
    assert_rel_close,
    assert_same,
    dense,
    gram_inputs,
)

#: Spans more than one generation tile, so tile boundaries are exercised.
BIG = TILE + 123

#: (specification, n) per contract case: every sketch type of conftest.SKETCH_TYPES at n = 50
#: and at n = BIG (small m there keeps dense comparisons cheap).
CASES = {**{f"{name}-50": (spec, 50) for name, spec in all_sketches(50, m=12).items()},
         **{f"{name}-big": (spec, BIG) for name, spec in all_sketches(BIG, m=5).items()}}

KERNEL = Gaussian(gamma=0.5)
ALL_NAMES = ["accumulation", "count", "gaussian", "identity", "p_sparsified", "subsampling"]


# ---------------------------------------------------------------------------- shared contract


class TestSketchContract(SketchContract):
    """distsketch.testing.SketchContract on every sketch type, at n = 50 and n = TILE + 123."""

    @pytest.fixture(params=list(CASES), ids=list(CASES))
    def case(self, request):
        return CASES[request.param]

    @pytest.mark.parametrize("inputs", ["dense", "csr"])
    def test_gram_dot_row_tiles(self, case, inputs, monkeypatch):
        """Row tiles (forced to the minimum, 8 rows: tiles of 8 and 1 here) give the same
        values as one tile, to rounding (BLAS may sum a 1-row product in another order)."""
        spec, n = case
        R = spec.realize(n, seed=15)
        A, X = gram_inputs(n, inputs)
        L = X[R.support]
        f64 = gram_dot(KERNEL, A, L, R, chunk=7)
        f32 = gram_dot(KERNEL, A, L, R, chunk=7, dtype=np.float32)
        monkeypatch.setattr(kernel_families, "_TILE_BYTES", 16)  # the minimum tile: 8 rows
        assert_rel_close(gram_dot(KERNEL, A, L, R, chunk=7), f64, rel=1e-15)
        assert_rel_close(gram_dot(KERNEL, A, L, R, chunk=7, dtype=np.float32), f32, rel=1.2e-7)


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
#: Every sketch type with a size m, as factories of m (from conftest.SKETCH_TYPES).
SPEC_WITH_M = [pytest.param(make, id=name) for name, make in SKETCH_TYPES.items()
               if name != "identity"]


@pytest.mark.parametrize("make", SPEC_WITH_M)
def test_check_rejects_bad_m_naming_argument(make):
    for m in BAD_M:
        with pytest.raises(ValueError, match=r"^input_sketch: .*\bm must be a positive integer"):
            make(m).check(100, argument="input_sketch")


@pytest.mark.parametrize("make", SPEC_WITH_M)
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

MC_SPECS = list(random_sketches(4).values()) + [SubSampling(3)]


@pytest.mark.slow
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


def test_tiled_sketch_refuses_a_generator_that_draws_differently():
    """A saved tiled sketch is regenerated from its seed, checked against the fingerprints of
    its tiles: a generator that draws differently (another numpy) is refused."""
    R = GaussianSketch(4).realize(TILE + 10, seed=3)
    arrays, meta = R.get_state()
    assert len(meta["tile_fingerprints"]) == 2
    assert_same(RealizedSketch.from_state(arrays, meta).matrix(), R.matrix())

    class Drifted(GaussianSketch):
        def tile(self, seed, t, m, width):
            return super().tile(seed + 1, t, m, width)

    meta = dict(meta, spec=GaussianSketch(4).to_config())
    with pytest.raises(ValueError, match="regenerated from its seed differs"):
        type(R)._from_state(Drifted(4), meta, arrays)


def test_repr_of_a_part_without_arguments_is_its_call():
    """A part whose class takes no argument (``object.__init__``) shows as ``Name()``."""
    assert repr(Identity()) == "Identity()"
    assert repr(SubSampling(5)) == "SubSampling(5)"
    assert eval(repr(Identity()), {"Identity": Identity}).get_params() == {}
