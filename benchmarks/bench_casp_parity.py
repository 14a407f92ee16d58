"""CASP test-RMSE parity, distsketch vs Nystroem + Ridge at equal landmarks, as m grows.

Per m and sketch seed: λ selected as bench_casp.py does (one default distsketch fit, 80/20
validation split of the training rows); then, at the same landmarks (Nystroem fitted on
distsketch's ``landmarks_``, which keeps all m of them), one distsketch fit per variant on the
λ path [10λ, λ, λ/10], ``fit_intercept=False``, against ``Ridge(alpha=nλ,
fit_intercept=False)`` on the Nyström features and the SVD-stable ridge of the same features
(``w = V Σ (Σ² + nλ)⁻¹ Uᵀy``). The variants (``variants``): the default options (pre-whitened
landmarks, float32 blocks), ``prewhiten=False`` (the sums of ``C`` whitened on the driver), and
both with float64 blocks; ``--rtol-variants`` adds the earlier ``rtol`` sweep of the order
without pre-whitening. ``--timing M``: first, at m = M and the first seed, the default fit
against ``prewhiten=False`` (``store=None``), interleaved, ``--repeats`` times: fit, pass and
pre-whitening seconds.

Prints one JSON record per line; writes them to ``--out`` (and the prototype's to
/tmp/casp_proto.jsonl) unless ``--no-record``. It writes no section: ENGINE.md's
"casp_parity" notes are written by hand from these records.

    python benchmarks/bench_casp_parity.py --m 1000 2000 4000 --seeds 0 1 --timing 2000 [--out results.jsonl]
    CASP_SEEDS=0,1 python benchmarks/bench_casp_parity.py --prototype 1000 2000 4000   # whiten-first prototype

(Data: ``casp/CASP.csv`` of ``$DISTSKETCH_DATA``, else of ``../shared/data`` beside the clone.)
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import bench_casp as bc  # noqa: E402
import distsketch as ds  # noqa: E402

EPS32, EPS64 = float(np.finfo(np.float32).eps), float(np.finfo(np.float64).eps)


def variants(m: int, rtol_sweep: bool = False) -> list[tuple[str, dict]]:
    """``(name, EngineOptions fields)`` of the fits compared at each m."""
    out = [("default (pre-whitened, float32 blocks)", {}),
           ("prewhiten=False (float32 blocks, rtol 1e-10)", {"prewhiten": False}),
           ("pre-whitened, float64 blocks", {"block_dtype": "float64"}),
           ("prewhiten=False, float64 blocks", {"prewhiten": False, "block_dtype": "float64"})]
    if rtol_sweep:  # the order without pre-whitening, at other thresholds
        out += [(f"prewhiten=False, {dt} rtol {r:.1e}", {"prewhiten": False, "block_dtype": dt,
                                                          "rtol": r})
                for dt, rs in (("float32", (1e-12, 1e-14, m * EPS32, EPS32)),
                               ("float64", (1e-12, 1e-14, m * EPS64)))
                for r in rs]
    return out


def kept(model) -> tuple[int, str]:
    sol = model.input_solution_
    return int(sol.T.shape[1]), str(sol.whitening_route)


def timing(X, y, *, gamma, m, seed, lam, repeats, emit) -> None:
    """The default fit against ``prewhiten=False``, interleaved: fit, pass and pre-whitening
    seconds (``store=None``, the numpy input as a user passes it)."""
    from distsketch.engine.prewhiten import prewhitened

    times = _common.watch_pass()
    for r in range(repeats):
        for name, opts in (("default", {}), ("prewhiten=False", {"prewhiten": False}))[
                :: 1 if r % 2 == 0 else -1]:
            est = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=ds.SubSampling(m),
                                 lam=lam, random_state=seed, options=ds.EngineOptions(**opts))
            t = time.perf_counter()
            est.fit(X, y)
            fit_s = time.perf_counter() - t
            rec = {"m": m, "seed": seed, "kind": "timing", "name": name, "repeat": r,
                   "fit_s": fit_s, "pass_s": times.seconds[-1], "load": _common.load_average()}
            if name == "default":  # the pre-whitening alone, again on the same landmarks
                with ds.options.blas_limit():
                    t = time.perf_counter()
                    prewhitened(est.sketch_.inner, ds.Gaussian(gamma), est.landmarks_,
                                rtol=ds.EngineOptions().prewhiten_rtol)
                    rec["prewhiten_s"] = time.perf_counter() - t
            emit(rec)


def main() -> None:
    ap = _common.parser(__doc__, quick="m = 200, seed 0, on 6 000 rows", repeats=2)
    ap.add_argument("--m", type=int, nargs="*", default=[1000, 2000, 4000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--only", nargs="*", default=None, help="substrings of variant names to run")
    ap.add_argument("--rtol-variants", action="store_true",
                    help="also the rtol sweep without pre-whitening")
    ap.add_argument("--timing", type=int, default=None, metavar="M",
                    help="first time the default fit against prewhiten=False at m = M")
    ap.add_argument("--out", default=None)
    ap.add_argument("--prototype", type=int, nargs="+", metavar="M", default=None,
                    help="the whiten-first prototype at these m instead (seeds: $CASP_SEEDS)")
    args = ap.parse_args()
    _common.require(_common.casp_path(), "CASP data")
    if args.prototype:
        prototype(args.prototype, [int(v) for v in os.environ.get("CASP_SEEDS", "0").split(",")],
                  {1000: 1e-8, 2000: 1e-8, 4000: 1e-8},
                  out=None if not _common.recording(args) else "/tmp/casp_proto.jsonl")
        return
    rows = 6_000 if args.quick else None
    if args.quick:
        args.m, args.seeds = [200], [0]
        args.timing = 200 if args.timing else None
    out = open(args.out, "a") if args.out and _common.recording(args) else None

    def emit(rec):
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge

    X, y, Xt, yt = _common.load_casp(0, rows)
    n = len(X)
    gamma, _ = bc.median_gamma(X, 0)
    rmse = bc.rmse
    emit({"kind": "machine", **_common.machine(), "command": _common.command_line()})
    selected: dict = {}

    def lam_of(m, seed):
        if (m, seed) not in selected:
            t0 = time.perf_counter()
            lam, val = bc.select_lam(X, y, gamma=gamma, m=m, seed=seed)
            selected[m, seed] = lam
            emit({"m": m, "seed": seed, "lam": lam, "select_s": time.perf_counter() - t0,
                  "val": {str(k): v for k, v in val.items()}})
        return selected[m, seed]

    if args.timing:
        m, seed = args.timing, args.seeds[0]
        timing(X, y, gamma=gamma, m=m, seed=seed, lam=lam_of(m, seed), repeats=args.repeats,
               emit=emit)
    for m in args.m:
        for seed in args.seeds:
            lam = lam_of(m, seed)
            lams = [10 * lam, lam, lam / 10]

            def fit(opts, lam_=lams):
                t = time.perf_counter()
                mdl = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=ds.SubSampling(m),
                                     lam=lam_, random_state=seed,
                                     options=ds.EngineOptions(**opts)).fit(X, y)
                return mdl, time.perf_counter() - t

            base, base_s = fit({})
            L = base.landmarks_
            t = time.perf_counter()
            nys = Nystroem(n_components=m, gamma=gamma).fit(L)
            Z, Zt = nys.transform(X), nys.transform(Xt)
            nys_s = time.perf_counter() - t
            ridge = {}
            t = time.perf_counter()
            for v in lams:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    reg = Ridge(alpha=n * v, fit_intercept=False).fit(Z, y)
                ridge[v] = reg.predict(Zt)
            ridge_s = time.perf_counter() - t
            t = time.perf_counter()
            U, sv, Vt = np.linalg.svd(Z, full_matrices=False)
            Uty = U.T @ y
            del U
            svd = {v: Zt @ (Vt.T @ (sv / (sv**2 + n * v) * Uty)) for v in lams}
            svd_s = time.perf_counter() - t
            k_eig = np.linalg.eigvalsh(bc._rbf(L, gamma))
            emit({"m": m, "seed": seed, "kind": "setup", "nystroem_s": nys_s, "ridge_s": ridge_s,
                  "svd_s": svd_s, "kjj_eig": [float(k_eig[0]), float(k_eig[-1])],
                  "kjj_below": {f"{r:g}": int((k_eig <= r * k_eig[-1]).sum())
                                for r in (1e-14, 1e-12, 1e-10, 1e-8, EPS32, m * EPS32, 1e-5)},
                  "Z_sv": [float(sv[-1]), float(sv[0])],
                  "rmse_ridge": {str(v): rmse(yt, ridge[v]) for v in lams},
                  "rmse_svd": {str(v): rmse(yt, svd[v]) for v in lams},
                  "ridge_vs_svd": {str(v): float(np.linalg.norm(ridge[v] - svd[v]) / np.linalg.norm(svd[v]))
                                   for v in lams}})

            def report(name, mdl, fit_s):
                rec = {"m": m, "seed": seed, "kind": "variant", "name": name, "fit_s": fit_s,
                       "kept": kept(mdl)[0], "route": kept(mdl)[1],
                       "prewhitened": isinstance(mdl.sketch_, ds.sketches.WhitenedSketch),
                       "rank": int(mdl.sketch_.m)}
                for v in lams:
                    p = mdl.set_lam(v).predict(Xt)
                    r, rr, rs = rmse(yt, p), rmse(yt, ridge[v]), rmse(yt, svd[v])
                    rec[str(v)] = {"rmse": r, "vs_ridge_pct": 100 * (r - rr) / rr,
                                   "vs_svd_pct": 100 * (r - rs) / rs,
                                   "gap_svd": float(np.linalg.norm(p - svd[v]) / np.linalg.norm(svd[v]))}
                emit(rec)

            for name, opts in variants(m, args.rtol_variants):
                if args.only is not None and not any(s in name for s in args.only):
                    continue
                if not opts:
                    mdl, s = base, base_s
                else:
                    mdl, s = fit(opts)
                    assert np.array_equal(mdl.landmarks_, L)
                report(name, mdl, s)
            Z = Zt = svd = ridge = None  # free the features before the next m


# --------------------------------------------------------------------------- prototype
# The fix tested outside distsketch: whiten K_JJ (computed from the landmarks alone, float64)
# *before* forming the Gram, i.e. accumulate (C T)ᵀ(C T) and (C T)ᵀ y, as Nystroem + Ridge do,
# instead of G = CᵀC followed by Tᵀ G T (the pass's sums today). C rounded to float32 or not.


def prototype(m_list, seeds, lam_of, out=None):
    X, y, Xt, yt = _common.load_casp(0, None)
    n = len(X)
    gamma, _ = bc.median_gamma(X, 0)
    from scipy.spatial.distance import cdist

    def rbf(A, B):
        return np.exp(-gamma * cdist(A, B, "sqeuclidean"))

    for m in m_list:
        for seed in seeds:
            lam = lam_of[m]
            lams = [10 * lam, lam, lam / 10]
            L = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=ds.SubSampling(m), lam=lam,
                               random_state=seed).fit(X, y).landmarks_
            K = rbf(L, L)
            s, U = np.linalg.eigh(K)
            C64, Ct = rbf(X, L), rbf(Xt, L)
            C32 = C64.astype(np.float32).astype(np.float64)

            def solve(Z, Zt, tag, extra=None):
                H = Z.T @ Z
                b = Z.T @ y
                e, V = np.linalg.eigh(H)
                Zv, c = Zt @ V, V.T @ b
                return {str(v): Zv @ (c / (e + n * v)) for v in lams}

            # reference: sklearn's normalisation (singular values clipped at 1e-12, all m kept)
            Tn = U / np.sqrt(np.maximum(s, 1e-12))
            ref = solve(C64 @ Tn, Ct @ Tn, "ref")
            rows = {}
            for dt, C in (("f32", C32), ("f64", C64)):
                for rtol in (1e-10, 1e-12, 1e-14):
                    keep = s > rtol * s[-1]
                    T = U[:, keep] / np.sqrt(s[keep])
                    rows[f"whiten-first {dt} rtol {rtol:.1e} (kept {keep.sum()})"] = solve(C @ T, Ct @ T, "")
                # today's order (Gram of C, then whitened), rtol 1e-10 on the exact K_JJ
                if m >= 4000:
                    continue
                keep = s > 1e-10 * s[-1]
                T = U[:, keep] / np.sqrt(s[keep])
                G = C.T @ C
                H = T.T @ G @ T
                e, V = np.linalg.eigh(H)
                c = V.T @ (T.T @ (C.T @ y))
                Zv = Ct @ (T @ V)
                rows[f"gram-first {dt} rtol 1e-10 (kept {keep.sum()})"] = {
                    str(v): Zv @ (c / (e + n * v)) for v in lams}
            for name, p in rows.items():
                rec = {"m": m, "seed": seed, "kind": "prototype", "name": name}
                for v in lams:
                    r, rr = rmse(yt, p[str(v)]), rmse(yt, ref[str(v)])
                    rec[str(v)] = {"rmse": r, "vs_ref_pct": 100 * (r - rr) / rr, "ref_rmse": rr,
                                   "gap": float(np.linalg.norm(p[str(v)] - ref[str(v)]) / np.linalg.norm(ref[str(v)]))}
                print(json.dumps(rec), flush=True)
                if out:
                    with open(out, "a") as f:
                        f.write(json.dumps(rec) + "\n")


rmse = bc.rmse


if __name__ == "__main__":
    main()
