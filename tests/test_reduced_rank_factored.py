"""Reduced rank with a sketched input and an exact output side: the factored route
(``distsketch.solvers.reduced_rank.factored_directions``) never forms ``K_Y`` or the predictions' covariance
as n × n matrices, and gives the metric route's model."""

import numpy as np
import pytest

import distsketch as ds
import distsketch.models.sisokr_state as sisokr_state
from reference.closed_forms import reduced_rank_scores
from reference.errors import norm_rel_err

KX = ds.Gaussian(gamma=1.0)
KY = ds.Gaussian(gamma=0.5)
LAM = 1e-3
F64 = ds.EngineOptions(block_dtype="float64")


def _problem(n=90, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    Y = (X[:, :3] @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(n, 6)) > 0.5)
    Xq = rng.normal(size=(6, 4))
    Yc = (rng.random((15, 6)) < 0.4).astype(np.float64)
    return X, Y.astype(np.float64), Xq, Yc


def _fit(X, Y, **kw):
    kw = {"lam": LAM, **kw}
    return ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(30), output_sketch=None,
                     random_state=4, options=F64, **kw).fit(X, Y)


def test_factored_route_equals_the_metric_route(monkeypatch):
    """The same fitted model scored through both routes, for ranks inside and past the span
    of the predictions (past it both are the full model): equal to rounding (1e-8)."""
    X, Y, Xq, Yc = _problem()
    model = _fit(X, Y, rank=2)
    assert model._factored_rank()
    full = model.set_rank(None).score_candidates(Xq, Yc)
    for p in (1, 2, 5, 12, 29, 40, 200):
        factored = model.set_rank(p).score_candidates(Xq, Yc)
        with monkeypatch.context() as mp:
            mp.setattr(ds.SISOKR, "_factored_rank", lambda self: False)
            metric = model.set_rank(p).score_candidates(Xq, Yc)
        assert norm_rel_err(factored, metric) <= 1e-8, p
        if p >= 30:  # r_X = 30: the predictions span at most 30 directions
            assert norm_rel_err(factored, full) <= 1e-8, p
    assert len(model.set_rank(3).principal_values_) <= 30


def test_output_gram_in_row_blocks_never_n_by_n(monkeypatch):
    """``R K_Y Rᵀ`` from blocks of a few rows: no kernel call has n × n shape, and the
    scores equal the paper's dense algorithm (1e-8)."""
    X, Y, Xq, Yc = _problem(seed=1)
    n = len(X)
    monkeypatch.setattr(sisokr_state, "OUTPUT_GRAM_BYTES", 8 * n * 7)  # 7 rows per block
    shapes = []
    inner = ds.Gaussian.__call__

    def spy(self, A, B=None):
        out = inner(self, A, B)
        shapes.append(np.shape(out))
        return out

    monkeypatch.setattr(ds.Gaussian, "__call__", spy)
    model = _fit(X, Y, rank=[4, 2])
    model.set_rank(2).set_rank(4)
    got = model.score_candidates(Xq, Yc)
    monkeypatch.undo()
    assert (n, n) not in shapes
    assert shapes.count((7, n)) == n // 7 and (n % 7, n) in shapes  # once, in row blocks
    want = reduced_rank_scores(KX, KY, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                               X, Y, Xq, Yc, LAM, 4)
    assert norm_rel_err(got, want) <= 1e-8


@pytest.mark.slow
def test_eigen_route_of_a_long_lambda_path():
    """A λ path long enough for the eigen route (diagonal ``N L``): every λ and λ₁ ≠ λ equal the
    dense algorithm (1e-8)."""
    X, Y, Xq, Yc = _problem(seed=2)
    lams = list(np.geomspace(1e-4, 1e-1, 10))
    model = _fit(X, Y, lam=lams, rank=3)
    assert model.input_solution_.V is not None  # the eigen route
    Rx, Ry = model.input_sketch_.matrix(), model.output_sketch_.matrix()
    for lam in (lams[0], lams[6]):
        model.set_lam(lam)
        want = reduced_rank_scores(KX, KY, Rx, Ry, X, Y, Xq, Yc, lam, 3)
        assert norm_rel_err(model.score_candidates(Xq, Yc), want) <= 1e-8
    two = _fit(X, Y, lam=lams, rank=3, rank_lam=lams[8])
    two.set_lam(lams[2])
    want = reduced_rank_scores(KX, KY, Rx, Ry, X, Y, Xq, Yc, lams[2], 3, lam1=lams[8])
    assert norm_rel_err(two.score_candidates(Xq, Yc), want) <= 1e-8


@pytest.mark.slow
@pytest.mark.parametrize("p", [1, 4])
def test_saved_model_scores_the_same(tmp_path, p):
    X, Y, Xq, Yc = _problem(seed=3)
    model = _fit(X, Y, rank=p)
    path = tmp_path / "m.dsk"
    model.save(path)
    back = ds.load(path)
    assert np.array_equal(back.score_candidates(Xq, Yc), model.score_candidates(Xq, Yc))
