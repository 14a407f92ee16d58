"""FeatureMap: the kernelised side every pass, prediction and saved model uses."""

import pickle
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.engine.features import FeatureMap
from distsketch.linalg.blocks import gram_dot


@pytest.fixture
def fmap():
    rng = np.random.default_rng(0)
    L, P = rng.normal(size=(30, 4)), rng.normal(size=(30, 6))
    return FeatureMap(ds.Gaussian(0.3), L, P, chunk=7)


def test_block_transform_tiles_and_diag_are_the_block_product(fmap, tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    want = gram_dot(fmap.kernel, X, fmap.landmarks, right=fmap.projection, chunk=7)
    np.testing.assert_array_equal(fmap.block(X), want)
    assert fmap.width == 6 and fmap.n_features_in == 4
    # blockwise on all cores, dask in → dask out, zarr in → numpy out: the same values
    np.testing.assert_allclose(fmap.transform(X), want, rtol=1e-13, atol=1e-13)
    lazy = fmap.transform(da.from_array(X, chunks=(70, 4)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), want, rtol=1e-13, atol=1e-13)
    z = zarr.create_array(str(tmp_path / "x.zarr"), shape=X.shape, chunks=(64, 4), dtype="f8")
    z[:] = X
    np.testing.assert_allclose(fmap.transform(z), want, rtol=1e-13, atol=1e-13)
    post = rng.normal(size=(6, 2))
    np.testing.assert_allclose(fmap.transform(X, post=post), want @ post, rtol=1e-12, atol=1e-12)
    # fixed-shape tiles: equal rows get bitwise-equal features wherever they sit
    Y = np.vstack([X[:5], X[:5][::-1], X])
    T = fmap.tiles(Y, rows=64)
    np.testing.assert_array_equal(T[:5], T[5:10][::-1])
    np.testing.assert_allclose(T[10:], want, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(fmap.tiles(Y, rows=64, parallel=True), T)
    np.testing.assert_allclose(fmap.diag(X), np.ones(300))
    with pytest.raises(ValueError, match="X has 3 features, but the model is expecting 4"):
        fmap.transform(X[:, :3])


@pytest.mark.slow
def test_key_is_stable_across_processes_and_names_what_changes_features(fmap, tmp_path):
    """The key (a cache key of candidate features) is a content hash: the same in another
    process, independent of the engine's chunk, different for another kernel, landmarks or
    projection."""
    np.savez(tmp_path / "m.npz", L=fmap.landmarks, P=fmap.projection)
    code = ("import numpy as np, distsketch as ds; from distsketch.engine.features import FeatureMap; "
            f"z = np.load({str(tmp_path / 'm.npz')!r}); "
            "print(FeatureMap(ds.Gaussian(0.3), z['L'], z['P'], chunk=2048).key)")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert other == fmap.key == pickle.loads(pickle.dumps(fmap)).key
    L, P = fmap.landmarks, fmap.projection
    assert FeatureMap(ds.Gaussian(0.31), L, P).key != fmap.key
    assert FeatureMap(ds.Gaussian(0.3), L[:-1], P[:-1]).key != fmap.key
    assert FeatureMap(ds.Gaussian(0.3), L, 2 * P).key != fmap.key
    assert FeatureMap(ds.Gaussian(0.3), L, None).key != fmap.key


def test_a_realised_sketch_as_projection_gives_the_pass_block():
    """``FeatureMap(kernel, X_J, R)``: its block is the pass's ``C_I = k(X_I, X_J) R_mixᵀ``."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(80, 3))
    R = ds.CountSketch(9).realize(80, seed=4)
    f = FeatureMap(ds.Laplacian(0.5), X[R.support], R, chunk=11)
    assert f.width == 9
    want = ds.Laplacian(0.5)(X[:20], X) @ R.matrix().toarray().T
    np.testing.assert_allclose(f.block(X[:20]), want, rtol=1e-12, atol=1e-14)
    assert f.key != FeatureMap(ds.Laplacian(0.5), X[R.support], ds.CountSketch(9).realize(
        80, seed=5)).key


def _repeated_rows(n=60, d=3, seed=3):
    """Rows drawn from 12 distinct ones (a label set's repeats), -0.0 in one copy."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2, size=(12, d)).astype(float)
    base[0] = 0.0
    X = base[rng.integers(0, 12, size=n)]
    X[np.flatnonzero((X == 0).all(axis=1))[-1]] = -0.0  # equal to +0.0 as a landmark
    return X


def test_distinct_rows_equal_a_brute_force():
    from distsketch.linalg.blocks import distinct_rows

    X = _repeated_rows()
    first, inverse = distinct_rows(X)
    seen = {}
    for i, row in enumerate(X):
        seen.setdefault(tuple(row + 0.0), i)
    np.testing.assert_array_equal(first, sorted(seen.values()))
    np.testing.assert_array_equal(X[first][inverse] + 0.0, X + 0.0)
    assert (np.diff(first) > 0).all()


@pytest.mark.parametrize("projection", ["psparsified", "gaussian", "dense"])
@pytest.mark.parametrize("chunk", [5, 2048])
def test_repeated_landmarks_are_merged_to_the_same_features(projection, chunk):
    """A repeated landmark's kernel column is computed once (``FeatureMap._merged``): the
    features equal the unmerged block product to the rounding of the summed projection rows,
    for mixed sketches and dense projections, at any chunk."""
    X = _repeated_rows()
    A = np.random.default_rng(5).normal(size=(17, 3))
    kernel = ds.Gaussian(0.7)
    if projection == "dense":
        L, P = X, np.random.default_rng(6).normal(size=(len(X), 4))
        want = gram_dot(kernel, A, L, right=P, chunk=chunk)
    else:
        sketch = (ds.PSparsified(7, p=0.3) if projection == "psparsified"
                  else ds.GaussianSketch(7)).realize(len(X), seed=1)
        L, P = X[sketch.support], sketch
        want = gram_dot(kernel, A, L, P, chunk=chunk)
    f = FeatureMap(kernel, L, P, chunk=chunk)
    L_u, _ = f._merged
    assert len(L_u) < len(L) and len(np.unique(L_u + 0.0, axis=0)) == len(L_u)
    got = f.block(A)
    # each output sums at most len(L) products of kernel values ≤ 1 with the projection's
    # entries: merging reorders that sum, so the difference is rounding of its absolute sum
    mix = P if projection == "dense" else P.mixing.T
    scale = np.abs(kernel(A, L)) @ np.abs(mix.toarray() if hasattr(mix, "toarray") else mix)
    assert np.all(np.abs(got - want) <= 4 * len(L) * np.finfo(float).eps * scale)
    assert f.width == want.shape[1]


def test_merge_leaves_what_it_cannot_merge():
    """No merge without repeats, for sparse landmarks, without a projection and for a
    diagonal sketch (each feature is one scaled kernel column)."""
    import scipy.sparse as sp

    X = _repeated_rows()
    kernel = ds.Gaussian(0.7)
    P = np.ones((len(X), 2))
    assert FeatureMap(kernel, X, None)._merged is None
    assert FeatureMap(kernel, sp.csr_array(X), P)._merged is None
    sub = ds.SubSampling(20).realize(len(X), seed=0)
    assert FeatureMap(kernel, X[sub.support], sub)._merged is None
    distinct = np.random.default_rng(0).normal(size=(10, 3))
    assert FeatureMap(kernel, distinct, np.ones((10, 2)))._merged is None
