"""The driver's whitening: Cholesky when B is well conditioned, eigenvalues otherwise."""

import numpy as np
import pytest

import distsketch as ds
import distsketch.linalg.solve as solve
from reference.closed_forms import sisokr_scores
from reference.errors import rel_err


def _spd(m, cond, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((m, m)))
    return (Q * np.geomspace(1.0, 1.0 / cond, m)) @ Q.T


@pytest.mark.parametrize("cond", [1e2, 1e5])
def test_well_conditioned_b_uses_cholesky(cond):
    B = _spd(60, cond)
    T = solve.whitening(B, rtol=1e-10)
    assert T.shape == (60, 60)
    assert np.allclose(np.tril(T, -1), 0.0)  # L^{-T} is upper triangular
    np.testing.assert_allclose(T.T @ B @ T, np.eye(60), atol=1e-9)
    # the same whitened space as the eigen-whitening: T Tᵀ = B^{-1}
    np.testing.assert_allclose(T @ T.T, np.linalg.inv(B), rtol=1e-8 * cond, atol=0)


@pytest.mark.parametrize("cond", [1e9, 1e14])
def test_near_threshold_or_singular_b_falls_back_to_eigenvalues(cond):
    B = _spd(60, cond)
    T = solve.whitening(B, rtol=1e-10)
    s = np.linalg.eigvalsh(B)
    kept = s[s > 1e-10 * s[-1]]
    assert T.shape == (60, kept.size)
    assert not np.allclose(np.tril(T, -1), 0.0)  # eigenvectors, not a triangular factor
    # eigenvectors carry an error of about ε‖B‖ / s; whitened by s^{-1/2} on both sides, the
    # identity is off by up to about m·ε·cond with cond = s_max / the smallest kept s
    atol = 60 * np.finfo(float).eps * s[-1] / kept[0]
    np.testing.assert_allclose(T.T @ B @ T, np.eye(T.shape[1]), atol=atol)


def test_rank_deficient_b_drops_the_null_space():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((40, 7))
    T = solve.whitening(A @ A.T, rtol=1e-10)
    assert T.shape == (40, 7)


def test_both_whitenings_give_the_same_model(small_problem, monkeypatch):
    """Forcing the eigen-whitening (margin = ∞) changes no score beyond rounding (float64
    blocks, to compare with the closed form at 1e-8)."""
    X, Y, Xq, Yc = small_problem
    kx, ky = ds.Gaussian(gamma=1.0), ds.Gaussian(gamma=0.5)

    def fit():
        return ds.SISOKR(kx, ky, input_sketch=ds.GaussianSketch(15),
                         output_sketch=ds.GaussianSketch(10), lam=1e-3, random_state=0,
                         options=ds.EngineOptions(block_dtype="float64")).fit(X, Y)

    calls = []
    real = solve._cholesky_whitening
    monkeypatch.setattr(solve, "_cholesky_whitening",
                        lambda B, rtol: calls.append(real(B, rtol=rtol)) or calls[-1])
    chol = fit()
    assert all(T is not None for T in calls), "the test needs well-conditioned B and E"
    monkeypatch.setattr(solve, "_CHOLESKY_MARGIN", np.inf)
    calls.clear()
    eig = fit()
    assert all(T is None for T in calls)
    got, ref = chol.score_candidates(Xq, Yc), eig.score_candidates(Xq, Yc)
    assert rel_err(got, ref) <= 1e-10
    want = sisokr_scores(kx, ky, chol.input_sketch_.matrix(), chol.output_sketch_.matrix(),
                         X, Y, Xq, Yc, 1e-3)
    assert rel_err(got, want) <= 1e-8
