"""Reduced-rank IOKR on USPS completion, λ, p and the input width chosen by SISOKRCV
(Brogat-Motte et al., JMLR 2022, Tables 3 and 6).

Protocol (the conventions under which the paper's figures reproduce)
--------------------------------------------------------------------
- Data: ``usps.h5`` (as ``bench_usps.py``), pixels in [0, 1]; ``x`` = top 8 rows, ``y`` =
  bottom 8 rows. n = ``--n`` training images (the first of a seeded permutation of the 7291),
  the 2007 test images; candidates = all 7291 training bottom halves.
- Output kernel = loss kernel ``exp(−‖y − y'‖² / (2σ²))`` with σ² = 10; loss
  ``2 − 2 k(y, ŷ)`` (``distsketch.metrics.kernel_loss``).
- Input kernel Gaussian ``γ_x = 1/(c · median ‖x_i − x_j‖²)``, c in ``--c``.
- Selection by 5-fold ``SISOKRCV`` on the n training images only (surrogate error, no
  decoding), with ``SubSampling(n)`` on both sides — every row, so the model is IOKR — over
  λ ∈ {1e-6 … 1e-1} × p ∈ {8, 16, 32, 64, 128, 256, n} (p = n: full rank, IOKR), one fit per c.
  IOKR: the best (c, λ) at full rank; RR: the best (c, λ, p) overall.
- Test: mean loss over the 2007 test images, decoding over the 7291 candidates; decoding time
  of each (``predict``, candidate features included), median of ``--repeats``.

Paper: IOKR 0.751, RR 0.734 at p = 64 (Table 3); decoding 9 s → 1 s (Table 6, other hardware).
Writes the ``usps_rr`` section of RESULTS.md and results/usps_rr.jsonl (not with ``--quick``
or ``--no-record``).

    python benchmarks/bench_usps_rr.py [--n 1000] [--c 0.5 1 2 4] [--quick]
"""

from __future__ import annotations

import time

import numpy as np

from _common import load_usps, parser, record, require, usps_path
from bench_usps import median_sq_dist

LAMS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
RANKS = (8, 16, 32, 64, 128, 256)


def main() -> None:
    ap = parser(__doc__, quick="n = 200, the first c, 100 test images, 1 000 candidates, 1 "
                "decoding run", repeats=3, repeats_help="decoding runs (median)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--c", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--split-seed", type=int, default=0)
    args = ap.parse_args()
    require(usps_path(), "USPS data")
    import distsketch as ds
    from distsketch.metrics import kernel_loss

    train, test, _ = load_usps()
    n = 200 if args.quick else args.n
    cs = args.c[:1] if args.quick else args.c
    repeats = 1 if args.quick else args.repeats
    perm = np.random.default_rng(args.split_seed).permutation(len(train))
    X, Y = train[perm[:n], :128], train[perm[:n], 128:]
    Xt, Yt = test[:, :128], test[:, 128:]
    cand = train[:, 128:]
    if args.quick:
        Xt, Yt, cand = Xt[:100], Yt[:100], cand[:1000]
    ky = ds.Gaussian(1.0 / (2 * 10.0))
    med_x = median_sq_dist(X)
    ranks = [p for p in RANKS if p < n] + [n]
    fits = []
    for c in cs:
        t = time.perf_counter()
        model = ds.SISOKRCV(ds.Gaussian(1.0 / (c * med_x)), ky, input_sketch=ds.SubSampling(n),
                            output_sketch=ds.SubSampling(n), lams=LAMS, ranks=ranks, cv=5,
                            scoring="surrogate", random_state=0).fit(X, Y)
        res = model.cv_results_
        full = [j for j, p in enumerate(res["param_rank"]) if p == n]
        j_full = full[int(np.argmax(res["mean_test_score"][full]))]
        fits.append({"c": c, "model": model, "cv_s": time.perf_counter() - t,
                     "rr": (model.best_score_, model.best_params_),
                     "iokr": (float(res["mean_test_score"][j_full]), res["params"][j_full])})
        print({"c": c, "rr": fits[-1]["rr"], "iokr": fits[-1]["iokr"],
               "cv_s": fits[-1]["cv_s"]}, flush=True)
    rows = {}
    for which in ("iokr", "rr"):
        best = max(fits, key=lambda f: f[which][0])
        params = best[which][1]
        model = best["model"].set_lam(params["lam"]).set_rank(
            None if params["rank"] >= n else params["rank"])
        times = []
        for _ in range(repeats):
            model._candidate_features = None  # candidate features computed in every run
            t0 = time.perf_counter()
            P = model.predict(Xt, cand)
            times.append(time.perf_counter() - t0)
        rows[which] = {"c": best["c"], "lam": params["lam"], "rank": params["rank"],
                       "cv_score": best[which][0], "test_loss": float(kernel_loss(ky, Yt, P)),
                       "decode_s": float(np.median(times))}
        print(which, rows[which], flush=True)
    r, i = rows["rr"], rows["iokr"]
    md = (f"USPS completion, n = {n} training images, {len(Xt)} test, candidates = the "
          f"{len(cand)} training bottom halves; pixels in [0, 1]; output and loss kernel "
          f"exp(−‖y−y'‖²/(2·10)), loss 2 − 2k(y, ŷ). Selection by 5-fold `SISOKRCV` on the "
          f"training images (surrogate error), `SubSampling(n)` on both sides (= IOKR), "
          f"λ ∈ {list(LAMS)}, p ∈ {ranks} (p = n: full rank), c ∈ {cs}. Decoding: `predict` "
          f"over all candidates, median of {repeats}.\n\n"
          f"| model | c | λ | p | test loss | decoding (s) | paper |\n|---|---|---|---|---|---|---|\n"
          f"| IOKR | {i['c']} | {i['lam']:g} | full | {i['test_loss']:.4f} | "
          f"{i['decode_s']:.2f} | 0.751, 9 s |\n"
          f"| reduced-rank IOKR | {r['c']} | {r['lam']:g} | "
          f"{r['rank'] if r['rank'] < n else 'full'} | {r['test_loss']:.4f} | "
          f"{r['decode_s']:.2f} | 0.734 at p = 64, 1 s |")
    record("usps_rr", md, {"rows": rows, "n": n, "cv_seconds": [f["cv_s"] for f in fits]},
           args=args)


if __name__ == "__main__":
    main()
