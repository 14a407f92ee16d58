"""What cross-validation from one pass costs: SISOKRCV against one plain SISOKR fit.

Protocol
--------
- Data: Bibtex (``_common.load_bibtex``: 4 880 training rows, 1 836 → 159), the paper's SISOKR
  setting: ``SubSampling(--m-in)`` in, ``PSparsified(--m-out, 20/n, gaussian)`` out,
  σ²_x = σ²_y = 1e4.
- Plain: ``SISOKR(lam=1e-5)`` fit. CV: ``SISOKRCV(lams=10 values in [1e-7, 1e-3],
  ranks=10 values in [8, m_out], cv=5)`` — 500 (fold, λ, p) scores — then its refit at the best
  (λ, p). Both timed from the raw rows, median of ``--repeats``; test F1 of both (decoding
  over the training label vectors) is reported, not timed.
- The driver runs single-threaded BLAS (``distsketch.blas-threads = 1``) in both; SISOKRCV
  spreads its independent folds over one thread per core (``Tuning.fold_threads = None``,
  the default). A third row times SISOKRCV with
  ``options=EngineOptions(tuning=Tuning(fold_threads=1))`` (every fold on the driver's one
  thread) so the gain from the algebra and from the threads can be told apart.
- Each fold's algebra takes the Woodbury route or the band route by
  ``distsketch.model_selection.fold_algebra.fold_route`` (Bibtex: Woodbury); a fourth row forces the band route
  (``Tuning(fold_route="band")``) for the comparison.
- The fold algebra alone (``sisokr_fold_scores`` on the sums of the first CV fit, captured):
  wall and process CPU seconds per route, with the folds on one thread per core and on one
  thread, ``--fold-repeats`` alternated runs (median). The machine is shared: the 1-minute
  load average is recorded with every timing.
- Each timed fit of the first two rows is split into its parts (``part_timer``): the pass
  (``fit_pass``), the driver solve (``solve_sisokr``: whitening, for SISOKRCV the
  eigendecomposition of H), the fold scores (``sisokr_fold_scores``) and the rest; wall and
  process CPU seconds, medians over the fits.
- Target: 5 folds × 10 λ × 10 p in ≤ 2× one plain fit's time.

Writes the ``cv`` section of ENGINE.md and results/cv.jsonl (not with ``--quick`` or
``--no-record``, which prints the section: runs on a loaded machine).

    python benchmarks/bench_cv.py [--repeats 3] [--fold-repeats 2] [--quick] [--no-record]
"""

from __future__ import annotations

import os
import time

import numpy as np

from _common import bibtex_dir, load_bibtex, parser, record, require


def main() -> None:
    ap = parser(__doc__, quick="800 training rows, m_in = 200, m_out = 40, 1 fit of each",
                repeats=3, repeats_help="timed fits of each kind (median)")
    ap.add_argument("--m-in", type=int, default=2250)
    ap.add_argument("--m-out", type=int, default=200)
    ap.add_argument("--fold-repeats", type=int, default=2)
    args = ap.parse_args()
    require(bibtex_dir() / "bibtex-train.arff", "Bibtex data")
    import distsketch as ds
    from distsketch.metrics import f1_samples

    X, Y, Xte, Yte = load_bibtex()
    if args.quick:
        rows = np.sort(np.random.default_rng(0).choice(len(X), 800, replace=False))
        X, Y, args.m_in, args.m_out, args.repeats = X[rows], Y[rows], 200, 40, 1
        args.fold_repeats = 1
        Xte, Yte = Xte[:200], Yte[:200]
    n = len(X)
    lams = [float(v) for v in np.logspace(-7, -3, 10)]
    ranks = [int(v) for v in np.unique(np.linspace(8, args.m_out, 10).astype(int))]
    kx, ky = ds.Gaussian(1.0 / (2 * 1e4)), ds.Gaussian(1.0 / (2 * 1e4))

    def sketches():
        return dict(input_sketch=ds.SubSampling(args.m_in),
                    output_sketch=ds.PSparsified(args.m_out, p=20.0 / n, kind="gaussian"))

    loads = []
    parts = {}  # fit label -> one dict per fit: part -> (wall s, process CPU s)

    def timed(make, label=None):
        out = []
        for r in range(args.repeats):
            loads.append(os.getloadavg()[0])
            with part_timer() as seen:
                t, c = time.perf_counter(), time.process_time()
                model = make(r).fit(X, Y)
                seen["total"] = (time.perf_counter() - t, time.process_time() - c)
            if label:
                parts.setdefault(label, []).append(seen)
            out.append((time.perf_counter() - t, model))
        return float(np.median([t for t, _ in out])), out[-1][1]

    import distsketch.model_selection.fold_algebra
    import distsketch.model_selection.sisokr_cv

    captured = []
    real_scores = distsketch.model_selection.sisokr_cv.sisokr_fold_scores

    def capture(*a, **kw):  # the fold sums of the first CV fit, for the fold algebra alone
        if not captured:
            captured.append((a, kw))
        return real_scores(*a, **kw)

    plain_s, plain = timed(lambda r: ds.SISOKR(kx, ky, lam=1e-5, random_state=r, **sketches()),
                           "plain")
    distsketch.model_selection.sisokr_cv.sisokr_fold_scores = capture
    try:
        cv_s, cv = timed(lambda r: ds.SISOKRCV(kx, ky, lams=lams, ranks=ranks, cv=5, scoring="surrogate",
                                              random_state=r, **sketches()), "cv")
    finally:
        distsketch.model_selection.sisokr_cv.sisokr_fold_scores = real_scores

    def forced(threads=None, route=None):
        options = ds.EngineOptions(tuning=ds.Tuning(fold_threads=threads, fold_route=route))
        return timed(lambda r: ds.SISOKRCV(kx, ky, lams=lams, ranks=ranks, cv=5, scoring="surrogate",
                                          random_state=r, options=options, **sketches()))[0]

    cv1_s = forced(threads=1)
    cv_band_s = forced(route="band")
    routes = fold_algebra(captured[0], args.fold_repeats)
    row = {"n": n, "m_in": args.m_in, "m_out": args.m_out, "plain_s": plain_s, "cv_s": cv_s,
           "ratio": cv_s / plain_s, "cv_one_thread_s": cv1_s, "ratio_one_thread": cv1_s / plain_s,
           "cv_band_s": cv_band_s, "ratio_band": cv_band_s / plain_s,
           "fold_routes": distsketch.model_selection.fold_algebra.fold_route(
               n // 5, m=args.m_in, r=captured[0][0][0].shape[1], r_y=args.m_out,
               n_lams=len(lams)),
           "fold_algebra": routes, "load1": loads, "parts": part_medians(parts),
           "n_scores": 5 * len(lams) * len(ranks),
           "best_params": cv.best_params_, "plain_f1": f1_samples(Yte, plain.predict(Xte)),
           "cv_f1": f1_samples(Yte, cv.predict(Xte))}
    print(row, flush=True)
    md = (f"Bibtex (n = {n}), SISOKR with SubSampling({args.m_in}) in and "
          f"PSparsified({args.m_out}, 20/n) out; medians of {args.repeats} fits from the raw "
          f"rows. Target: 5 folds × 10 λ × 10 p in ≤ 2× one plain fit. The driver "
          f"runs single-threaded BLAS in every fit; SISOKRCV computes its folds' algebra "
          f"(per fold by the route `fold_route` picks: a pivoted Cholesky factor of G_k and a "
          f"Woodbury solve per λ, or the congruence P^T G_k P, one band reduction and a banded "
          f"solve per λ) on one thread per core unless `Tuning(fold_threads=1)`.\n\n"
          f"| fit | time (s) | ratio | test F1 |\n|---|---|---|---|\n"
          f"| SISOKR, λ = 1e-5, full rank | {plain_s:.2f} | 1 | {100 * row['plain_f1']:.1f} |\n"
          f"| SISOKRCV: 5 folds × {len(lams)} λ × {len(ranks)} ranks ({row['n_scores']} scores) "
          f"+ refit at λ = {cv.best_params_['lam']:.3g}, p = {cv.best_params_['rank']} | "
          f"{cv_s:.2f} | {row['ratio']:.2f}× | {100 * row['cv_f1']:.1f} |\n"
          f"| the same, folds on the driver's one thread (`fold_threads=1`) | {cv1_s:.2f} | "
          f"{row['ratio_one_thread']:.2f}× | same |\n"
          f"| the same, every fold by the band route (`fold_route=\"band\"`) | "
          f"{cv_band_s:.2f} | {row['ratio_band']:.2f}× | same |\n\n"
          f"1-minute load average at the start of each fit: "
          f"{', '.join(f'{v:.1f}' for v in loads)} (2 cores).\n\n"
          f"Parts of the timed fits (medians over the fits; wall / process CPU seconds; "
          f"pass = `fit_pass`, solve = `solve_sisokr` (the refit's whitening and, for the "
          f"CV, the eigendecomposition of H), folds = `sisokr_fold_scores`, rest = the "
          f"remainder of `fit`):\n\n| fit | pass | solve | folds | rest | total |\n"
          f"|---|---|---|---|---|---|\n" + "\n".join(
              f"| {label} | " + " | ".join(
                  f"{v[0]:.2f} / {v[1]:.2f}" if v else "–"
                  for v in (row["parts"][label].get(p) for p in
                            ("pass", "solve", "folds", "rest", "total"))) + " |"
              for label in row["parts"]) + "\n\n"
          f"The fold algebra alone (`sisokr_fold_scores` on the first CV fit's sums; "
          f"r_X = {captured[0][0][0].shape[1]}; route rule: {row['fold_routes']}), median of "
          f"{args.fold_repeats} alternated runs:\n\n"
          f"| route | fold threads | wall (s) | process CPU (s) | load (1 min) |\n"
          f"|---|---|---|---|---|\n" + "\n".join(
              f"| {r['route']} | {r['threads']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
              f"{', '.join(f'{v:.1f}' for v in r['load1'])} |" for r in routes[:-1])
          + f"\n\nLargest |Woodbury − band| score per λ (over folds and ranks; scores up to "
          f"{routes[-1]['max_abs_score']:.2g}): "
          f"{', '.join(f'{v:.1e}' for v in routes[-1]['max_abs_diff_per_lam'])}. Fold 0: "
          f"pivoted Cholesky factor of rank {routes[-1]['fold0_rank']} and U = P^T L in "
          f"{routes[-1]['fold0_factor_cpu_s']:.2f} CPU-s (an eigendecomposition of G_0 with vectors: "
          f"{routes[-1]['fold0_eigh_cpu_s']:.2f} CPU-s, "
          f"{routes[-1]['fold0_eigs_above_1e-13']} above 1e-13·max).")
    record("cv", md, {**row, "lams": lams, "ranks": ranks}, args=args)


class part_timer:
    """Context manager: wall and process CPU seconds of the pass (``fit_pass``), the driver
    solve (``solve_sisokr``) and the fold scores (``sisokr_fold_scores``) of one fit, by
    wrapping the names the estimators call; yields the dict it fills (``"rest"`` added on
    exit from ``"total"``, which the caller sets)."""

    targets = (("distsketch.models.base", "fit_pass", "pass"),
               ("distsketch.models.sisokr", "solve_sisokr", "solve"),
               ("distsketch.model_selection.sisokr_cv", "sisokr_fold_scores", "folds"))

    def __enter__(self):
        import importlib

        self.seen, self.saved = {}, []
        for module, name, label in self.targets:
            mod = importlib.import_module(module)
            real = getattr(mod, name)
            self.saved.append((mod, name, real))
            setattr(mod, name, self._wrap(real, label))
        return self.seen

    def _wrap(self, real, label):
        def timed(*a, **kw):
            t, c = time.perf_counter(), time.process_time()
            try:
                return real(*a, **kw)
            finally:
                w0, c0 = self.seen.get(label, (0.0, 0.0))
                self.seen[label] = (w0 + time.perf_counter() - t, c0 + time.process_time() - c)
        return timed

    def __exit__(self, *exc):
        for mod, name, real in self.saved:
            setattr(mod, name, real)
        if "total" in self.seen:
            tw, tc = self.seen["total"]
            done = [v for k, v in self.seen.items() if k != "total"]
            self.seen["rest"] = (tw - sum(v[0] for v in done), tc - sum(v[1] for v in done))
        return False


def part_medians(parts: dict) -> dict:
    """``{fit label: {part: [median wall, median CPU]}}`` over the fits of each label."""
    out = {}
    for label, fits in parts.items():
        names = sorted({k for f in fits for k in f})
        out[label] = {k: [float(np.median([f[k][i] for f in fits if k in f])) for i in (0, 1)]
                      for k in names}
    return out


def fold_algebra(captured, repeats: int) -> list[dict]:
    """Wall and process CPU seconds of ``sisokr_fold_scores`` on captured arguments, per
    route and fold threads (one thread per core, one), runs alternated, medians."""
    from threadpoolctl import threadpool_limits

    import distsketch as ds
    import distsketch.model_selection.fold_algebra

    args, kwargs = captured
    out, scores = [], {}
    for threads in (None, 1):
        runs = {"woodbury": [], "band": []}
        for _ in range(repeats):
            for route in runs:
                tuning = ds.Tuning(fold_threads=threads, fold_route=route)
                load = os.getloadavg()[0]
                t, c = time.perf_counter(), time.process_time()
                with threadpool_limits(1):  # as in a fit (distsketch.blas-threads = 1)
                    scores[route] = distsketch.model_selection.fold_algebra.sisokr_fold_scores(
                        *args, **{**kwargs, "tuning": tuning})[0]
                runs[route].append((time.perf_counter() - t, time.process_time() - c, load))
        for route, v in runs.items():
            v = np.array(v)
            out.append({"route": route, "threads": "per core" if threads is None else threads,
                        "wall_s": float(np.median(v[:, 0])), "cpu_s": float(np.median(v[:, 1])),
                        "load1": v[:, 2].tolist()})
        print(out[-2:], flush=True)
    # the routes' agreement, per λ (the largest over folds and ranks), and the factor of fold 0
    diff = np.abs(scores["woodbury"] - scores["band"]).reshape(len(scores["band"]),
                                                                len(kwargs["lams"]), -1)
    P, G0 = args[0], args[4][0]
    with threadpool_limits(1):
        t = time.process_time()
        U = distsketch.model_selection.fold_algebra.fold_factor(G0, P)
        t_factor = time.process_time() - t
        t = time.process_time()
        w = np.linalg.eigh(G0)[0]  # with vectors: what a factor by eigendecomposition needs
        t_eig = time.process_time() - t
    out.append({"max_abs_diff_per_lam": diff.max(axis=(0, 2)).tolist(),
                "max_abs_score": float(np.abs(scores["band"]).max()),
                "fold0_rank": int(U.shape[1]), "fold0_factor_cpu_s": t_factor,
                "fold0_eigh_cpu_s": t_eig,
                "fold0_eigs_above_1e-13": int((w > 1e-13 * w[-1]).sum())})
    print(out[-1], flush=True)
    return out


if __name__ == "__main__":
    main()
