"""PCG's kernel block fused with its product (``distsketch.engine.fused``).

The fused ``K_Iᵀ (K_I V)`` must be bitwise the unfused one: the float32 block computed whole
by ``FeatureMap.block`` and multiplied by ``gram_product`` (product tiles converted to float64,
added in tile order). Checked on shapes where the block's rows are not a multiple of either
tiling, one row, several landmark spans, rings that wrap, d up to 50, the Gaussian kernel and
a standardised one; the maps, rows and kernels it does not apply to fall back (None); whole
fits by PCG (SketchedKRR, repeated landmarks, SketchedRegressor) predict bitwise the same with
the fusion switched off, and the fused path was taken.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
from distsketch.engine.features import FeatureMap
from distsketch.engine.fused import fused_block_product, fused_gram_product
from distsketch.engine.mapreduce import Workspace
from distsketch.engine.sweep import Segment, Segments, SweepData, gram_product
from distsketch.solvers import conjugate_gradient
from distsketch.solvers.conjugate_gradient import PCGStep, pcg_block
from pcghelpers import repeated

# (b, m, d, chunk, k): b rows, m landmarks in spans of chunk, k columns of V
SHAPES = [
    (1201, 7, 1, 2048, 1),  # tiny m: one product tile of 512 rows, one kernel tile
    (1201, 300, 10, 2048, 3),  # 1201 = 2·512 + 177 rows
    (1201, 3000, 50, 2048, 2),  # two spans (2048, 952: kernel tiles of 256 and 550 rows)
    (2500, 3000, 10, 2048, 1),  # rings of 512 and 1100 rows: both wrap
    (1, 300, 10, 2048, 1),  # one row (matrix–vector products)
    (77, 3000, 10, 512, 2),  # fewer rows than a product tile (87); six spans
    (600, 2500, 10, 1000, 1),  # spans 1000, 1000, 500
]


def _case(b, m, d, k, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(b, d)), rng.normal(size=(m, d)), rng.normal(size=(m, k)))


def _unfused(fmap, A, V):
    K = fmap.block(A, dtype=np.float32, out=np.empty((len(A), fmap.width), np.float32))
    return gram_product(K, V, Workspace())


@pytest.mark.parametrize("standardized", [False, True], ids=["gaussian", "standardized"])
@pytest.mark.parametrize("b, m, d, chunk, k", SHAPES)
def test_fused_product_is_bitwise_the_unfused(b, m, d, chunk, k, standardized):
    A, L, V = _case(b, m, d, k)
    kernel = ds.Gaussian(gamma=0.5 / d)
    if standardized:
        kernel = ds.Standardized.from_data(kernel, A)
    fmap = FeatureMap(kernel, L, None, chunk=chunk)
    got = fused_gram_product(fmap, A, V, Workspace())
    assert got is not None
    want = _unfused(fmap, A, V)
    np.testing.assert_array_equal(got, want)
    # and the reference is the product it stands for (float32 kernel values: relative 1e-6)
    K = np.asarray(kernel(A, L))
    ref = K.T @ (K @ V)
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(K).T @ (np.abs(K) @ np.abs(V)))


def test_work_arrays_reused_between_blocks():
    """A task's second block (other rows, same shapes) reads no stale ring rows."""
    A, L, V = _case(2500, 3000, 10, 1)
    fmap = FeatureMap(ds.Gaussian(gamma=0.05), L, None)
    ws = Workspace()
    fused_gram_product(fmap, A, V, ws)
    A2 = A[::-1].copy()
    np.testing.assert_array_equal(fused_gram_product(fmap, A2, V, ws), _unfused(fmap, A2, V))


@pytest.mark.parametrize("what", ["laplacian", "matern", "wide", "projection", "sketch",
                                  "sparse", "fortran"])
def test_falls_back_where_it_does_not_apply(what):
    """Kernels without independent row tiles, d > 64, projected maps, sparse or
    Fortran-ordered rows: None (the caller computes the block)."""
    d = 65 if what == "wide" else 4
    A, L, V = _case(50, 30, d, 1)
    kernel = {"laplacian": ds.Laplacian(gamma=0.3),
              "matern": ds.Matern(nu=1.5)}.get(what, ds.Gaussian(gamma=0.3))
    proj = None
    if what == "projection":
        proj = np.ones((30, 30))
    elif what == "sketch":
        proj = ds.SubSampling(10).realize(30, seed=0)
    if what == "sparse":
        A = sp.csr_array(A)
    elif what == "fortran":
        A = np.asfortranarray(A)
    fmap = FeatureMap(kernel, L, proj)
    assert fused_gram_product(fmap, A, V[: fmap.width], Workspace()) is None


def _sweep_data(fmap, n, dtype=np.float32, **kw):
    return SweepData(n=n, block_rows=n, m=fmap.width, d=1, C=None, crcs=(), x=fmap,
                     dtype=np.dtype(dtype), **kw)


def test_block_product_only_for_recomputed_float32_blocks():
    A, L, V = _case(300, 200, 5, 2)
    fmap = FeatureMap(ds.Gaussian(gamma=0.2), L, None)
    ws = Workspace()
    assert fused_block_product(_sweep_data(fmap, 300), 0, A, None, V, ws) is not None
    assert fused_block_product(_sweep_data(fmap, 300, np.float64), 0, A, None, V, ws) is None
    assert fused_block_product(_sweep_data(fmap, 300), 0, A, 12345, V, ws) is None  # stored
    held = _sweep_data(fmap, 300, held=(np.zeros((300, 200)),))
    assert fused_block_product(held, 0, A, None, V, ws) is None


@pytest.mark.parametrize("first", [False, True], ids=["iteration", "first-pass"])
def test_pcg_block_same_with_and_without_fusion(monkeypatch, first):
    """pcg_block over two segments (block 1 is the second part's): the same dict, bitwise,
    with the fusion on and off (the first pass, which also needs the float64 block's sums,
    is never fused)."""
    A, L, V = _case(700, 2500, 10, 2)
    fmap = FeatureMap(ds.Gaussian(gamma=0.05), L, None)
    y = np.arange(700.0)
    parts = [Segment(_sweep_data(fmap, 300), y[:300], A[:300]),
             Segment(_sweep_data(fmap, 400), y[300:], A[300:])]
    data, _, _ = Segments.of(parts)
    step = PCGStep(V, first=first)
    used = _spied(monkeypatch)
    fused = pcg_block((data, step), (1, A[300:], None, y[300:]), Workspace())
    monkeypatch.setattr(conjugate_gradient, "FUSE_KERNEL_PRODUCT", False)
    plain = pcg_block((data, step), (1, A[300:], None, y[300:]), Workspace())
    assert used == ([] if first else [True])
    assert fused.keys() == plain.keys()
    for key in plain:
        np.testing.assert_array_equal(fused[key], plain[key])


def _spied(monkeypatch) -> list:
    """Whether each block took the fused product (True) or fell back (False), in order."""
    used = []

    def spy(*args):
        out = fused_block_product(*args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(conjugate_gradient, "fused_block_product", spy)
    return used


def _fit_twice(monkeypatch, make, X, y):
    """``make()`` fitted with the fusion on (counting the fused blocks) and off."""
    used = _spied(monkeypatch)
    fused = make().fit(X, y)
    monkeypatch.setattr(conjugate_gradient, "FUSE_KERNEL_PRODUCT", False)
    plain = make().fit(X, y)
    return fused, plain, used


def test_fit_bitwise_with_and_without_fusion(monkeypatch):
    """SketchedKRR by PCG, float32 blocks of 2000 rows (the last 500), 800 landmarks: kernel
    tiles of 655 rows, product tiles of 327, rings of 1310 rows that wrap. Coefficients and
    predictions bitwise equal; every iteration's blocks were fused."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(4500, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=4500)
    opts = ds.EngineOptions(block_rows=2000)

    def make():
        return ds.SketchedKRR(ds.Gaussian(gamma=0.3), sketch=ds.SubSampling(800), lam=1e-4,
                              solver="pcg", tol=1e-6, max_iter=100, random_state=0,
                              options=opts)
    fused, plain, used = _fit_twice(monkeypatch, make, X, y)
    assert used and all(used)
    np.testing.assert_array_equal(fused.predict(X[:300]), plain.predict(X[:300]))


def test_fit_repeated_landmarks_bitwise(monkeypatch):
    """Repeated rows (sub-sampled landmarks repeat; PCG solves in the distinct ones), a
    SketchedRegressor's centred system and a Laplacian fit (not fused): bitwise equal."""
    X, y = repeated()
    for make, fusable in [
        (lambda: ds.SketchedKRR(ds.Gaussian(gamma=0.2), sketch=ds.SubSampling(100), lam=1e-6,
                                solver="pcg", tol=1e-8, random_state=0), True),
        (lambda: ds.SketchedRegressor(ds.Gaussian(gamma=0.2), loss="squared",
                                      sketch=ds.SubSampling(100), lam=1e-6, solver="pcg",
                                      tol=1e-8, random_state=0), True),
        (lambda: ds.SketchedKRR(ds.Laplacian(gamma=0.2), sketch=ds.SubSampling(100),
                                lam=1e-6, solver="pcg", tol=1e-8, random_state=0), False),
    ]:
        fused, plain, used = _fit_twice(monkeypatch, make, X, y)
        monkeypatch.undo()
        assert used and all(u == fusable for u in used)
        np.testing.assert_array_equal(fused.predict(X[:60]), plain.predict(X[:60]))
