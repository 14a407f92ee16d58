"""PCG on repeated and nearly coincident landmarks, and its divergence guard.

With repeated training rows, sub-sampled landmarks repeat: ``K_mm`` is singular, the
coefficients α are not unique (the function ``k(·, X_J) α`` is), and a preconditioner built
from ``K_mm`` amplifies the rounding of its null directions until CG diverges. PCG solves in
the distinct, numerically independent landmarks (:func:`distsketch.solvers.preconditioner.select_landmarks`) and
maps α back (zeros elsewhere). Checked here, on every PCG route (SketchedKRR, the regressor's
centred system, SISOKR's input side): predictions equal the direct route's and a dense numpy
solve in the distinct landmarks; the divergence guard of the iterations (a deliberately bad
preconditioner, a noisy operator) stops, keeps the best iterate, certifies its residual and
says what happened and what to do; a resumed guard state gives the identical result.

Tolerances: CG stops at a relative residual ``tol`` in the preconditioned norm; the
solution's error is at most that times ``cond(Pᵀ H P)`` (measured ≤ 10² here on the
distinct landmarks), so predictions agree to ``10² tol``; the bar is 1e-6 with
``tol = 1e-10`` (measured 1e-8 – 4e-8).
"""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import cholesky

import distsketch as ds
from distsketch.linalg.blocks import distinct_rows
from distsketch.solvers import conjugate_gradient, preconditioner
from distsketch.solvers.conjugate_gradient import _solve_lam
from distsketch.solvers.preconditioner import Preconditioner, factor_kmm
from killhelpers import run_killed
from pcghelpers import repeated
from reference.closed_forms import dense_distinct, distinct
from reference.errors import norm_rel_err as _rel

KERNEL = ds.Gaussian(gamma=0.2)
F64 = ds.EngineOptions(block_dtype="float64")
PCG = dict(solver="pcg", tol=1e-10, max_iter=300)


def _first_copies(L) -> np.ndarray:
    """Whether each landmark row is the first occurrence of its value."""
    first, _ = distinct_rows(L)
    out = np.zeros(len(L), dtype=bool)
    out[first] = True
    return out


# --------------------------------------------------------------------------- the three routes


@pytest.mark.parametrize("lam", [1e-12, 1e-9, 1e-6])
def test_repeated_rows_krr_matches_direct_and_dense(lam):
    """Repeated rows (50 rows × 12, SubSampling(100): 44 distinct landmarks): PCG
    converges without a warning, agrees with the direct route and with a dense solve in the
    distinct landmarks to 1e-6 relative on predictions, and α sits on each landmark's first
    copy (zeros on the others)."""
    X, y = repeated()
    kw = dict(sketch=ds.SubSampling(100), lam=lam, random_state=0, options=F64)
    direct = ds.SketchedKRR(KERNEL, solver="direct", **kw).fit(X, y)
    pcg = ds.SketchedKRR(KERNEL, **PCG, **kw).fit(X, y)  # any warning fails the test
    L = pcg.landmarks_
    assert np.array_equal(L, direct.landmarks_) and len(distinct(L)) < len(L)
    assert pcg.n_iter_ < 300
    assert np.all(pcg.dual_coef_[~_first_copies(L)] == 0)
    Xd = X[:50]
    assert _rel(pcg.predict(Xd), direct.predict(Xd)) < 1e-6
    Lu, alpha, b0 = dense_distinct(KERNEL, X, y, L, lam)
    assert _rel(pcg.predict(Xd), (np.asarray(KERNEL(Xd, Lu)) @ alpha + b0)[:, 0]) < 1e-6


def test_repeated_rows_default_float32_blocks():
    """The same estimator with the default float32 blocks at λ = 1e-9: no warning, and the
    predictions agree with the direct route's to the float32 level (kernel values rounded to
    ε₃₂ = 6e-8 by both routes, differently, times the conditioning: measured 1e-5)."""
    X, y = repeated()
    kw = dict(sketch=ds.SubSampling(100), lam=1e-9, random_state=0)
    direct = ds.SketchedKRR(KERNEL, solver="direct", **kw).fit(X, y)
    pcg = ds.SketchedKRR(KERNEL, **PCG, **kw).fit(X, y)
    assert _rel(pcg.predict(X[:50]), direct.predict(X[:50])) < 1e-4


@pytest.mark.parametrize("lam", [1e-9, 1e-6])
def test_repeated_rows_regressor_matches_dense(lam):
    """SketchedRegressor(loss="squared", solver="pcg") (the centred system of a jointly
    fitted intercept) on the repeated rows: predictions and intercept equal a dense solve of
    the centred system in the distinct landmarks to 1e-6."""
    X, y = repeated()
    reg = ds.SketchedRegressor(KERNEL, loss="squared", sketch=ds.SubSampling(100), lam=lam,
                               random_state=0, options=F64, **PCG).fit(X, y)
    assert reg.solver_ == "pcg"
    Lu, alpha, b0 = dense_distinct(KERNEL, X, y, reg.landmarks_, lam, centre=True)
    ref = (np.asarray(KERNEL(X[:50], Lu)) @ alpha + b0)[:, 0]
    assert _rel(reg.predict(X[:50]), ref) < 1e-6


def _multilabel(X, seed=0):
    rng = np.random.default_rng(seed)
    logits = X[:, :1] * np.arange(1, 7) - X[:, 1:2]
    return (rng.random((len(X), 6)) < 1 / (1 + np.exp(-logits))).astype(float)


@pytest.mark.parametrize("noise", [0.0, 1e-9], ids=["repeated", "near-duplicate"])
def test_sisokr_repeated_inputs(noise):
    """SISOKR(solver="pcg") with repeated (or numerically coincident) input landmarks:
    decoding scores equal the direct route's to 1e-6; the surrogate equals a dense solve in
    the distinct landmarks; the carried ``K_nmᵀ K_nm α`` equals the dense product on every
    landmark, kept or not (1e-8)."""
    X, _ = repeated(noise=noise)
    Y = _multilabel(repeated()[0])
    args = dict(input_sketch=ds.SubSampling(100), output_sketch=ds.SubSampling(30), lam=1e-6,
                random_state=3, options=F64)
    kx, ky = ds.Gaussian(gamma=0.2), ds.Gaussian(gamma=0.5)
    direct = ds.SISOKR(kx, ky, **args).fit(X, Y)
    pcg = ds.SISOKR(kx, ky, **PCG, **args).fit(X, Y)
    Xt = X[:50]
    cand = direct.candidates_
    assert _rel(pcg.score_candidates(Xt, cand), direct.score_candidates(Xt, cand)) < 1e-6
    L = pcg.input_landmarks_
    alpha = pcg.path_.coefs[0]
    assert np.count_nonzero(np.any(alpha != 0, axis=1)) == len(distinct(np.round(L, 6)))
    Psi = np.asarray(pcg.output_features(Y))
    Lu = L[np.any(alpha != 0, axis=1)]
    Knu = np.asarray(kx(X, Lu))
    au = np.linalg.solve(Knu.T @ Knu + len(X) * 1e-6 * np.asarray(kx(Lu, Lu)), Knu.T @ Psi)
    assert _rel(np.asarray(pcg.surrogate(Xt)), np.asarray(kx(Xt, Lu)) @ au) < 1e-6
    Knm = np.asarray(kx(X, L))
    assert _rel(pcg.path_.products[0], Knm.T @ (Knm @ alpha)) < 1e-8


@pytest.mark.parametrize("lam", [1e-9, 1e-6])
def test_near_duplicate_landmarks_match_direct(lam):
    """Copies moved by 1e-9 (distinct rows, kernel columns equal to rounding): the old
    factorisation succeeded with a tiny jitter and CG diverged; now the numerically dependent
    landmarks are left out (one per group kept), PCG converges without a warning and agrees
    with the direct route (which drops the same null directions) to 1e-6."""
    X, y = repeated(noise=1e-9)
    kw = dict(sketch=ds.SubSampling(100), lam=lam, random_state=0, options=F64)
    direct = ds.SketchedKRR(KERNEL, solver="direct", **kw).fit(X, y)
    pcg = ds.SketchedKRR(KERNEL, **PCG, **kw).fit(X, y)
    L = pcg.landmarks_
    assert len(distinct(L)) == len(L)  # no exact repeat
    groups = len(distinct(np.round(L, 6)))
    assert np.count_nonzero(pcg.dual_coef_) == groups < len(L)
    assert _rel(pcg.predict(X[:50]), direct.predict(X[:50])) < 1e-6


# --------------------------------------------------------------------------- the landmarks


def test_distinct_landmarks_dense_and_sparse():
    """Exact repeats found alike in dense and CSR landmarks (explicit zeros, unsorted
    indices, -0.0), as :func:`distsketch.linalg.blocks.distinct_rows` finds them; None when no row
    repeats."""
    rng = np.random.default_rng(0)
    A = np.round(rng.normal(size=(6, 5)), 1) * (rng.random((6, 5)) < 0.5)
    L = A[[0, 1, 2, 1, 3, 0, 4, 5, 2]]
    L[5, L[5] == 0] = -0.0
    first, inverse = preconditioner.distinct_landmarks(L)
    ref_first, ref_inverse = distinct_rows(L)
    assert np.array_equal(first, ref_first) and np.array_equal(inverse, ref_inverse)
    assert np.array_equal(L[first][inverse], L)
    coo = sp.csr_array(L).tocoo()
    order = rng.permutation(coo.nnz)
    i, j = np.argwhere(L == 0)[0]  # plus an explicit zero
    U = sp.csr_array((np.r_[coo.data[order], 0.0], (np.r_[coo.row[order], i],
                                                     np.r_[coo.col[order], j])), shape=L.shape)
    U.has_sorted_indices = False
    sf, si = preconditioner.distinct_landmarks(U)
    assert np.array_equal(sf, ref_first) and np.array_equal(si, ref_inverse)
    assert preconditioner.distinct_landmarks(A[:5] + np.arange(5)[:, None]) is None


def test_independent_landmarks_factored_as_before():
    """Distinct, numerically independent landmarks: all kept, and ``T`` is bitwise
    :func:`factor_kmm`'s (the same preconditioner, hence the same iterations as before)."""
    rng = np.random.default_rng(1)
    L = rng.normal(size=(40, 3))
    keep, Kmm, T = preconditioner.select_landmarks(ds.Gaussian(gamma=0.5), L)
    assert keep is None and Kmm.m == 40
    assert np.array_equal(T, factor_kmm(Kmm))


# --------------------------------------------------------------------------- the guard


class _Sweeper:
    """``K_nmᵀ (K_nm V)`` from a dense ``K_nm`` (float64), plus ``noise`` relative Gaussian
    noise per product (a seeded generator: reproducible)."""

    def __init__(self, Knm, noise=0.0, seed=0):
        self.Knm, self.noise, self.rng = Knm, noise, np.random.default_rng(seed)

    def __call__(self, step):
        gv = self.Knm.T @ (self.Knm @ step.V)
        if self.noise:
            gv = gv + self.noise * np.abs(gv).max() * self.rng.normal(size=gv.shape)
        return {"GV": gv}


class _Recorder:
    """A solver state that records every save (and can load one of them)."""

    def __init__(self, start=None):
        self.saves, self.start = [], start

    def load(self):
        return None if self.start is None else {
            k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self.start.items()}

    def save(self, state):
        self.saves.append({k: (v.copy() if isinstance(v, np.ndarray) else v)
                           for k, v in state.items()})


def _bad_problem():
    """The repeated landmarks of :func:`pcghelpers.repeated`, not merged, with a jittered factor of
    their singular ``K_mm`` (ε = 1e-13 · m): a preconditioner that amplifies rounding."""
    X, y = repeated()
    L = X[np.sort(np.random.default_rng(1).choice(len(X), 100, replace=False))]
    Knm, Kmm = np.asarray(KERNEL(X, L)), np.asarray(KERNEL(L, L))
    Kmm = 0.5 * (Kmm + Kmm.T)
    T = cholesky(Kmm + 1e-13 * len(L) * np.eye(len(L)))
    z = Knm.T @ (y - y.mean())[:, None]
    return X, y, Knm, Kmm, T, z


def _solve(Knm, Kmm, T, z, lam, *, state, noise=0.0, tol=1e-14, max_iter=500):
    m = len(Kmm)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _solve_lam(Kmm, T, z, lam, len(Knm), _Sweeper(Knm, noise), alpha0=np.zeros((m, 1)),
                         galpha0=np.zeros((m, 1)), tol=tol, max_iter=max_iter, state=state)
    return out, [str(w.message) for w in caught]


def _certified(Knm, Kmm, T, z, lam, alpha, galpha):
    """``‖Pᵀ(z − H α)‖ / ‖Pᵀ z‖`` from ``galpha = K_nmᵀ K_nm α`` (in the preconditioned norm
    the rounding of ``H α`` is amplified by ``‖P‖``: the order of the operations is the
    solver's)."""
    n = len(Knm)
    P = Preconditioner(Kmm, lam, n, T=T)
    r = P.apply_t(z) - P.apply_t(galpha + n * lam * Kmm.dot(alpha))
    return np.sqrt(np.einsum("ij,ij->j", r, r)) / np.linalg.norm(P.apply_t(z))


@pytest.mark.parametrize("lam", [1e-9, 1e-6, 1e-3])
def test_divergence_keeps_best_certified_iterate(lam):
    """A bad preconditioner (the singular ``K_mm``'s old factor): the iterations stop well
    before max_iter; the α returned is ``P u`` of the iterate of lowest recursive residual
    (bitwise), its residual is the certified one (the dense ``‖Pᵀ(z − Hα)‖`` to 1e-6
    relative, not the recursion's), the carried ``K_nmᵀ K_nm α`` is recomputed; the warning
    says what happened (the residual's history) and what to do — not "increase max_iter"."""
    X, y, Knm, Kmm, T, z = _bad_problem()
    state = _Recorder()
    (alpha, galpha, n_iter, res, ok), msgs = _solve(Knm, Kmm, T, z, lam, state=state)
    assert not ok and n_iter < 500
    iterations = [s for s in state.saves if not s["done"]]
    assert len(iterations) == n_iter
    rr = np.array([s["rr"][0] for s in iterations])
    u_best = iterations[int(np.argmin(rr))]["u"]  # (the start's relative residual is 1)
    P = Preconditioner(Kmm, lam, len(Knm), T=T)
    assert np.array_equal(alpha, P.apply(u_best))
    # certified: K_nmᵀ K_nm α recomputed by a pass, the residual formed from it, not the
    # recursion's value
    assert _rel(galpha, Knm.T @ (Knm @ alpha)) < 1e-12
    assert abs(res[0] - _certified(Knm, Kmm, T, z, lam, alpha, galpha)[0]) <= 1e-12 * res[0]
    assert res[0] != np.sqrt(iterations[-1]["rr_best"][0]) / np.linalg.norm(P.apply_t(z))
    # the best iterate predicts as the dense solve in the distinct landmarks (its residual,
    # ≤ 1.1e-6, times the conditioning: measured ≤ 2.2e-6), the last one at least 10× worse
    L = X[np.sort(np.random.default_rng(1).choice(len(X), 100, replace=False))]
    Lu, au, _ = dense_distinct(KERNEL, X, y, L, lam)
    ref = np.asarray(KERNEL(X, Lu)) @ au
    err = _rel(Knm @ alpha, ref)
    assert err < 1e-5 and _rel(Knm @ P.apply(iterations[-1]["u"]), ref) > 10 * err
    assert len(msgs) == 1
    msg = msgs[0]
    assert ("diverged" in msg and "grew from its lowest" in msg) or (
        "stalled" in msg and "has not gone below its lowest" in msg)
    assert f"iteration {n_iter}" in msg and "kept the best iterate" in msg
    assert "solver='direct'" in msg and "larger λ" in msg and "block_dtype='float64'" in msg
    assert "increase max_iter" not in msg and "More iterations will not help" in msg
    assert "kept the best iterate" in msg


def test_growth_rule():
    """The growth rule fires when the residual exceeds 10³ times its lowest: the last
    iterate before the stop is over that bound, and the message gives both values."""
    X, y, Knm, Kmm, T, z = _bad_problem()
    state = _Recorder()
    (alpha, _, n_iter, res, ok), msgs = _solve(Knm, Kmm, T, z, 1e-6, state=state)
    last = [s for s in state.saves if not s["done"]][-1]
    assert "grew from its lowest" in msgs[0]
    assert np.sqrt(last["rr"][0] / last["rr_best"][0]) > 1e3


def test_stall_rule_and_start_kept():
    """An inexact operator (relative noise 1e-2 on every product: the recursion never grows
    10³-fold but stops improving) at tol = 1e-15 on well-conditioned landmarks: the iterations
    stop ``STALL_WINDOW`` iterations after the lowest recursive residual; that iterate,
    recomputed, is worse than the start (α = 0, relative residual 1), so the start is kept,
    and the warning says so."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    L = X[:30]
    k = ds.Gaussian(gamma=0.5)
    Knm, Kmm = np.asarray(k(X, L)), np.asarray(k(L, L))
    Kmm = 0.5 * (Kmm + Kmm.T)
    T = factor_kmm(Kmm)
    z = Knm.T @ np.sin(X[:, :1])
    state = _Recorder()
    (alpha, galpha, n_iter, res, ok), msgs = _solve(Knm, Kmm, T, z, 1e-4, state=state,
                                                    noise=1e-2, tol=1e-15)
    it = [s for s in state.saves if not s["done"]]
    best = int(np.argmin([s["rr"][0] for s in it]))
    assert not ok and n_iter == best + 1 + conjugate_gradient.STALL_WINDOW < 500
    assert "stalled" in msgs[0] and "its lowest" in msgs[0] and \
        f"(iteration {best + 1}) in the {conjugate_gradient.STALL_WINDOW} iterations" in msgs[0]
    assert "kept the starting point" in msgs[0]
    assert np.all(alpha == 0) and np.all(galpha == 0) and res[0] == 1.0
    P = Preconditioner(Kmm, 1e-4, len(X), T=T)
    a_best = P.apply(it[best]["u"])  # what was rejected: its true residual exceeds 1
    assert _certified(Knm, Kmm, T, z, 1e-4, a_best, Knm.T @ (Knm @ a_best))[0] > 1.0


def test_guard_state_resumes_identically():
    """A fit resumed from any saved iteration (the guard's best iterate and flags saved with
    the CG state) returns the identical α, iterations and warning."""
    X, y, Knm, Kmm, T, z = _bad_problem()
    state = _Recorder()
    (alpha, galpha, n_iter, res, ok), msgs = _solve(Knm, Kmm, T, z, 1e-6, state=state)
    for k in (2, n_iter // 2, n_iter - 1):
        resumed = _Recorder(start=state.saves[k - 1])
        (a2, g2, n2, r2, ok2), m2 = _solve(Knm, Kmm, T, z, 1e-6, state=resumed)
        assert np.array_equal(a2, alpha) and np.array_equal(g2, galpha)
        assert (n2, ok2, m2) == (n_iter, ok, msgs) and np.array_equal(r2, res)


_KILL_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import distsketch as ds
    from pcghelpers import repeated
    X, y = repeated()
    ds.SketchedKRR(ds.Gaussian(gamma=0.2), sketch=ds.SubSampling(100), lam=[1e-3, 1e-9],
                   solver="pcg", tol=1e-10, max_iter=300, random_state=0,
                   options=ds.EngineOptions(block_dtype="float64"), store={store!r}).fit(X, y)
""")


@pytest.mark.slow
def test_repeated_rows_resume_after_sigkill(tmp_path):
    """A PCG fit on repeated landmarks killed by SIGKILL in the second λ's iterations resumes
    from the store (states kept for the distinct landmarks) with the bitwise identical model;
    the saved model loads and predicts the same; refitting the finished store makes one pass."""
    X, y = repeated()
    kw = dict(sketch=ds.SubSampling(100), lam=[1e-3, 1e-9], solver="pcg", tol=1e-10,
              max_iter=300, random_state=0, options=F64)
    whole = ds.SketchedKRR(KERNEL, store=tmp_path / "whole.zarr", **kw).fit(X, y)
    kill_at = 1 + int(whole.n_iters_[0]) + 4  # the rhs pass, λ = 1e-3, then 3 of λ = 1e-9's
    assert whole.n_iters_[1] > 4
    store = tmp_path / "killed.zarr"
    run_killed(_KILL_SCRIPT.format(tests=str(Path(__file__).parent), store=str(store)),
               kill_at=kill_at)
    resumed = ds.SketchedKRR(KERNEL, store=store, **kw).fit(X, y)
    assert np.array_equal(resumed.dual_coef_, whole.dual_coef_)
    assert list(resumed.n_iters_) == list(whole.n_iters_)
    assert resumed.n_passes_ == whole.n_passes_ - kill_at + 2
    again = ds.SketchedKRR(KERNEL, store=store, **kw).fit(X, y)
    assert again.n_passes_ == 1 and np.array_equal(again.dual_coef_, whole.dual_coef_)
    loaded = ds.load(store)
    assert np.array_equal(loaded.predict(X[:50]), whole.predict(X[:50]))
