"""distsketch.metrics against hand loops, scikit-learn and the SISOKR paper's dense closed form."""

import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
from conftest import CLOSED_FORM_RTOL
from distsketch.metrics import (
    f1_samples,
    hamming_loss,
    kernel_loss,
    mean_reciprocal_rank,
    surrogate_mse,
    topk_accuracy,
)
from reference.closed_forms import sisokr_inner
from reference.errors import rel_err

KX = ds.Gaussian(gamma=1.0)
KY = ds.Gaussian(gamma=0.5)
LAM = 1e-3


# --------------------------------------------------------------------------- helpers


def _labels(seed, n=30, L=6, p=0.3):
    """Random binary label matrices with some rows empty in both and in one of them."""
    rng = np.random.default_rng(seed)
    T = (rng.random((n, L)) < p).astype(int)
    P = (rng.random((n, L)) < p).astype(int)
    T[:3] = 0
    P[:3] = 0  # both empty
    T[3] = 0  # true empty, predicted not
    P[3, :2] = 1
    P[4] = 0  # predicted empty, true not
    T[4, 0] = 1
    return T, P


def _f1_loop(T, P, zero_division):
    scores = []
    for t, p in zip(T, P):
        ts, ps = set(np.flatnonzero(t)), set(np.flatnonzero(p))
        if not ts and not ps:
            scores.append(zero_division)
        else:
            scores.append(2 * len(ts & ps) / (len(ts) + len(ps)))
    return float(np.mean(scores))


def _ranks_loop(true_index, topk, k=None):
    ranks = []
    for t, row in zip(true_index, topk):
        row = list(row) if k is None else list(row)[:k]
        ranks.append(row.index(t) + 1 if t in row else 0)
    return ranks


# --------------------------------------------------------------------------- multi-label


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_f1_samples_equals_sklearn(seed):
    skm = pytest.importorskip("sklearn.metrics")
    T, P = _labels(seed)
    want = skm.f1_score(T, P, average="samples", zero_division=0)
    assert f1_samples(T, P) == pytest.approx(want, rel=1e-12, abs=0)
    assert f1_samples(T, P) == pytest.approx(_f1_loop(T, P, 0.0), rel=1e-12, abs=0)


def test_f1_samples_zero_division_one():
    T, P = _labels(3)
    got = f1_samples(T, P, zero_division=1.0)
    assert got == pytest.approx(_f1_loop(T, P, 1.0), rel=1e-12, abs=0)
    # each row empty on both sides contributes 1 instead of 0
    both_empty = np.sum((T.sum(axis=1) == 0) & (P.sum(axis=1) == 0))
    assert both_empty >= 3
    assert got - f1_samples(T, P) == pytest.approx(both_empty / len(T), rel=1e-12)
    # a row empty on one side only is 0 whatever zero_division says
    assert f1_samples(T[3:5], P[3:5], zero_division=1.0) == 0.0
    assert f1_samples(np.zeros((2, 4)), np.zeros((2, 4)), zero_division=1.0) == 1.0


@pytest.mark.parametrize("fmt", [sp.csr_matrix, sp.csr_array, sp.coo_array])
def test_multilabel_sparse_inputs(fmt):
    T, P = _labels(4)
    assert f1_samples(fmt(T), fmt(P)) == f1_samples(T, P)
    assert f1_samples(fmt(T), P, zero_division=1.0) == f1_samples(T, P, zero_division=1.0)
    assert hamming_loss(T, fmt(P)) == hamming_loss(T, P)


@pytest.mark.parametrize("metric", [f1_samples, hamming_loss])
def test_multilabel_shape_mismatch(metric):
    T, P = _labels(5)
    with pytest.raises(ValueError, match="Y_pred"):
        metric(T, P[:, :-1])
    with pytest.raises(ValueError, match="Y_pred"):
        metric(T, P[:-1])
    with pytest.raises(ValueError, match="Y_pred"):
        metric(T, P[0])  # 1-D


@pytest.mark.parametrize("seed", [0, 1])
def test_hamming_loss_equals_sklearn(seed):
    skm = pytest.importorskip("sklearn.metrics")
    T, P = _labels(seed)
    want = skm.hamming_loss(T, P)
    assert want > 0
    assert hamming_loss(T, P) == pytest.approx(want, rel=1e-12, abs=0)
    assert hamming_loss(T, T) == 0.0


# --------------------------------------------------------------------------- ranking


def _ranking_case():
    rng = np.random.default_rng(7)
    n, k, n_c = 50, 5, 12
    topk = np.stack([rng.permutation(n_c)[:k] for _ in range(n)])
    true = rng.integers(0, n_c, size=n)  # often absent from the top-k
    topk[-4:, 3:] = -1  # padding of short candidate sets
    topk[-4:-2, 0] = true[-4:-2]  # hits at rank 1 before padding
    true[-2:] = [topk[-2, 2], 11]
    topk[-1, :3] = [0, 1, 2]  # true 11 absent, then padding
    return true, topk


def test_topk_accuracy_vs_loop():
    true, topk = _ranking_case()
    ranks = _ranks_loop(true, topk)
    assert 0 in ranks and 1 in ranks and max(ranks) > 1
    assert topk_accuracy(true, topk) == pytest.approx(np.mean([r > 0 for r in ranks]), rel=1e-12)
    for k in (1, 2, 3, 5, 9):
        want = np.mean([r > 0 for r in _ranks_loop(true, topk, k)])
        assert topk_accuracy(true, topk, k=k) == pytest.approx(want, rel=1e-12), k


def test_mean_reciprocal_rank_vs_loop():
    true, topk = _ranking_case()
    want = np.mean([1.0 / r if r else 0.0 for r in _ranks_loop(true, topk)])
    assert mean_reciprocal_rank(true, topk) == pytest.approx(want, rel=1e-12)


def test_ranking_small_exact_values():
    topk = np.array([[3, 1, 2], [0, 4, -1], [2, -1, -1], [5, 6, 7]])
    true = np.array([1, 4, 2, 0])  # ranks 2, 2, 1, 0 (absent → 0)
    assert mean_reciprocal_rank(true, topk) == pytest.approx((0.5 + 0.5 + 1.0 + 0.0) / 4)
    assert topk_accuracy(true, topk) == 0.75
    assert topk_accuracy(true, topk, k=1) == 0.25
    assert topk_accuracy(true, topk, k=2) == 0.75
    # a column vector of true indices is the same thing
    assert mean_reciprocal_rank(true[:, None], topk) == mean_reciprocal_rank(true, topk)


def test_padding_never_matches():
    topk = np.full((3, 4), -1)
    true = np.array([0, 5, 3])
    assert topk_accuracy(true, topk) == 0.0
    assert mean_reciprocal_rank(true, topk) == 0.0


def test_ranking_bad_shapes():
    true, topk = _ranking_case()
    with pytest.raises(ValueError, match="topk_indices"):
        topk_accuracy(true[:-1], topk)
    with pytest.raises(ValueError, match="topk_indices"):
        mean_reciprocal_rank(true[:-1], topk)
    with pytest.raises(ValueError, match="topk_indices"):
        topk_accuracy(true[:1], topk[0])  # 1-D top-k
    with pytest.raises(ValueError, match="topk_indices"):
        mean_reciprocal_rank(true[:1], topk[0])
    with pytest.raises(ValueError, match="topk_indices"):
        topk_accuracy(true, topk[None])  # 3-D
    for k in (0, -2):
        with pytest.raises(ValueError, match="k"):
            topk_accuracy(true, topk, k=k)


def test_topk_accuracy_1d_with_k_raises_valueerror():
    with pytest.raises(ValueError, match="topk_indices"):
        topk_accuracy(np.array([1, 2]), np.array([1, 2]), k=1)


# --------------------------------------------------------------------------- kernel loss


@pytest.mark.parametrize("n", [7, 256, 600])
def test_kernel_loss_gaussian_vs_loop(n):
    rng = np.random.default_rng(n)
    Y, Yh = rng.normal(size=(n, 4)), rng.normal(size=(n, 4))
    Yh[::5] = Y[::5]  # some exact predictions (loss 0)
    gamma = 0.3
    want = np.mean([2.0 - 2.0 * np.exp(-gamma * np.sum((y - yh) ** 2)) for y, yh in zip(Y, Yh)])
    assert kernel_loss(ds.Gaussian(gamma), Y, Yh) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("n", [5, 600])
def test_kernel_loss_linear_is_mse(n):
    rng = np.random.default_rng(n + 1)
    Y, Yh = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)) + 0.5
    want = np.mean([np.sum((y - yh) ** 2) for y, yh in zip(Y, Yh)])
    assert kernel_loss(ds.Linear(), Y, Yh) == pytest.approx(want, rel=1e-12)


def test_kernel_loss_block_order_matters():
    """Rows pair with rows: a permutation across the 256-row blocks changes the loss."""
    rng = np.random.default_rng(11)
    Y = rng.normal(size=(600, 2))
    assert kernel_loss(ds.Linear(), Y, Y) == pytest.approx(0.0, abs=1e-12)
    perm = np.roll(np.arange(600), 300)
    want = np.mean(np.sum((Y - Y[perm]) ** 2, axis=1))
    assert kernel_loss(ds.Linear(), Y, Y[perm]) == pytest.approx(want, rel=1e-12)


def test_kernel_loss_shape_mismatch():
    Y = np.zeros((4, 3))
    with pytest.raises(ValueError, match="Y_pred"):
        kernel_loss(ds.Gaussian(1.0), Y, Y[:3])


# --------------------------------------------------------------------------- surrogate MSE


def _surrogate_mse_naive(model, X, Y, Xq, Yq, lam):
    """Mean of k_Y(y_q, y_q) − 2 k_Y(y_q, Y) Q[:, q] + Q[:, q]ᵀ K_Y Q[:, q] (Prop. 1)."""
    Q = sisokr_inner(KX, KY, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                     X, Y, Xq, lam)
    Ky = KY(Y, Y)
    vals = [KY(yq[None], yq[None])[0, 0] - 2.0 * KY(yq[None], Y)[0] @ Q[:, q]
            + Q[:, q] @ Ky @ Q[:, q] for q, yq in enumerate(Yq)]
    return float(np.mean(vals))


SIDES = {
    "sisokr": (ds.SubSampling(25), ds.GaussianSketch(15)),
    "sisokr_psparse": (ds.GaussianSketch(15), ds.PSparsified(12, p=0.2)),
    "siokr_exact_output": (ds.SubSampling(25), None),
    "isokr": (None, ds.CountSketch(15)),
    "iokr": (None, None),
}


@pytest.mark.parametrize("name", sorted(SIDES))
def test_surrogate_mse_equals_closed_form(small_problem, name, block_dtype):
    X, Y, Xq, _ = small_problem
    sx, sy = SIDES[name]
    model = ds.SISOKR(KX, KY, input_sketch=sx, output_sketch=sy, lam=LAM, random_state=4, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, Y)
    assert (model.output_projection_ is None) == (sy is None)
    rng = np.random.default_rng(9)
    Yq = (rng.random((len(Xq), Y.shape[1])) < 0.4).astype(float)
    for Xe, Ye in ((Xq, Yq), (X[:10], Y[:10])):
        got = surrogate_mse(model, Xe, Ye)
        assert rel_err(got, _surrogate_mse_naive(model, X, Y, Xe, Ye, LAM)) <= CLOSED_FORM_RTOL[block_dtype]


@pytest.mark.parametrize("sy", [None, ds.GaussianSketch(12)], ids=["exact", "sketched"])
def test_surrogate_mse_duplicate_training_outputs(sy, block_dtype):
    """Repeated training outputs: the exact output side keeps unique landmarks only."""
    rng = np.random.default_rng(21)
    X = rng.normal(size=(30, 3))
    Y = (rng.random((10, 5)) < 0.5).astype(float)[rng.integers(0, 10, size=30)]
    Xq, Yq = rng.normal(size=(6, 3)), (rng.random((6, 5)) < 0.5).astype(float)
    model = ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(20), output_sketch=sy, lam=LAM,
                      random_state=2, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, Y)
    got = surrogate_mse(model, Xq, Yq)
    assert rel_err(got, _surrogate_mse_naive(model, X, Y, Xq, Yq, LAM)) <= CLOSED_FORM_RTOL[block_dtype]


@pytest.mark.parametrize("sy", [None, ds.GaussianSketch(15)], ids=["exact", "sketched"])
def test_surrogate_mse_sparse_outputs(small_problem, sy, block_dtype):
    X, Y, Xq, _ = small_problem
    model = ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(25), output_sketch=sy, lam=LAM,
                      random_state=4, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, sp.csr_array(Y))
    dense = surrogate_mse(model, X[:12], Y[:12])
    assert rel_err(surrogate_mse(model, X[:12], sp.csr_array(Y[:12])), dense) <= 1e-12
    assert rel_err(dense, _surrogate_mse_naive(model, X, Y, X[:12], Y[:12], LAM)) <= CLOSED_FORM_RTOL[block_dtype]


@pytest.mark.parametrize("sides", ["sisokr", "siokr_exact_output", "iokr"])
def test_surrogate_mse_train_below_heldout(small_problem, sides):
    X, Y, _, _ = small_problem
    rng = np.random.default_rng(31)
    Xh = rng.normal(size=(40, X.shape[1]))
    Yh = (rng.random((40, Y.shape[1])) < 0.4).astype(float)
    sx, sy = SIDES[sides]
    model = ds.SISOKR(KX, KY, input_sketch=sx, output_sketch=sy, lam=1e-6, random_state=4).fit(X, Y)
    train, held = surrogate_mse(model, X, Y), surrogate_mse(model, Xh, Yh)
    assert 0.0 <= train < 0.5 * held


@pytest.mark.parametrize("sy", [None, ds.GaussianSketch(15)], ids=["exact", "sketched"])
def test_surrogate_mse_linear_output_kernel(small_problem, sy, block_dtype):
    """Linear k_Y: ĥ(x_q) = Yᵀ Q[:, q] is a vector and the MSE is mean ‖ĥ(x_q) − y_q‖²."""
    X, Y, Xq, _ = small_problem
    T = Y + 1.0 + 0.3 * X[:, :1]
    rng = np.random.default_rng(13)
    Tq = rng.normal(size=(len(Xq), T.shape[1])) + 1.0
    model = ds.SISOKR(KX, ds.Linear(), input_sketch=ds.SubSampling(25), output_sketch=sy,
                      lam=LAM, random_state=5, options=ds.EngineOptions(block_dtype=block_dtype)).fit(X, T)
    Q = sisokr_inner(KX, ds.Linear(), model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                     X, T, Xq, LAM)
    want = np.mean(np.sum(((T.T @ Q).T - Tq) ** 2, axis=1))
    assert rel_err(surrogate_mse(model, Xq, Tq), want) <= CLOSED_FORM_RTOL[block_dtype]
