"""What cross-validation from one pass costs: SISOKRCV against one plain SISOKR fit (issue 15).

Protocol
--------
- Data: Bibtex (``bench_bibtex.load``: 4 880 training rows, 1 836 → 159), the paper's SISOKR
  setting: ``SubSampling(--m-in)`` in, ``PSparsified(--m-out, 20/n, gaussian)`` out,
  σ²_x = σ²_y = 1e4.
- Plain: ``SISOKR(lam=1e-5)`` fit. CV: ``SISOKRCV(lams=10 values in [1e-7, 1e-3],
  ranks=10 values in [8, m_out], cv=5)`` — 500 (fold, λ, p) scores — then its refit at the best
  (λ, p). Both timed from the raw rows, median of ``--repeats``; test F1 of both (decoding
  over the training label vectors) is reported, not timed.
- The driver runs single-threaded BLAS (``distsketch.blas-threads = 1``) in both; SISOKRCV
  spreads its independent folds over one thread per core (``distsketch.cv.FOLD_THREADS``,
  default). A third row times SISOKRCV with ``FOLD_THREADS = 1`` (every fold on the driver's
  one thread) so the gain from the algebra and from the threads can be told apart.
- Issue 15's target: 5 folds × 10 λ × 10 p in ≤ 2× one plain fit's time.

Writes the ``cv`` section of RESULTS.md and results/cv.jsonl (not with ``--quick``).

    python benchmarks/bench_cv.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import record
from bench_bibtex import data_dir, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--m-in", type=int, default=2250)
    ap.add_argument("--m-out", type=int, default=200)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    folder = data_dir()
    if not (folder / "bibtex-train.arff").exists():
        print(f"skipped: Bibtex data not found in {folder}")
        return
    import distsketch as ds
    from distsketch.metrics import f1_samples

    X, Y, Xte, Yte = load(folder)
    if args.quick:
        rows = np.sort(np.random.default_rng(0).choice(len(X), 800, replace=False))
        X, Y, args.m_in, args.m_out, args.repeats = X[rows], Y[rows], 200, 40, 1
        Xte, Yte = Xte[:200], Yte[:200]
    n = len(X)
    lams = [float(v) for v in np.logspace(-7, -3, 10)]
    ranks = [int(v) for v in np.unique(np.linspace(8, args.m_out, 10).astype(int))]
    kx, ky = ds.Gaussian(1.0 / (2 * 1e4)), ds.Gaussian(1.0 / (2 * 1e4))

    def sketches():
        return dict(input_sketch=ds.SubSampling(args.m_in),
                    output_sketch=ds.PSparsified(args.m_out, p=20.0 / n, kind="gaussian"))

    def timed(make):
        out = []
        for r in range(args.repeats):
            t = time.perf_counter()
            model = make(r).fit(X, Y)
            out.append((time.perf_counter() - t, model))
        return float(np.median([t for t, _ in out])), out[-1][1]

    plain_s, plain = timed(lambda r: ds.SISOKR(kx, ky, lam=1e-5, random_state=r, **sketches()))
    cv_s, cv = timed(lambda r: ds.SISOKRCV(kx, ky, lams=lams, ranks=ranks, cv=5, random_state=r,
                                          **sketches()))
    import distsketch.cv

    distsketch.cv.FOLD_THREADS = 1
    try:
        cv1_s, _ = timed(lambda r: ds.SISOKRCV(kx, ky, lams=lams, ranks=ranks, cv=5,
                                              random_state=r, **sketches()))
    finally:
        distsketch.cv.FOLD_THREADS = None
    row = {"n": n, "m_in": args.m_in, "m_out": args.m_out, "plain_s": plain_s, "cv_s": cv_s,
           "ratio": cv_s / plain_s, "cv_one_thread_s": cv1_s, "ratio_one_thread": cv1_s / plain_s,
           "n_scores": 5 * len(lams) * len(ranks),
           "best_params": cv.best_params_, "plain_f1": f1_samples(Yte, plain.predict(Xte)),
           "cv_f1": f1_samples(Yte, cv.predict(Xte))}
    print(row, flush=True)
    if args.quick:
        return
    md = (f"Bibtex (n = {n}), SISOKR with SubSampling({args.m_in}) in and "
          f"PSparsified({args.m_out}, 20/n) out; medians of {args.repeats} fits from the raw "
          f"rows. Issue 15's target: 5 folds × 10 λ × 10 p in ≤ 2× one plain fit. The driver "
          f"runs single-threaded BLAS in every fit; SISOKRCV computes its folds' algebra "
          f"(per fold: the congruence P^T G_k P, one band reduction, a banded solve per λ) on "
          f"one thread per core unless `FOLD_THREADS = 1`.\n\n"
          f"| fit | time (s) | ratio | test F1 |\n|---|---|---|---|\n"
          f"| SISOKR, λ = 1e-5, full rank | {plain_s:.2f} | 1 | {100 * row['plain_f1']:.1f} |\n"
          f"| SISOKRCV: 5 folds × {len(lams)} λ × {len(ranks)} ranks ({row['n_scores']} scores) "
          f"+ refit at λ = {cv.best_params_['lam']:.3g}, p = {cv.best_params_['rank']} | "
          f"{cv_s:.2f} | {row['ratio']:.2f}× | {100 * row['cv_f1']:.1f} |\n"
          f"| the same, folds on the driver's one thread (`FOLD_THREADS = 1`) | {cv1_s:.2f} | "
          f"{row['ratio_one_thread']:.2f}× | same |")
    record("cv", md, {**row, "lams": lams, "ranks": ranks})


if __name__ == "__main__":
    main()
