"""Decoding at scale: distributed top-k == brute force, per-query sets, candidate stores."""

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.engine.features import FeatureMap
from distsketch.linalg import topk
from distsketch.linalg.topk import merge_topk, smallest_k

KX, KY = ds.Gaussian(gamma=0.5), ds.Gaussian(gamma=0.3)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 5))
    Y = (rng.random((300, 10)) < 0.35).astype(float)
    model = ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(80), output_sketch=ds.SubSampling(40),
                      lam=1e-3, random_state=0).fit(X, Y)
    Xq = rng.normal(size=(25, 5))
    C = (rng.random((3000, 10)) < 0.35).astype(float)
    C[1500:1600] = C[100:200]  # exact duplicates: ties must go to the lower index
    return model, Xq, C


def brute_topk(model, Xq, C, k):
    """Dense scores, then the k smallest per row with ties by lower index; −1/+inf padding."""
    S = model.score_candidates(Xq, C)
    order = np.lexsort((np.broadcast_to(np.arange(S.shape[1]), S.shape), S), axis=1)[:, :k]
    idx, sc = order, np.take_along_axis(S, order, axis=1)
    if k > S.shape[1]:
        pad = k - S.shape[1]
        idx = np.pad(idx, ((0, 0), (0, pad)), constant_values=-1)
        sc = np.pad(sc, ((0, 0), (0, pad)), constant_values=np.inf)
    return idx, sc


def assert_topk_equal(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)


@pytest.fixture
def small_blocks(monkeypatch):
    """Force many tasks and many scoring sub-blocks on small data."""
    monkeypatch.setattr(topk, "SCORE_ROWS", 64)


# --------------------------------------------------------------------------- block math


@pytest.mark.parametrize("k", [1, 3, 7, 12])
def test_smallest_k_with_ties_matches_full_sort(k):
    rng = np.random.default_rng(0)
    S = rng.integers(0, 4, size=(50, 9)).astype(float)  # many exact ties
    index = np.arange(100, 109)
    idx, vals = smallest_k(S, k, index)
    for r in range(50):
        order = np.lexsort((index, S[r]))[:k]
        want = np.concatenate([index[order], -np.ones(max(0, k - 9), int)])
        np.testing.assert_array_equal(idx[r], want)
        np.testing.assert_array_equal(vals[r][: min(k, 9)], S[r, order])
        assert np.isinf(vals[r][9:]).all()


def test_merge_topk_is_order_independent():
    rng = np.random.default_rng(1)
    S = rng.integers(0, 5, size=(20, 60)).astype(float)
    index = np.arange(60)
    whole = smallest_k(S, 6, index)
    parts = [smallest_k(S[:, a:a + 13], 6, index[a:a + 13]) for a in range(0, 60, 13)]
    for perm in (parts, parts[::-1], parts[2:] + parts[:2]):
        got = merge_topk(*perm, k=6)
        np.testing.assert_array_equal(got[0], whole[0])
        np.testing.assert_array_equal(got[1], whole[1])


# --------------------------------------------------------------------------- fixed sets


@pytest.mark.parametrize("k", [1, 5])
@pytest.mark.parametrize("kind", ["numpy", "dask", "zarr", "store"])
def test_fixed_topk_equals_brute_force(tmp_path, fitted, small_blocks, kind, k):
    model, Xq, C = fitted
    model.set_params(options=ds.EngineOptions(candidate_rows=257))
    if kind == "dask":
        cands = da.from_array(C, chunks=(700, 10))
    elif kind == "zarr":
        cands = zarr.create_array(str(tmp_path / "c.zarr"), shape=C.shape, chunks=(300, 10), dtype=C.dtype)
        cands[:] = C
    elif kind == "store":
        cands = ds.CandidateStore.create(tmp_path / "store", C, chunk_rows=333)
    else:
        cands = C
    got = model.predict_topk(Xq, cands, k=k)
    assert got[0].shape == got[1].shape == (len(Xq), k)
    assert_topk_equal(got, brute_topk(model, Xq, C, k))
    model.set_params(options=None)


def test_duplicate_candidates_resolve_to_lower_index(fitted):
    model, Xq, C = fitted
    U = np.unique(C, axis=0)[:50]
    dup = np.concatenate([U, U])  # every (distinct) candidate twice
    idx, sc = model.predict_topk(Xq, dup, k=2)
    assert (idx[:, 0] < 50).all() and (idx[:, 1] == idx[:, 0] + 50).all()
    np.testing.assert_array_equal(sc[:, 0], sc[:, 1])


@pytest.mark.parametrize("q", [1, 3, 16, 37])  # a matrix-vector product, and GEMMs
def test_equal_rows_anywhere_in_a_tile_give_bitwise_equal_results(q):
    """One candidate repeated ``c`` times, ``c`` across BLAS micro-tile edges: its features
    (:meth:`FeatureMap.tiles`), folded rows (:func:`fold_candidates`) and scores
    (:func:`topk.score_topk`, padded tiles and whole sets) are bitwise equal at every position,
    so the top-k is the first ``k`` copies. With OpenBLAS's SkylakeX kernels the last
    ``c mod 16`` rows of a product came out an ulp apart before tiles were aligned
    (:data:`distsketch.linalg.blocks.TILE_ALIGN`)."""
    from distsketch.decoding.preimage import fold_candidates

    rng = np.random.default_rng(q)
    fmap = FeatureMap(KY, rng.random((30, 10)), rng.normal(size=(30, 12)))
    y = (rng.random(10) < 0.4).astype(float)
    for c in (5, 50, 130, 350, 1000):
        phi = fmap.tiles(np.repeat(y[None], c, axis=0), rows=100)
        assert (phi == phi[:1]).all(), c
        for M in (rng.normal(size=(12, 7)), rng.normal(size=(12, 200))):
            Z = fold_candidates(phi, M, rows=100)
            assert (Z == Z[:1]).all(), (c, M.shape)
        for r in (9, 40, 200):
            G, f = rng.normal(size=(q, r)), rng.normal(size=r)
            F = np.repeat(f[None], c, axis=0)
            for pad in (False, True) if c <= 400 else (True,):  # unpadded: one whole set
                idx, sc = topk.score_topk(G, F, np.full(c, 0.5), min(c, 20),
                                          np.arange(c, dtype=np.int64), pad=pad, rows=400)
                assert (sc == sc[:, :1]).all(), (c, r, pad)
                np.testing.assert_array_equal(idx, np.broadcast_to(np.arange(idx.shape[1]),
                                                                   idx.shape))


def test_fewer_candidates_than_k_pads(fitted):
    model, Xq, C = fitted
    idx, sc = model.predict_topk(Xq, C[:3], k=5)
    assert (idx[:, 3:] == -1).all() and np.isinf(sc[:, 3:]).all()
    assert_topk_equal((idx, sc), brute_topk(model, Xq, C[:3], 5))


def test_default_candidates_and_predict_rows(fitted):
    model, Xq, C = fitted
    idx, sc = model.predict_topk(Xq, k=3)
    assert_topk_equal((idx, sc), brute_topk(model, Xq, model.candidates_, 3))
    np.testing.assert_array_equal(model.predict(Xq), model.candidates_[idx[:, 0]])
    best = model.predict_topk(Xq, C)[0][:, 0]
    np.testing.assert_array_equal(model.predict(Xq, C), C[best])


@pytest.mark.slow
@pytest.mark.cluster
def test_threads_and_local_cluster_agree(tmp_path, fitted, small_blocks):
    distributed = pytest.importorskip("distributed")
    model, Xq, C = fitted
    model.set_params(options=ds.EngineOptions(candidate_rows=500))
    sets = [C[a:b] for a, b in ((0, 2), (2, 1900), (1900, 1910), (1910, 3000))]
    qs = np.arange(len(Xq)) % 4
    want_fixed = model.predict_topk(Xq, C, k=4)
    want_sets = model.predict_topk(Xq, k=4, candidate_sets=sets, query_sets=qs)
    store = ds.CandidateStore.create(tmp_path / "s", C, chunk_rows=500)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        assert_topk_equal(model.predict_topk(Xq, C, k=4), want_fixed)
        assert_topk_equal(model.predict_topk(Xq, store, k=4), want_fixed)
        assert_topk_equal(model.predict_topk(Xq, k=4, candidate_sets=sets, query_sets=qs), want_sets)
    model.set_params(options=None)


# --------------------------------------------------------------------------- per-query sets


@pytest.mark.slow
def test_per_query_sets_of_very_different_lengths_match_each_query_alone(tmp_path, fitted):
    model, Xq, C = fitted
    rng = np.random.default_rng(5)
    sizes = [2, 10_000, 7, 300, 1, 4096, 4097, 33]
    sets = [(rng.random((s, 10)) < 0.35).astype(float) for s in sizes]
    sets[3][100:110] = sets[3][:10]  # ties inside a set
    qs = rng.integers(0, len(sizes), size=len(Xq))
    qs[:len(sizes)] = np.arange(len(sizes))  # every set used at least once
    model.set_params(options=ds.EngineOptions(candidate_rows=1000))  # splits the 10 000 and 4096+ sets
    k = 3
    got = model.predict_topk(Xq, k=k, candidate_sets=sets, query_sets=qs)
    store = ds.CandidateStore.create(tmp_path / "ragged", sets=sets, query_sets=qs, chunk_rows=1000)
    from_store = model.predict_topk(Xq, k=k, candidate_sets=store)  # the store's own query_sets
    for q in range(len(Xq)):
        alone = brute_topk(model, Xq[q:q + 1], sets[qs[q]], k)
        np.testing.assert_array_equal(got[0][q], alone[0][0])
        np.testing.assert_allclose(got[1][q], alone[1][0], rtol=1e-12, atol=1e-12)
    assert_topk_equal(from_store, got)
    rows = model.predict(Xq, candidate_sets=sets, query_sets=qs)
    for q in range(len(Xq)):
        np.testing.assert_array_equal(rows[q], sets[qs[q]][got[0][q, 0]])
    np.testing.assert_array_equal(model.predict(Xq, candidate_sets=store), rows)
    model.set_params(options=None)


def test_sets_no_query_uses_are_not_read(fitted, feature_rows):
    """Queries use sets 0 and 2; the 1990-row set 1 between them is never featurised."""
    model, Xq, C = fitted
    sets = [C[:10], C[10:2000], C[2000:2010]]
    seen = feature_rows()
    model.set_params(options=ds.EngineOptions(candidate_rows=100))
    got = model.predict_topk(Xq[:4], candidate_sets=sets, query_sets=np.array([0, 0, 2, 2]), k=2)
    model.set_params(options=None)
    assert sorted(seen) == [10, 10]
    assert_topk_equal((got[0][:2], got[1][:2]), brute_topk(model, Xq[:2], sets[0], 2))


# --------------------------------------------------------------------------- candidate stores


def test_store_features_are_computed_once_per_model(tmp_path, fitted, monkeypatch):
    model, Xq, C = fitted
    store = ds.CandidateStore.create(tmp_path / "s", C, chunk_rows=500)
    assert store.cached_features(model.output_key_) is None
    first = model.predict_topk(Xq, store, k=2)
    assert store.cached_features(model.output_key_) is not None

    def refuse(self, Y, **kw):
        raise AssertionError("features recomputed")

    monkeypatch.setattr(FeatureMap, "tiles", refuse)
    reopened = ds.CandidateStore.open(tmp_path / "s")
    model.set_lam(1e-2)  # λ does not change candidate features
    again = model.predict_topk(Xq, reopened, k=2)
    model.set_lam(1e-3)
    assert again[0].shape == first[0].shape
    monkeypatch.undo()
    other = ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(80), output_sketch=ds.SubSampling(41),
                      lam=1e-3, random_state=0).fit(*_train(fitted))
    assert other.output_key_ != model.output_key_
    assert_topk_equal(other.predict_topk(Xq, reopened, k=2), brute_topk(other, Xq, C, 2))


def _train(fitted):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 5))
    Y = (rng.random((300, 10)) < 0.35).astype(float)
    return X, Y


def test_interrupted_feature_pass_resumes(tmp_path, fitted, monkeypatch):
    model, Xq, C = fitted
    store = ds.CandidateStore.create(tmp_path / "s", C, chunk_rows=300)  # 10 blocks
    calls = {"n": 0}
    original = FeatureMap.tiles

    def flaky(self, Y, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("simulated failure")
        return original(self, Y, **kw)

    monkeypatch.setattr(FeatureMap, "tiles", flaky)
    with dask.config.set(scheduler="synchronous"), pytest.raises(RuntimeError, match="simulated"):
        model.predict_topk(Xq, store, k=2)
    done = np.asarray(store.group[f"features/{model.output_key_}/done"][:])
    assert done.sum() == 3 and store.cached_features(model.output_key_) is None
    calls["n"] = -100  # no more failures; count the blocks computed on resume
    got = model.predict_topk(Xq, store, k=2)
    assert calls["n"] == -100 + 7
    assert_topk_equal(got, brute_topk(model, Xq, C, 2))


def test_candidate_store_from_files_and_dask(tmp_path, fitted):
    model, Xq, C = fitted
    np.save(tmp_path / "a.npy", C[:40])
    np.save(tmp_path / "b.npy", C[40:100])
    store = ds.CandidateStore.create(tmp_path / "f", sets=[tmp_path / "a.npy", tmp_path / "b.npy"])
    assert store.kind == "ragged" and store.n_sets == 2
    np.testing.assert_array_equal(store.offsets, [0, 40, 100])
    fixed = ds.CandidateStore.create(tmp_path / "d", da.from_array(C, chunks=(999, 10)), chunk_rows=256)
    np.testing.assert_array_equal(fixed.candidates[:], C)
    assert fixed.kind == "fixed" and fixed.chunk_rows == 256
    with pytest.raises(ValueError, match="exists; pass overwrite=True"):
        ds.CandidateStore.create(tmp_path / "d", C)
    ds.CandidateStore.create(tmp_path / "d", C[:10], overwrite=True)
    assert ds.CandidateStore.open(tmp_path / "d").n_candidates == 10


# --------------------------------------------------------------------------- bad input


def test_bad_decoding_input(tmp_path, fitted):
    model, Xq, C = fitted
    sets = [C[:5], C[5:9]]
    cases = [
        (dict(candidates=C[:, :9]), r"^candidates: rows have 9 columns but the model was fitted on outputs with 10"),
        (dict(candidates=C[:0]), r"^candidates: found array with 0 sample"),
        (dict(candidates=C, k=0), r"^k: the number of candidates to return must be a positive integer"),
        (dict(candidates=C, k=-2), r"^k: "),
        (dict(candidates=C, k=1.5), r"^k: "),
        (dict(candidate_sets=[C[:5], C[:0]], query_sets=np.zeros(len(Xq), int)),
         r"^candidate_sets\[1\]: empty candidate set"),
        (dict(candidate_sets=[C[:5], C[:3, :4]], query_sets=np.zeros(len(Xq), int)),
         r"^candidate_sets\[1\]: rows have 4 columns"),
        (dict(candidate_sets=sets, query_sets=np.full(len(Xq), 2)),
         r"^query_sets: query 0 points at set 2, but there are only 2 candidate sets"),
        (dict(candidate_sets=sets, query_sets=np.full(len(Xq), -1)), r"^query_sets: query 0 points at set -1"),
        (dict(candidate_sets=sets, query_sets=np.zeros(3, int)), r"^query_sets: has 3 entries but there are 25 queries"),
        (dict(candidate_sets=sets), r"^query_sets: required with candidate_sets"),
        (dict(candidates=C, candidate_sets=sets), r"give one candidate set for all queries"),
        (dict(candidate_sets=[]), r"^candidate_sets: no candidate sets given"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            model.predict_topk(Xq, **kwargs)
    fixed = ds.CandidateStore.create(tmp_path / "f", C)
    ragged = ds.CandidateStore.create(tmp_path / "r", sets=sets)
    with pytest.raises(ValueError, match="holds one fixed set; pass it as candidates="):
        model.predict_topk(Xq, candidate_sets=fixed, query_sets=np.zeros(len(Xq), int))
    with pytest.raises(ValueError, match="holds per-query sets; pass it as candidate_sets="):
        model.predict_topk(Xq, ragged)
    narrow = ds.CandidateStore.create(tmp_path / "n", C[:, :4])
    with pytest.raises(ValueError, match="the store's rows have 4 columns"):
        model.predict_topk(Xq, narrow)
    with pytest.raises(ValueError, match=r"^sets: set 1 is empty"):
        ds.CandidateStore.create(tmp_path / "e", sets=(C[:5], np.array([0, 5, 5])))
    with pytest.raises(ValueError, match="give exactly one of candidates"):
        ds.CandidateStore.create(tmp_path / "x")
