"""Folded decoding (docs/design/decoding.md, "Folded decoding"): one product per query, same top-k.

The folded routes score ``φ_X(x)ᵀ Z`` (``Z = φ_Y(C) W``) or ``k_X(L, x)ᵀ Z`` (``Z = φ_Y(C) W Pᵀ``)
instead of ``φ_Y(C) (W φ_X(x))``: the same numbers in another association order, so scores
agree to rounding (float64: a few ulps of the largest term, far below the 1e-10 asked) and the
top-k indices are identical away from near-ties.
"""

import numpy as np
import pytest

import distsketch as ds
import distsketch.decoding.routes as decoding
from distsketch.decoding import preimage as decode
from distsketch.decoding.preimage import decode_fixed, fold_costs, fold_route
from distsketch.engine.features import FeatureMap
from distsketch.linalg import topk
from reference.closed_forms import iokr_scores

KX, KY = ds.Gaussian(gamma=0.5), ds.Gaussian(gamma=0.3)
SIDES = {"IOKR": (None, None),
         "SIOKR": (lambda: ds.SubSampling(80), None),
         "ISOKR": (None, lambda: ds.SubSampling(40)),
         "SISOKR": (lambda: ds.SubSampling(80), lambda: ds.SubSampling(40))}
ROUTES = ("unfolded", "coef", "features", "kernel")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(240, 5))
    Y = (rng.random((240, 9)) < 0.35).astype(float)
    Xq = rng.normal(size=(37, 5))
    C = (rng.random((700, 9)) < 0.35).astype(float)
    C[400:450] = C[10:60]  # exact duplicates: ties go to the lower index on every route
    return X, Y, Xq, C


def fit(name, X, Y, **kw):
    inp, out = SIDES[name]
    return ds.SISOKR(KX, KY, input_sketch=inp and inp(), output_sketch=out and out(),
                     random_state=0, **{"lam": 1e-3, **kw}).fit(X, Y)


def routed(model, route, *args, **kw):
    """``predict_topk`` on a forced route."""
    model._fold = route
    try:
        return model.predict_topk(*args, **kw)
    finally:
        model._fold = None


def assert_same_topk(got, want, rtol=1e-10):
    """Scores to ``rtol`` of the row's largest |score|; indices equal wherever the reference's
    neighbouring scores are apart by more than that tolerance (away from near-ties)."""
    gi, gs = got
    wi, ws = want
    scale = np.abs(ws).max(axis=1, keepdims=True)
    assert (np.abs(gs - ws) <= rtol * scale).all(), np.abs(gs - ws).max() / scale.min()
    gap = np.diff(ws, axis=1)
    tol = 2 * rtol * scale
    clear = np.ones(ws.shape, bool)
    clear[:, 1:] &= (gap > tol) | (gap == 0)  # exact ties (duplicates) must match as well
    clear[:, :-1] &= (gap > tol) | (gap == 0)
    np.testing.assert_array_equal(gi[clear], wi[clear])
    assert clear.mean() > 0.9  # the comparison is not vacuous


# --------------------------------------------------------------------------- equal results


@pytest.mark.slow
@pytest.mark.parametrize("rank", [None, 3])
@pytest.mark.parametrize("name", list(SIDES))
def test_folded_routes_equal_unfolded(tmp_path, data, name, rank):
    X, Y, Xq, C = data
    model = fit(name, X, Y, rank=rank)
    store = ds.CandidateStore.create(tmp_path / "c", C, chunk_rows=256)
    for cands in (None, C, store):
        want = routed(model, "unfolded", Xq, cands, k=6)
        for route in ROUTES[1:]:
            assert_same_topk(routed(model, route, Xq, cands, k=6), want)
    # the dense reference: score_candidates (the unfolded formula, every candidate)
    S = model.score_candidates(Xq, C)
    got = routed(model, "features", Xq, C, k=6)
    np.testing.assert_allclose(got[1], np.sort(S, axis=1)[:, :6], rtol=0,
                               atol=1e-10 * np.abs(S).max())
    for route in ROUTES:  # predictions: the best rows
        model._fold = route
        pred = model.predict(Xq)
        model._fold = None
        np.testing.assert_array_equal(pred, model.candidates_[routed(model, "unfolded", Xq, k=1)[0][:, 0]])


@pytest.mark.parametrize("name", ["SIOKR", "SISOKR"])
def test_per_query_sets_with_the_coef_fold(tmp_path, data, name):
    """Ragged sets: ``g(x) = Mᵀ k_X(L, x)`` (``"coef"``) gives the unfolded top-k."""
    X, Y, Xq, C = data
    model = fit(name, X, Y, rank=4)
    sets = [C[:50], C[50:400], C[400:]]
    qs = np.arange(len(Xq)) % 3
    want = routed(model, "unfolded", Xq, k=4, candidate_sets=sets, query_sets=qs)
    store = ds.CandidateStore.create(tmp_path / "r", sets=sets, query_sets=qs)
    for cands in (sets, store):
        assert_same_topk(routed(model, "coef", Xq, k=4, candidate_sets=cands, query_sets=qs), want)
    assert list(model._fold_cache()) == [(None, "coef")]
    assert model._surrogate().ragged_route(len(Xq)) == "coef"  # s·r_Y < s·r_X + r_X·r_Y with M cached


def test_iokr_folded_equals_closed_form(data):
    """IOKR: ``score(x, c) = k_Y(c, c) − 2 k_X(x, X) (K_X + nλI)⁻¹ K_Y(Y, c)`` (dense numpy)."""
    X, Y, Xq, C = data
    lam = 1e-3
    model = fit("IOKR", X, Y, lam=lam)
    S = iokr_scores(KX, KY, X, Y, Xq, C, lam)
    got = routed(model, "features", Xq, C, k=4)
    np.testing.assert_allclose(got[1], np.sort(S, axis=1)[:, :4], rtol=0, atol=1e-8 * np.abs(S).max())


def test_duplicates_tie_to_lower_index_when_folded(data):
    X, Y, Xq, C = data
    model = fit("SISOKR", X, Y)
    Cd = np.concatenate([C[:5], C[:5]])  # rows 5..9 duplicate rows 0..4
    for route in ROUTES:
        idx, sc = routed(model, route, Xq, Cd, k=10)
        first = idx[:, ::2]
        np.testing.assert_array_equal(idx[:, 1::2], first + 5)  # tie pairs: lower index first
        np.testing.assert_array_equal(sc[:, ::2], sc[:, 1::2])


# --------------------------------------------------------------------------- the cache


@pytest.mark.slow
def test_cache_follows_lam_rank_and_store(tmp_path, data, monkeypatch):
    X, Y, Xq, C = data
    model = fit("SISOKR", X, Y, lam=[1e-3, 1e-1])
    store = ds.CandidateStore.create(tmp_path / "c", C, chunk_rows=256)
    calls = []
    real = decoding.fold_candidates
    monkeypatch.setattr(decoding, "fold_candidates", lambda *a, **k: calls.append(1) or real(*a, **k))

    def check(cands):
        assert_same_topk(routed(model, "features", Xq, cands, k=5),
                         routed(model, "unfolded", Xq, cands, k=5))

    first = routed(model, "features", Xq, store, k=5)
    routed(model, "features", Xq, store, k=5)
    assert len(calls) == 1  # folded once for the store, then reused
    routed(model, "features", Xq, k=5)
    routed(model, "features", Xq, k=5)
    assert len(calls) == 2  # the default candidates: their own entry
    model.set_lam(1e-1)
    assert model._fold_cache() == {}
    check(store)
    assert not np.array_equal(routed(model, "features", Xq, store, k=5)[1], first[1])
    assert len(calls) == 3
    model.set_rank(2)
    assert model._fold_cache() == {}
    check(store)
    check(None)
    model.set_lam(1e-3)
    model.set_rank(None)
    np.testing.assert_array_equal(routed(model, "features", Xq, store, k=5)[1], first[1])
    routed(model, "features", Xq, C, k=5)
    routed(model, "features", Xq, C, k=5)
    n = len(calls)
    routed(model, "features", Xq, C, k=5)
    assert len(calls) == n + 1  # an array is not cached: folded per call


def test_dask_candidates_are_not_folded_but_coef_is(data):
    da = pytest.importorskip("dask.array")
    X, Y, Xq, C = data
    model = fit("SISOKR", X, Y)
    want = routed(model, "unfolded", Xq, C, k=4)
    lazy = da.from_array(C, chunks=(300, C.shape[1]))
    for route in ROUTES:
        assert_same_topk(routed(model, route, Xq, lazy, k=4), want)
    route = model._surrogate().fixed_route(len(Xq), len(C), None, foldable=False)
    assert route in ("unfolded", "coef")
    assert list(model._fold_cache()) == [(None, "coef")]  # nothing of the candidates kept


def test_rewritten_store_is_folded_again(tmp_path, data):
    """A store rewritten at the same path (new contents) does not reuse the old fold."""
    X, Y, Xq, C = data
    model = fit("SISOKR", X, Y)
    routed(model, "features", Xq, ds.CandidateStore.create(tmp_path / "c", C), k=3)
    new = ds.CandidateStore.create(tmp_path / "c", C[::-1].copy(), overwrite=True)
    reopened = ds.CandidateStore.open(tmp_path / "c")
    assert reopened.token == new.token
    assert_same_topk(routed(model, "features", Xq, reopened, k=3),
                     routed(model, "unfolded", Xq, C[::-1].copy(), k=3))


def test_refit_invalidates_cache(data):
    X, Y, Xq, C = data
    model = fit("SISOKR", X, Y)
    routed(model, "kernel", Xq, k=3)
    routed(model, "coef", Xq, k=3)
    assert len(model._fold_cache()) == 2
    model.set_params(lam=1e-1).fit(X, Y)
    assert model._fold_cache() == {}
    for route in ("coef", "kernel"):
        assert_same_topk(routed(model, route, Xq, k=3), routed(model, "unfolded", Xq, k=3))


# --------------------------------------------------------------------------- the rule


def test_fold_costs_formulas():
    c = fold_costs(n_queries=10, n_candidates=50, n_landmarks=30, r_x=20, r_y=7, projected=True)
    assert c == {"unfolded": 10 * (30 * 20 + 20 * 7 + 50 * 7),
                 "coef": 10 * (30 * 7 + 50 * 7) + 30 * 20 * 7,
                 "features": 10 * (30 * 20 + 50 * 20) + 50 * 7 * 20,
                 "kernel": 10 * 50 * 30 + 30 * 20 * 7 + 50 * 7 * 30}
    c = fold_costs(n_queries=10, n_candidates=50, n_landmarks=20, r_x=20, r_y=7, projected=False,
                   cached=("features",))
    assert c == {"unfolded": 10 * (20 * 7 + 50 * 7), "features": 10 * 50 * 20}


@pytest.mark.parametrize("kw, cached, want", [
    # IOKR-shaped (r_X = r_Y = n, exact input): folding pays even with its once-cost
    (dict(n_candidates=2058, n_landmarks=4880, r_x=4880, r_y=4880, projected=False), (), "features"),
    # one query, nothing cached: the once-cost n_c·r_Y·r_X is not repaid
    (dict(n_queries=1, n_candidates=2058, n_landmarks=4880, r_x=4880, r_y=4880, projected=False),
     (), "unfolded"),
    (dict(n_queries=1, n_candidates=2058, n_landmarks=4880, r_x=4880, r_y=4880, projected=False),
     ("features",), "features"),
    # many candidates, a small output rank: n_c·r_X ≫ r_X·r_Y + n_c·r_Y
    (dict(n_candidates=100_000, n_landmarks=2000, r_x=2000, r_y=100, projected=False), (),
     "unfolded"),
    # the same with a projection: fold it into the coefficients (s·r_Y ≪ s·r_X)
    (dict(n_candidates=100_000, n_landmarks=2000, r_x=2000, r_y=100, projected=True), (), "coef"),
    # Bibtex SISOKR-shaped (s = 2 250, r_X = 2 247, r_Y = 180): "coef"
    (dict(n_candidates=2058, n_landmarks=2250, r_x=2247, r_y=180, projected=True), (), "coef"),
    # few candidates, few landmarks, a large output rank: fold everything into Z
    (dict(n_candidates=50, n_landmarks=100, r_x=100, r_y=1000, projected=True), (), "kernel"),
])
def test_rule_picks_each_route(kw, cached, want):
    kw = {"n_queries": 2515, **kw}
    assert fold_route(**kw, cached=cached) == want
    costs = fold_costs(**kw, cached=cached)
    assert costs[want] == min(costs.values())


def test_rule_respects_memory():
    kw = dict(n_queries=2515, n_candidates=2058, n_landmarks=4880, r_x=4880, r_y=4880,
              projected=False)
    assert fold_route(**kw) == "features"
    assert fold_route(**kw, memory=8 * 2058 * 4880 - 1) == "unfolded"


def test_model_takes_the_rule_route(data, monkeypatch):
    """The route the model takes is the rule's, with its own sizes (and the cache)."""
    X, Y, Xq, C = data
    seen = []
    real = decoding.fold_route
    monkeypatch.setattr(decoding, "fold_route", lambda **kw: seen.append(kw) or real(**kw))
    model = fit("IOKR", X, Y)
    Xq = np.random.default_rng(1).normal(size=(400, 5))  # enough queries to repay the fold
    model.predict_topk(Xq, k=2)
    (kw,) = seen
    assert kw["r_x"] == kw["r_y"] == kw["n_landmarks"] == len(X)
    assert kw["n_queries"] == len(Xq) and kw["n_candidates"] == len(model.candidates_)
    assert not kw["projected"] and kw["cached"] == []
    route = real(**kw)
    assert route == "features"  # IOKR-shaped
    assert list(model._fold_cache()) == [(("default",), "features")]
    model.predict_topk(Xq, k=2)
    assert seen[1]["cached"] == ["features"]


# --------------------------------------------------------------------------- tasks and tiles


def test_independent_of_the_number_of_decoding_tasks(data, monkeypatch):
    X, Y, Xq, C = data
    monkeypatch.setattr(decode, "QUERY_ROWS", 8)  # 5 query tiles of 8 rows: tasks of 1 … 5
    model = fit("SISOKR", X, Y)
    fmap = model._output_map()
    Z, kyy = model._surrogate().folded("kernel", None, lambda: (
        decode.candidate_features(fmap, C), fmap.diag(C)))
    read = lambda a, b: ("cached", Z, kyy, a, b)  # noqa: E731
    qmap = FeatureMap(model.input_kernel_, model.input_landmarks_, None)
    G = qmap.block(Xq)
    runs = [decode_fixed(fmap, G, read, n_candidates=len(C), k=5, block_rows=len(C), query_rows=q)
            for q in (None, 1, 9, 17, 37)]
    for got in runs[1:]:  # only the query split differs: bitwise equal
        np.testing.assert_array_equal(got[0], runs[0][0])
        np.testing.assert_array_equal(got[1], runs[0][1])
    for b, q in ((64, 3), (300, None)):  # other candidate blocks (and tiles): to rounding
        got = decode_fixed(fmap, G, read, n_candidates=len(C), k=5, block_rows=b, query_rows=q)
        assert_same_topk(got, runs[0], rtol=1e-12)


def test_tiles_sized_to_the_candidates():
    from distsketch.linalg.blocks import TILE_ALIGN

    assert topk.tile_rows(2058) == 2112  # one tile, not padded to SCORE_ROWS
    for n in (1, 7, 64, 2058, 4096, 4097, 5000, 9000, 100_000):
        rows = topk.tile_rows(n)
        t = -(-n // rows)
        assert rows % TILE_ALIGN == 0 and rows <= topk.SCORE_ROWS
        assert t * rows - n < TILE_ALIGN * t  # padding below TILE_ALIGN rows per tile
    assert topk.tile_rows(100_000, block_rows=16384) == 4096  # 4 tiles per block exactly
