"""Sweeps over several row segments and the warm re-solve of a fitted λ path over them.

A sweep over segments (:class:`distsketch.engine.sweep.Segments`: held blocks, stored ``C`` with
its checksums, recomputed blocks, each with its targets) gives the one-segment sweep's sums:
bitwise when the segments' block boundaries are the one-segment sweep's (the same items, the
same fixed tree), to rounding otherwise; rows are named globally (``Iterate.exclude``, the
gathered band). The Lipschitz routes (Newton, ADMM) and PCG re-solve a path fitted on rows A
over segments [A's stored blocks, B's blocks] from the fitted coefficients: certified on all
rows, equal to a fresh fit on A ∪ B with the same sketch within the certificate's bound, in
fewer iterations than the cold fit.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch._hashing import checksum
from distsketch.engine.rows import as_row_source
from distsketch.engine.sweep import Iterate, Segment, Segments, SweepData, Sweeper
from distsketch.losses.radial import EpsilonInsensitive
from distsketch.solvers.lipschitz import newton
from reference.lipschitz import data as lip_data
from reference.lipschitz import held_sweep_data

GAMMA = 0.5
F64 = ds.EngineOptions(block_dtype="float64", block_rows=64)


def _held(C, y, rows):
    n, m = C.shape
    return Segment(SweepData(n=n, block_rows=rows, m=m, d=1, C=None, crcs=(), x=None,
                             dtype=np.dtype("float64"),
                             held=tuple(C[s:s + rows] for s in range(0, n, rows))),
                   as_row_source(y, argument="y", allow_1d=True))


def _stored(C, y, rows, group, name):
    n, m = C.shape
    arr = group.create_array(name, shape=(n, m), chunks=(rows, m), dtype="float64")
    arr[:] = C
    crcs = tuple(checksum(np.ascontiguousarray(C[s:s + rows])) for s in range(0, n, rows))
    return Segment(SweepData(n=n, block_rows=rows, m=m, d=1, C=arr, crcs=crcs, x=None,
                             dtype=np.dtype("float64"), location=name),
                   as_row_source(y, argument="y", allow_1d=True))


def _iterate(rng, exclude=None, base=None):
    return Iterate(EpsilonInsensitive(0.3), rng.normal(size=(9, 1)) * 0.3, np.array([0.1]),
                   rng.normal(size=(9, 1)) * 0.05, np.array([0.01]), 0.5, newton.GRID,
                   collect=exclude is None, window=3.0 if exclude is None else 0.0,
                   exclude=exclude, base=base)


def _assert_same(out, ref, *, bitwise):
    assert sorted(out) == sorted(ref)
    for key in ref:
        if bitwise:
            assert np.array_equal(out[key], ref[key]), key
        else:
            scale = max(1.0, float(np.abs(ref[key]).max())) if np.size(ref[key]) else 1.0
            np.testing.assert_allclose(out[key], ref[key], rtol=0, atol=1e-12 * scale,
                                       err_msg=key)


@pytest.mark.parametrize("exclude", [False, True], ids=["window", "exclude"])
def test_segments_at_block_boundaries_are_bitwise_one_sweep(exclude):
    """Held blocks split into two segments at a block boundary, and the same rows stored in
    two zarr arrays (checked by their CRC-32), give bitwise the one-segment sweep's sums:
    the same items in the same order, added in the same tree. Gathered rows (``E_row``) and
    excluded rows are global indices."""
    data, X, Y, C, y, rng = held_sweep_data(n=230, m=9, rows=50)
    ex = np.array([3, 77, 151, 152, 229]) if exclude else None
    it = _iterate(rng, ex, base=0.0 if exclude else None)
    ref = Sweeper(data, X, Y, split_every=2)(it)
    one, Xs, Ys = Segments.of([_held(C, y, 50)])
    _assert_same(Sweeper(one, Xs, Ys, split_every=2)(it), ref, bitwise=True)
    two, Xs, Ys = Segments.of([_held(C[:150], y[:150], 50), _held(C[150:], y[150:], 50)])
    assert two.n == 230 and two.n_blocks == 5 and two.offsets == (0, 150)
    assert two.rows(3) == (150, 200) and two.rows(4) == (200, 230)
    _assert_same(Sweeper(two, Xs, Ys, split_every=2)(it), ref, bitwise=True)
    group = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    stored, Xs, Ys = Segments.of([_stored(C[:150], y[:150], 50, group, "a"),
                                  _stored(C[150:], y[150:], 50, group, "b")])
    _assert_same(Sweeper(stored, Xs, Ys, split_every=2)(it), ref, bitwise=True)
    if not exclude:
        assert len(ref["E_row"]) and ref["E_row"].max() >= 150  # gathered in segment two


def test_segments_elsewhere_equal_one_sweep_to_rounding():
    """Segments whose blocks are not the one-segment sweep's (130 + 100 rows in blocks of
    50 and 40) give its sums to rounding (another grouping of the same terms), and its
    gathered rows; a damaged stored block names its segment's store."""
    from distsketch.engine.storeguard import StoreError

    data, X, Y, C, y, rng = held_sweep_data(n=230, m=9, rows=50)
    it = _iterate(rng)
    ref = Sweeper(data, X, Y, split_every=2)(it)
    group = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    segs = [_stored(C[:130], y[:130], 50, group, "a"), _held(C[130:], y[130:], 40)]
    two, Xs, Ys = Segments.of(segs)
    assert two.held is None and two.n_blocks == 3 + 3
    out = Sweeper(two, Xs, Ys, split_every=2)(it)
    _assert_same({k: v for k, v in out.items() if not k.startswith("E_")},
                 {k: v for k, v in ref.items() if not k.startswith("E_")}, bitwise=False)
    assert np.array_equal(np.sort(out["E_row"]), np.sort(ref["E_row"]))
    group["a"][60:61] = C[60:61] + 1.0
    with pytest.raises(StoreError, match="'a': block 1 \\(rows 50–99\\)"):
        Sweeper(two, Xs, Ys, split_every=2)(it)


def test_segments_refuse_mismatched_parts():
    data, X, Y, C, y, rng = held_sweep_data(n=60, m=9, rows=20)
    with pytest.raises(ValueError, match="at least one"):
        Segments.of([])
    with pytest.raises(ValueError, match="m = 9"):
        Segments.of([_held(C, y, 20), _held(C[:, :4], y, 20)])


# --------------------------------------------------------------------------- warm re-solve


def _features(model, X):
    """``C = k(X, X_J) R_mixᵀ`` of ``model``'s realised sketch, as its sweeps compute it."""
    from distsketch.engine.features import FeatureMap

    return FeatureMap(model.kernel_, model.landmarks_, model.sketch_, F64.gram_chunk,
                      F64.tuning).block(X, dtype=np.float64)


def _problem_of(monkeypatch):
    """Record the Lipschitz problem of each fit."""
    seen = []
    orig = ds.SketchedRegressor._lipschitz_problem

    def spy(self, spec, res):
        out = orig(self, spec, res)
        seen.append(out[0])
        return out

    monkeypatch.setattr(ds.SketchedRegressor, "_lipschitz_problem", spy)
    return seen


@pytest.mark.parametrize("solver, tol, intercept", [
    ("newton", 1e-9, False), ("newton", 1e-9, True), ("admm", 1e-6, True)],
    ids=["newton-no-intercept", "newton-intercept", "admm-intercept"])
def test_warm_resolve_over_appended_rows_equals_fresh_fit(tmp_path, monkeypatch, solver, tol,
                                                          intercept):
    """Fit on 400 rows A with a store; re-solve over [A's stored C, 40 rows B's blocks] from
    the fitted path: every λ certified on all rows (gap ≤ tol), the coefficients within the
    strong convexity bound ``‖Ξ − Ξ*‖ ≤ √(2·tol·P/λ)`` of a fresh fit on A ∪ B with
    ``sketch=model.sketch_`` (so each of the two, and predictions within ``‖φ(x)‖‖S‖`` times
    that on test rows). The iteration counts are printed (not fewer than the fresh fit's in
    every case: docs/design/lipschitz.md, "Segments and warm starts"); the same rows again
    take ADMM, from the fit's own ``Z, U``, a fraction of the fit's iterations, and Newton's
    first sweep is at the given start."""
    from distsketch.engine.store import CSUM, open_fit_store
    from distsketch.solvers.lipschitz.problem import SolverState
    from distsketch.solvers.lipschitz.resolve import fitted_duals, resolve_path

    X, y = lip_data(440, seed=3)
    XA, yA, XB, yB = X[:400], y[:400], X[400:], y[400:]
    lams = (1e-2, 1e-3)
    # the iterations themselves (not the whole problem solved exactly from the first point)
    options = ds.EngineOptions(block_dtype="float64", block_rows=64,
                               tuning=ds.Tuning(whole_problem_entries=0))
    kw = dict(loss=EpsilonInsensitive(0.2), lam=lams, tol=tol, max_iter=5000,
              fit_intercept=intercept, solver=solver, options=options)
    probs = _problem_of(monkeypatch)
    fit = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(25),
                               random_state=4, store=tmp_path / "a.zarr", **kw).fit(XA, yA)
    cold = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), sketch=fit.sketch_, **kw).fit(X, y)
    prob_A, prob_cold = probs
    fs = open_fit_store(tmp_path / "a.zarr")
    C_A = fs.pass_arrays()[0]
    seg_A = Segment(SweepData(n=400, block_rows=64, m=C_A.shape[1], d=1, C=C_A,
                              crcs=tuple(int(v) for v in fs.records()[:, CSUM]), x=None,
                              dtype=np.dtype("float64"), location=fs.location),
                    as_row_source(yA, argument="y", allow_1d=True))
    C_B = _features(fit, XB)
    seg_B = _held(C_B, yB, 64)
    prob = prob_A.with_rows(G=C_B.T @ C_B, s=C_B.sum(axis=0), b=C_B.T @ yB, y1=yB.sum(),
                            n=len(XB))
    scale = np.abs(prob_cold.Gt).max()
    np.testing.assert_allclose(prob.Gt, prob_cold.Gt, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(prob.b, prob_cold.b, rtol=0, atol=1e-12 * np.abs(prob.b).max())
    assert np.array_equal(prob.T, prob_cold.T)  # same sketch, same B: the same whitening
    duals = None
    if solver == "admm":  # the fit's Z, U and ρ of each λ, from its store
        groups = [grp for _, grp in fs.group["solver"].groups()]
        found = [(fitted_duals(grp), SolverState(grp).load()) for grp in groups]
        duals = [next(du for du, st in found
                      if du is not None and np.array_equal(st["Xi"], fit.coefs_[k]))
                 for k in range(len(lams))]
        assert all(len(du["Z"]) == len(XA) for du in duals)
    out = resolve_path(prob, lams, [seg_A, seg_B], coefs=fit.coefs_,
                       intercepts=fit.intercepts_, basis=fit.whitening_, solver=solver,
                       tol=tol, max_iter=5000, whole_entries=0, duals=duals)
    path = out.path
    assert np.all(path.duality_gaps <= tol)
    assert np.all(cold.duality_gaps_ <= tol)
    XT = lip_data(50, seed=9)[0]
    CT = _features(fit, XT)
    for k, lam in enumerate(lams):
        P = max(path.objectives[k], cold.objectives_[k])
        assert abs(path.objectives[k] - cold.objectives_[k]) <= tol * P * (1 + 1e-9)
        bound = 2.0 * np.sqrt(2.0 * tol * P / lam)
        dXi = np.linalg.norm(path.coefs[k] - cold.coefs_[k])
        assert dXi <= bound, (k, dXi, bound)
        if not intercept:
            pred = CT @ prob.coef(path.coefs[k])[:, 0]
            ref = cold.set_lam(lam).predict(XT)
            phi = np.linalg.norm(CT @ prob.T, axis=1)
            assert np.all(np.abs(pred - ref) <= phi * np.linalg.norm(prob.S, 2) * bound
                          + 1e-10 * np.abs(ref).max())
    warm_iters, cold_iters = int(path.n_iters.sum()), int(cold.n_iters_.sum())
    print(f"{solver} intercept={intercept}: warm {path.n_iters.tolist()} ({out.n_sweeps} "
          f"sweeps) against cold {cold.n_iters_.tolist()}")
    assert out.n_sweeps == warm_iters
    print(f"{solver}: fewer iterations than cold: {warm_iters < cold_iters}")
    # the same rows again: ADMM from its own Z, U certifies in a fraction of the fit's
    # iterations; Newton's continuation and polishes run again (about the fit's count)
    again = resolve_path(prob_A, lams, [seg_A], coefs=fit.coefs_, intercepts=fit.intercepts_,
                         solver=solver, tol=tol, max_iter=5000, whole_entries=0, duals=duals)
    assert np.all(again.path.duality_gaps <= tol)
    print(f"{solver}: the same rows again, {again.path.n_iters.tolist()} iterations "
          f"(the fit: {fit.n_iters_.tolist()})")
    if solver == "admm":
        assert 4 * again.path.n_iters.sum() < fit.n_iters_.sum()
    else:  # the start is the given one: one sweep, stopped there, returns it
        with pytest.warns(Warning, match="max_iter = 1"):
            one = resolve_path(prob, lams, [seg_A, seg_B], coefs=fit.coefs_,
                               intercepts=fit.intercepts_, solver=solver, tol=tol, max_iter=1,
                               whole_entries=0)
        assert np.array_equal(one.path.coefs, fit.coefs_)
        assert np.array_equal(one.path.intercepts, fit.intercepts_)


def test_warm_starts_map_another_basis():
    """Coefficients in another whitening ``T' = T Q`` (Q orthogonal) map to ``Ξ = Q Ξ'``
    (the same function); in the problem's own basis they are taken bitwise."""
    from distsketch.solvers.lipschitz.problem import Problem
    from distsketch.solvers.lipschitz.resolve import warm_starts

    rng = np.random.default_rng(1)
    T = rng.normal(size=(7, 5))
    Q = np.linalg.qr(rng.normal(size=(5, 5)))[0]
    prob = Problem(T=T, S=np.eye(2), nu=np.ones(2), U=np.eye(2), Gt=np.eye(8),
                   b=np.zeros((7, 2)), y1=np.zeros(2), n=10, loss=EpsilonInsensitive(0.1),
                   intercept=True)
    coefs, b0 = rng.normal(size=(3, 5, 2)), rng.normal(size=(3, 2))
    out = warm_starts(prob, coefs, b0, basis=T @ Q)
    for (Xi, b), c, bb in zip(out, coefs, b0):
        np.testing.assert_allclose(T @ Xi, T @ Q @ c, rtol=0, atol=1e-12)
        assert np.array_equal(b, bb)
    same = warm_starts(prob, coefs, b0, basis=T)
    assert all(np.array_equal(Xi, c) for (Xi, _), c in zip(same, coefs))
    with pytest.raises(ValueError, match="expected"):
        warm_starts(prob, coefs[:, :4], b0)


def test_pcg_warm_resolve_over_segments():
    """PCG over segments [A, B] (kernel blocks recomputed from each segment's rows) from a
    path fitted on A: every λ's relative residual ≤ tol on all rows, ``α`` equal to the cold
    PCG on A ∪ B and to the dense solve (to a tolerance of the residual and the system's
    condition), fewer iterations than cold."""
    from distsketch.engine.features import FeatureMap
    from distsketch.solvers.conjugate_gradient import pcg_path
    from distsketch.solvers.preconditioner import LandmarkGram
    from pcghelpers import data as pcg_data

    X, y = pcg_data(400, seed=2)
    XA, yA, XB, yB = X[:300], y[:300], X[300:], y[300:]
    k = ds.Gaussian(gamma=GAMMA)
    land = X[np.random.default_rng(0).choice(300, 30, replace=False)]
    Kmm = LandmarkGram(FeatureMap(k, land, None, F64.gram_chunk, F64.tuning))
    lams, tol = (1e-2, 1e-4), 1e-10

    def seg(Xs, ys, rows=96):
        return Segment(SweepData(n=len(Xs), block_rows=rows, m=Kmm.m, d=1, C=None, crcs=(),
                                 x=Kmm.fmap, dtype=np.dtype("float64")),
                       as_row_source(ys, argument="y", allow_1d=True),
                       as_row_source(Xs, argument="X"))

    kw = dict(Kmm=Kmm, lams=lams, tol=tol, max_iter=500, fit_intercept=True, centre=True)
    a = seg(XA, yA)
    fitA = pcg_path(a.data, a.X, a.Y, **kw)
    whole = seg(X, y)
    cold = pcg_path(whole.data, whole.X, whole.Y, **kw)
    data, Xs, Ys = Segments.of([seg(XA, yA), seg(XB, yB, 40)])
    warm = pcg_path(data, Xs, Ys, warm=fitA.alphas, **kw)
    assert np.all(warm.converged) and np.all(warm.residuals <= tol)
    Knm = np.asarray(k(X, land))
    Kmm_d = np.asarray(k(land, land))
    Kc = Knm - Knm.mean(axis=0)
    for j, lam in enumerate(lams):
        H = Kc.T @ Kc + len(X) * lam * Kmm_d
        ref = np.linalg.solve(H, Kc.T @ (y - y.mean()))
        cond = np.linalg.cond(H)
        np.testing.assert_allclose(warm.alphas[j][:, 0], ref, rtol=0,
                                   atol=cond * tol * np.abs(ref).max())
        np.testing.assert_allclose(warm.alphas[j], cold.alphas[j], rtol=0,
                                   atol=2 * cond * tol * np.abs(ref).max())
        np.testing.assert_allclose(warm.intercepts[j], cold.intercepts[j], rtol=0,
                                   atol=1e-6)
    print(f"pcg: warm {list(warm.n_iters)} against cold {list(cold.n_iters)}")
    assert warm.n_iters.sum() < cold.n_iters.sum()
