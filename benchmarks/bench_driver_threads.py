"""What the driver's BLAS-thread rule buys once the pass is over.

Protocol
--------
- Data and model: Bibtex (``_common.load_bibtex``: 4 880 rows, 1 836 → 159), SISOKR with
  ``SubSampling(--m-in)`` in and ``PSparsified(--m-out, 20/n, gaussian)`` out, σ²_x = σ²_y = 1e4,
  λ = 1e-5 (the paper's setting, as ``bench_bibtex.py``).
- Three settings of ``distsketch.driver-threads`` (dask config): ``1``, the number of cores,
  and ``"auto"`` (the rule of ``distsketch.options.driver_blas_threads``: the cores found idle
  over a 50 ms sample of /proc/stat once the pass is over, one thread below m = 1000).
- Timed: the whole fit and its driver phase (``SISOKR._solve`` + ``_update_coef``: whitening
  route, factorisations, basis products), medians over ``--repeats`` rounds in rotated order;
  the threads the rule chose are recorded. The pass itself always runs one BLAS thread per
  task (``distsketch.blas-threads``), so only the driver phase can differ.
- Also: one Cholesky factorisation and one ``eigh`` of an m × m SPD matrix with 1 and with all
  BLAS threads (the rates the rule bets on), and the 1-minute load average at start and end.

Writes the ``driver_threads`` section of ENGINE.md and results/driver_threads.jsonl
(not with ``--quick`` or ``--no-record``).

    python benchmarks/bench_driver_threads.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import os
import time

import numpy as np

from _common import bibtex_dir, load_average, load_bibtex, parser, record, require


def _factor_times(m: int, threads: int) -> tuple[float, float]:
    from scipy.linalg import cholesky, eigh
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    A = rng.standard_normal((m, m + 50))
    S = A @ A.T / (m + 50)
    with threadpool_limits(threads, user_api="blas"):
        chol, eig = [], []
        for _ in range(3):
            t = time.perf_counter()
            cholesky(S, lower=True, check_finite=False)
            chol.append(time.perf_counter() - t)
        for _ in range(2):
            t = time.perf_counter()
            eigh(S, check_finite=False)
            eig.append(time.perf_counter() - t)
    return float(np.median(chol)), float(np.median(eig))


def main() -> None:
    ap = parser(__doc__, quick="600 training rows, m_in = 200, m_out = 40, 1 round", repeats=3,
                repeats_help="rounds (rotated order; medians reported)")
    ap.add_argument("--m-in", type=int, default=2250)
    ap.add_argument("--m-out", type=int, default=200)
    args = ap.parse_args()
    require(bibtex_dir() / "bibtex-train.arff", "Bibtex data")
    import dask

    import distsketch as ds
    import distsketch.models.sisokr as models
    import distsketch.options as options

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load_start = load_average()
    X, Y, _, _ = load_bibtex()
    if args.quick:
        X, Y, args.m_in, args.m_out, args.repeats = X[:600], Y[:600], 200, 40, 1
    n = len(X)
    driver = {"s": 0.0, "threads": []}
    solve, update = models.SISOKR._solve, models.SISOKR._update_coef
    rule = options.driver_blas_threads

    def timed_solve(self, *a, **k):
        t = time.perf_counter()
        out = solve(self, *a, **k)
        driver["s"] += time.perf_counter() - t
        return out

    def timed_update(self, *a, **k):
        t = time.perf_counter()
        out = update(self, *a, **k)
        driver["s"] += time.perf_counter() - t
        return out

    def counted_rule(size):
        k = rule(size)
        driver["threads"].append(k)
        return k

    models.SISOKR._solve, models.SISOKR._update_coef = timed_solve, timed_update
    options.driver_blas_threads = counted_rule
    settings = list(dict.fromkeys([1, cores, "auto"]))
    times = {s: [] for s in settings}
    chosen = []
    try:
        for r in range(args.repeats):
            for s in settings[r % len(settings):] + settings[:r % len(settings)]:
                driver.update(s=0.0, threads=[])
                model = ds.SISOKR(ds.Gaussian(1 / (2 * 1e4)), ds.Gaussian(1 / (2 * 1e4)),
                                  lam=1e-5, input_sketch=ds.SubSampling(args.m_in),
                                  output_sketch=ds.PSparsified(args.m_out, p=20.0 / n,
                                                               kind="gaussian"),
                                  random_state=r)
                with dask.config.set({"distsketch.driver-threads": s}):
                    t = time.perf_counter()
                    model.fit(X, Y)
                    fit_s = time.perf_counter() - t
                times[s].append((fit_s, driver["s"]))
                if s == "auto":
                    chosen.append(max(driver["threads"], default=1))
                print(f"round {r} driver-threads={s}: fit {fit_s:.2f} s, driver {driver['s']:.2f} s",
                      flush=True)
    finally:
        models.SISOKR._solve, models.SISOKR._update_coef = solve, update
        options.driver_blas_threads = rule
    m = args.m_in
    f1 = _factor_times(m, 1)
    fk = _factor_times(m, cores)
    load_end = load_average()
    med = {s: (float(np.median([a for a, _ in v])), float(np.median([b for _, b in v])))
           for s, v in times.items()}
    rows = [f"| {s if s != 'auto' else 'auto (chose ' + ', '.join(map(str, chosen)) + ')'} "
            f"| {med[s][0]:.2f} | {med[s][1]:.2f} | {med[1][1] / med[s][1]:.2f}× |"
            for s in settings]
    md = (
        f"Bibtex (n = {n}, dense standardised rows: `_common.load_bibtex`), SISOKR with SubSampling({m}) in and PSparsified({args.m_out}, 20/n) "
        f"out, λ = 1e-5; medians of {args.repeats} rounds (rotated order). Driver = "
        f"`SISOKR._solve` + `_update_coef` (whitening route, factorisations, basis products), "
        f"after the pass. `distsketch.driver-threads` = 1, {cores} (all cores) and \"auto\" "
        f"(the cores found idle once the pass is over). 1-minute load average {load_start:.1f} "
        f"at the start, {load_end:.1f} at the end.\n\n"
        "| driver threads | fit (s) | driver (s) | driver speed-up vs 1 thread |\n"
        "|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"The rates the rule bets on, same run (m = {m}, SPD): Cholesky {f1[0]:.3f} s with one "
        f"BLAS thread, {fk[0]:.3f} s with {cores} ({f1[0] / fk[0]:.2f}×); eigh {f1[1]:.2f} s vs "
        f"{fk[1]:.2f} s ({f1[1] / fk[1]:.2f}×).\n")
    record("driver_threads", md, {"n": n, "m_in": m, "m_out": args.m_out, "cores": cores,
                                   "median": {str(k): v for k, v in med.items()},
                                   "auto_chose": chosen, "cholesky_s": [f1[0], fk[0]],
                                   "eigh_s": [f1[1], fk[1]],
                                   "load_average": [load_start, load_end]}, args=args)


if __name__ == "__main__":
    main()
