"""Driver routes chosen by cost, same model (docs/design/math.md, "Driver routes").

Every route — the generalized form ``(G_kk + nλB_kk)`` on the certified columns of ``B``, the
whitened ``H + nλI`` by Cholesky, and the eigendecomposition — equals the papers' dense closed
forms (float64 blocks, 1e-8) and the others; a rank-deficient ``B`` the certificate refuses
takes the eigen whitening, a λ path past the crossover the eigen route, and a λ too small
for the safety test the eigen route too.
"""

import dask
import numpy as np
import pytest

import distsketch as ds
import distsketch.linalg.solve as solve
import distsketch.solvers.direct as direct
from distsketch.options import driver_blas_threads
from reference.closed_forms import (
    pass_sums,
    sisokr_linear_predict,
    sisokr_scores,
    sketched_krr_predict,
)
from reference.errors import rel_err
from reference.kernels import gaussian_gram

KX = ds.Gaussian(gamma=1.0)
KY = ds.Gaussian(gamma=0.5)
LAM = 1e-3
F64 = ds.EngineOptions(block_dtype="float64")
RTOL = 1e-8  # float64 blocks: the closed forms to rounding (tests/conftest.py, CLOSED_FORM_RTOL)


def _sisokr(X, Y, sx, sy, *, lam=LAM, seed=0, **kw):
    return ds.SISOKR(KX, KY, input_sketch=sx, output_sketch=sy, lam=lam, random_state=seed,
                     options=F64, **kw).fit(X, Y)


def _long_path(r: int, lam: float) -> list[float]:
    """A λ path, starting at ``lam``, one longer than the eigen crossover at ``r``."""
    k = 1
    while not direct.eigen_pays(k, r):
        k += 1
    return [lam] + list(np.geomspace(1e-6, 1e-1, k - 1))


# --------------------------------------------------------------------------- solve level


def _krr_problem(seed=0, n=60, m=25, d=3, gamma=1.0):
    rng = np.random.default_rng(seed)
    X, Xq = rng.normal(size=(n, d)), rng.normal(size=(9, d))
    y = np.sin(X).sum(1, keepdims=True) + 0.1 * rng.normal(size=(n, 1))
    R = np.zeros((m, n))
    R[np.arange(m), rng.choice(n, m, replace=False)] = 1.0
    k = ds.Gaussian(gamma=gamma)
    return k, R, X, y, Xq


def _routes(G, B, n, rtol=1e-10):
    """The three routes' input solutions from the same sums."""
    gen = solve.solve_input(G, B, n=n, rtol=rtol)
    white = solve.solve_input(G, B, n=n, rtol=rtol, generalized=False)
    return {"generalized": gen, "cholesky": white, "eigen": white.with_eigen(),
            "generalized-eigen": gen.with_eigen()}


@pytest.mark.parametrize("lam", [1e-2, 1e-4])
def test_krr_routes_equal_the_closed_form(lam):
    k, R, X, y, Xq = _krr_problem()
    n = len(X)
    sums = pass_sums(k, R, X, targets=y)
    want = sketched_krr_predict(k, R, X, y, Xq, lam)
    feats = k(Xq, X) @ R.T
    got = {}
    for name, sol in _routes(sums["G"], sums["B"], n).items():
        got[name] = feats @ direct.krr_coef(sol, sums["b"], lam)
        assert sol.route == ("eigen" if "eigen" in name else name), name
        assert rel_err(got[name], want) <= RTOL, name
    assert rel_err(got["generalized"], got["eigen"]) <= RTOL


def test_generalized_form_forms_no_whitening():
    """The generalized form selects columns: T = E_keep, H = G_kk, metric = B_kk."""
    k, R, X, y, _ = _krr_problem()
    sums = pass_sums(k, R, X, targets=y)
    sol = solve.solve_input(sums["G"], sums["B"], n=len(X), rtol=1e-10)
    assert sol.whitening_route == "cholesky" and sol.support is not None
    np.testing.assert_array_equal(sol.T[sol.support, np.arange(len(sol.support))], 1.0)
    assert np.count_nonzero(sol.T) == len(sol.support)
    np.testing.assert_array_equal(sol.metric, solve.sym(sums["B"])[np.ix_(sol.support,
                                                                           sol.support)])


@pytest.mark.parametrize("jitter, route", [(0.0, "distinct"), (1e-9, "pivoted")])
def test_exactly_rank_deficient_b_keeps_the_pivoted_columns(jitter, route):
    """Repeated landmarks (B has exact null directions, as on Bibtex): the distinct columns
    (bitwise repeats dropped, certified by one shifted factorisation) or, for landmarks
    repeated up to 1e-9 (columns equal to rounding only, not bitwise), the pivoted
    factorisation keep one column per repeated row — the eigen threshold's space — and the
    model is the closed form with B's pseudo-inverse."""
    k, R, X, y, Xq = _krr_problem(n=50, m=20)
    X[1::5] = X[0::5] + jitter  # every fifth row repeats its predecessor: B has (near) null directions
    lam = 1e-3
    sums = pass_sums(k, R, X, targets=y)
    s = np.linalg.eigvalsh(sums["B"])
    dropped = int(np.sum(s <= 1e-10 * s[-1]))
    assert dropped > 0, "the test needs repeated landmarks"
    sol = solve.solve_input(sums["G"], sums["B"], n=len(X), rtol=1e-10)
    assert sol.whitening_route == route
    assert len(sol.support) == len(s) - dropped
    feats = k(Xq, X) @ R.T
    got = feats @ direct.krr_coef(sol, sums["b"], lam)
    assert sol.route == "generalized"
    assert rel_err(got, sketched_krr_predict(k, R, X, y, Xq, lam)) <= RTOL
    # the whitened form of the same sums: eigen whitening, the same model
    white = solve.solve_input(sums["G"], sums["B"], n=len(X), rtol=1e-10, generalized=False)
    assert white.whitening_route == "eigen" and white.T.shape[1] == len(sol.support)
    assert rel_err(feats @ direct.krr_coef(white, sums["b"], lam), got) <= RTOL


def test_rank_deficient_b_the_certificate_refuses_takes_the_eigen_route():
    """B numerically singular with eigenvalues decaying through the threshold (a wide
    Gaussian kernel on two-dimensional inputs): no set of columns is certified to span the
    eigen threshold's space, so the whitening is the eigendecomposition, on either form."""
    rng = np.random.default_rng(3)
    n, m = 80, 30
    X = rng.uniform(-1, 1, size=(n, 2))
    Xq = rng.uniform(-1, 1, size=(7, 2))
    y = np.cos(3 * X[:, :1])
    R = np.zeros((m, n))
    R[np.arange(m), rng.choice(n, m, replace=False)] = 1.0
    k = ds.Gaussian(gamma=0.2)
    sums = pass_sums(k, R, X, targets=y)
    s, U = np.linalg.eigh(solve.sym(sums["B"]))
    kept = s > 1e-10 * s[-1]
    assert 0 < np.sum(~kept) < m - 2, "the test needs a spectrum through rtol"
    assert solve._certified_columns(solve.sym(sums["B"]), rtol=1e-10) is None
    lam = 1e-3
    # the eigen route written out: T = U_r s_r^{-1/2}, β = T (TᵀGT + nλI)^{-1} Tᵀ b
    T = U[:, kept] / np.sqrt(s[kept])
    H = T.T @ sums["G"] @ T
    h, V = np.linalg.eigh(0.5 * (H + H.T))
    want = (k(Xq, X) @ R.T) @ (T @ V @ ((V.T @ T.T @ sums["b"]) / (np.clip(h, 0, None)
                                                                  + n * lam)[:, None]))
    for generalized in (True, False):
        sol = solve.solve_input(sums["G"], sums["B"], n=n, rtol=1e-10, generalized=generalized)
        assert sol.whitening_route == "eigen" and sol.metric is None
        assert sol.T.shape[1] == np.sum(kept)
        got = (k(Xq, X) @ R.T) @ direct.krr_coef(sol, sums["b"], lam)
        # the whitening's eigenvectors carry ε·cond(B_kept) ≈ 1e-6 relative error
        assert rel_err(got, want) <= 1e-5


def test_tiny_lam_refuses_cholesky():
    """G of rank 3 (the pass's Gram of three independent columns): its computed eigenvalues
    are rounding noise of either sign, so for a tiny λ the safety test (a Cholesky
    factorisation of H + τ·nλ·metric) fails and that λ takes the eigen route (eigenvalues
    clipped at 0), on both forms; a moderate λ on the same factors is solved by Cholesky."""
    rng = np.random.default_rng(7)
    m, n = 30, 100
    Q, _ = np.linalg.qr(rng.standard_normal((m, m)))
    B = (Q * np.geomspace(1.0, 1e-3, m)) @ Q.T
    A = rng.standard_normal((m, 3))
    G = A @ A.T
    b = A @ rng.standard_normal((3, 2))
    tiny = 1e-30
    for generalized in (True, False):
        sol = solve.solve_input(G, B, n=n, rtol=1e-10, generalized=generalized)
        assert sol.whitening_route == "cholesky"
        assert not sol._certified(tiny)
        beta = direct.krr_coef(sol, b, tiny)
        assert sol.route == "eigen" and np.isfinite(beta).all()
        lam = 1e-3 * np.linalg.norm(G, 2) / n
        got = direct.krr_coef(sol, b, lam)
        assert sol.route == ("generalized" if generalized else "cholesky")
        want = np.linalg.solve(G + n * lam * B, b)  # B invertible: the dense closed form
        assert rel_err(got, want) <= RTOL


# --------------------------------------------------------------------------- estimators

FORMS = {"IOKR": (None, None), "SIOKR": ("in", None), "ISOKR": (None, "out"),
         "SISOKR": ("in", "out")}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_sisokr_forms_every_route_equals_prop1(small_problem, form, monkeypatch):
    X, Y, Xq, Yc = small_problem
    sx = ds.GaussianSketch(15) if FORMS[form][0] else None
    sy = ds.GaussianSketch(10) if FORMS[form][1] else None
    model = _sisokr(X, Y, sx, sy)
    sol = model.input_solution_
    want = sisokr_scores(KX, KY, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                         X, Y, Xq, Yc, LAM)
    got = model.score_candidates(Xq, Yc)
    assert rel_err(got, want) <= RTOL
    assert sol.route == ("cholesky" if sx is None else "generalized")
    # the eigen route: a λ path past the crossover
    r = sol.H.shape[0]
    eig = _sisokr(X, Y, sx, sy, lam=_long_path(r, LAM) if sx is not None else
                  [LAM] + list(np.geomspace(1e-6, 1e-1, direct.EIGEN_PATH_LENGTH)))
    assert eig.input_solution_.route == "eigen" and eig.input_solution_.V is not None
    assert rel_err(eig.score_candidates(Xq, Yc), got) <= RTOL
    if sx is not None:  # the whitened H + nλI by Cholesky: B not put in generalized form
        monkeypatch.setattr(solve, "_certified_columns", lambda B, rtol, **kw: None)
        white = _sisokr(X, Y, sx, sy)
        assert white.input_solution_.route == "cholesky"
        assert white.input_solution_.metric is None
        assert rel_err(white.score_candidates(Xq, Yc), got) <= RTOL


def test_linear_output_generalized_route(small_problem):
    X, Y, Xq, _ = small_problem
    Yv = np.column_stack([np.sin(X[:, 0]), X[:, 1] * X[:, 2]])
    model = ds.SISOKR(KX, ds.Linear(), input_sketch=ds.SubSampling(20),
                      output_sketch=ds.GaussianSketch(2), lam=LAM, random_state=1,
                      options=F64).fit(X, Yv)
    assert model.input_solution_.route == "generalized"
    want = sisokr_linear_predict(KX, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                                 X, Yv, Xq, LAM)
    assert rel_err(model.predict(Xq), want) <= RTOL


def test_sketched_krr_routes_and_set_lam(small_problem):
    X, _, Xq, _ = small_problem
    y = np.sin(X).sum(1)
    krr = ds.SketchedKRR(KX, sketch=ds.SubSampling(20), lam=LAM, fit_intercept=False,
                         random_state=0, options=F64).fit(X, y)
    assert krr.input_solution_.route == "generalized"
    R = krr.sketch_.matrix()
    for lam in (LAM, 1e-5, 1e-1):  # set_lam: one Cholesky factorisation per λ
        got = krr.set_lam(lam).predict(Xq)
        assert krr.input_solution_.route == "generalized"
        assert rel_err(got, sketched_krr_predict(KX, R, X, y, Xq, lam)) <= RTOL, lam
    path = _long_path(krr.input_solution_.H.shape[0], LAM)
    eig = ds.SketchedKRR(KX, sketch=ds.SubSampling(20), lam=path, fit_intercept=False,
                         random_state=0, options=F64).fit(X, y)
    assert eig.input_solution_.route == "eigen"
    assert rel_err(eig.predict(Xq), krr.set_lam(LAM).predict(Xq)) <= RTOL


def test_short_path_below_crossover_stays_cholesky(small_problem):
    X, Y, Xq, Yc = small_problem
    model = _sisokr(X, Y, ds.SubSampling(20), ds.GaussianSketch(10), lam=[LAM, 1e-2])
    assert model.input_solution_.V is None and model.input_solution_.route == "generalized"
    assert not direct.eigen_pays(2, model.input_solution_.H.shape[0])


def test_saved_generalized_model_loads_and_predicts_the_same(small_problem, tmp_path):
    X, Y, Xq, Yc = small_problem
    model = _sisokr(X, Y, ds.SubSampling(20), ds.GaussianSketch(10), lam=[LAM, 1e-2],
                    store=str(tmp_path / "fit.zarr"))
    assert model.input_solution_.metric is not None
    loaded = ds.load(str(tmp_path / "fit.zarr"))
    np.testing.assert_array_equal(loaded.input_solution_.metric, model.input_solution_.metric)
    np.testing.assert_allclose(loaded.score_candidates(Xq, Yc), model.score_candidates(Xq, Yc),
                               rtol=1e-12, atol=0)
    np.testing.assert_allclose(loaded.set_lam(1e-2).score_candidates(Xq, Yc),
                               model.set_lam(1e-2).score_candidates(Xq, Yc), rtol=1e-12, atol=0)


def test_cv_keeps_the_eigenbasis():
    """SISOKRCV's fold scores work in the refit's eigenbasis: its input side takes the eigen
    route whatever the λ grid."""
    assert ds.SISOKRCV._needs_eigenbasis and not ds.SISOKR._needs_eigenbasis


# --------------------------------------------------------------------------- BLAS threads


def test_driver_threads_rule():
    assert driver_blas_threads(10) == 1  # small factorisations: one thread
    with dask.config.set({"distsketch.driver-threads": 3}):
        assert driver_blas_threads(10) == 3
    import os
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= driver_blas_threads(5000) <= cores


def test_idle_cores_count_this_process_own_cpu_as_free(monkeypatch):
    """The idle-core sample counts the CPU time of this process (its own BLAS threads still
    spinning after a factorisation) as free, other processes' as busy: with /proc/stat and
    os.times faked over a window of 100 jiffies on 4 CPUs (400 in all), 100 idle jiffies
    plus 150 of this process's make 2.5 free cores; without the process's time, 1."""
    import io
    import os
    import types

    import distsketch.options as mo

    stats = iter(["cpu  1000 0 0 5000 0 0 0 0 0 0\n", "cpu  1300 0 0 5100 0 0 0 0 0 0\n"])
    times = iter([0.0, 1.5])  # seconds of this process: 150 jiffies at 100 per second
    real_open = open

    def fake_open(path, *a, **kw):
        return io.StringIO(next(stats)) if path == "/proc/stat" else real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(os, "times", lambda: types.SimpleNamespace(user=next(times), system=0.0))
    monkeypatch.setattr(os, "sysconf", lambda name: 100)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert mo._idle_cores(window=0.0) == pytest.approx(2.5)


def test_distinct_columns_equal_a_brute_force():
    """``_distinct_columns``: the first of each set of bitwise-equal columns (-0.0 as +0.0),
    whether or not rows sharing their first 8 entries differ further on."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(40, 3))
    X[[7, 20, 33]] = X[3]
    X[25] = X[5]
    B = gaussian_gram(X, gamma=1.0)
    B[:10, :10] = 0.5  # rows 0..9 share their first 8 entries; only 3 and 7 stay equal
    B[3, 12:] = B[7, 12:] = -0.0
    B[:, 3], B[:, 7] = B[3], B[7]
    B[7, 12] = 0.0
    want = [j for j in range(len(B)) if not any(
        np.array_equal(B[i] + 0.0, B[j] + 0.0) for i in range(j))]
    got = solve._distinct_columns(B)
    np.testing.assert_array_equal(got, want)
    assert set(range(len(B))) - set(got) == {7, 33}  # 7 repeats 3 (its -0.0 as +0.0), 33 repeats 20
    np.testing.assert_array_equal(solve._distinct_columns(np.eye(5)), np.arange(5))


def test_idle_window_started_at_the_pass_end_is_not_slept_again(monkeypatch):
    """A window started earlier (``start_idle_window``, at the end of a pass) is measured from
    its start: no sleep once ``_IDLE_WINDOW`` has passed, the rest of it otherwise; the
    free cores are counted over the whole window."""
    import io
    import os
    import time
    import types

    import distsketch.options as mo

    stats = iter(["cpu  1000 0 0 5000 0 0 0 0 0 0\n", "cpu  1200 0 0 5200 0 0 0 0 0 0\n"])
    real_open = open

    def fake_open(path, *a, **kw):
        return io.StringIO(next(stats)) if path == "/proc/stat" else real_open(path, *a, **kw)

    slept = []
    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(os, "times", lambda: types.SimpleNamespace(user=0.0, system=0.0))
    monkeypatch.setattr(os, "sysconf", lambda name: 100)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(time, "sleep", slept.append)
    start = (time.monotonic() - 1.0, mo._cpu_sample())  # started a second ago
    assert mo._idle_cores(window=0.05, start=start) == pytest.approx(1.0)  # 200 of 400 idle
    assert slept == [0.0]
    stats = iter(["cpu  0 0 0 0 0 0 0 0 0 0\n", "cpu  0 0 0 400 0 0 0 0 0 0\n"])
    start = (time.monotonic(), mo._cpu_sample())  # just now: the rest of the window is slept
    assert mo._idle_cores(window=0.05, start=start) == pytest.approx(2.0)
    assert 0.0 < slept[-1] <= 0.05
    # the pass's end starts the window that the driver's rule then uses
    monkeypatch.setattr(mo, "_IDLE_SAMPLE", [-float("inf"), 0.0])
    stats = iter(["cpu  0 0 0 0 0 0 0 0 0 0\n", "cpu  0 0 0 400 0 0 0 0 0 0\n"])
    mo.start_idle_window()
    assert len(mo._IDLE_START) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert mo.driver_blas_threads(5000) == 2 and mo._IDLE_START == []


@pytest.mark.parametrize("m", [5, 256, 300, 700])
def test_sym_inplace_is_sym(m):
    """The in-place tiled symmetrisation gives ``sym``'s values bitwise."""
    A = np.random.default_rng(m).normal(size=(m, m))
    want = solve.sym(A)
    got = solve._sym_inplace(A.copy())
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("repeat", [False, True])
def test_factorisations_reuse_the_certificate_array_bitwise(repeat):
    """The certificate of ``B``'s columns leaves its array to the first factorisation of
    ``H`` (``InputSolution._scratch``), the safety test's to the solving one: each factor is
    bitwise a fresh factorisation of ``G_kk + nλB_kk``, and no buffer stays on the solution."""
    from scipy.linalg import cholesky

    k, R, X, _, _ = _krr_problem(seed=3)
    if repeat:  # a repeated landmark: the distinct-columns certificate
        R[1] = R[0]
    sums = pass_sums(k, R, X)
    sol = solve.solve_input(sums["G"], sums["B"], n=len(X), rtol=1e-10)
    assert sol.whitening_route == ("distinct" if repeat else "cholesky")
    assert sol.__dict__["_scratch"].shape == sol.H.shape
    want = cholesky(sol.H + len(X) * LAM * sol.metric, lower=True)
    L = sol._factor(LAM)
    assert "_scratch" not in sol.__dict__
    np.testing.assert_array_equal(np.tril(L), want)
    np.testing.assert_array_equal(np.tril(sol._factor(2 * LAM)),
                                  cholesky(sol.H + 2 * len(X) * LAM * sol.metric, lower=True))


def test_output_whitening_takes_its_own_orders_blas_threads(small_problem, monkeypatch):
    """The output side's whitening runs in the thread context of its own order ``m_Y``
    (one BLAS thread below 1000 by the rule), not in the input side's."""
    import contextlib

    import distsketch.models.sisokr as models

    X, Y, _, _ = small_problem
    active, seen = [], []

    def threads(size):
        @contextlib.contextmanager
        def ctx():
            active.append(size)
            try:
                yield
            finally:
                active.pop()
        return ctx()

    real = solve.whitening

    def whitening(B, **kw):
        seen.append((B.shape[0], list(active)))
        return real(B, **kw)

    monkeypatch.setattr(models, "driver_threads", threads)
    monkeypatch.setattr(direct, "whitening", whitening)
    _sisokr(X, Y, ds.SubSampling(20), ds.GaussianSketch(6))
    assert seen == [(6, [20, 6])]  # inside the input side's context, in its own order's
