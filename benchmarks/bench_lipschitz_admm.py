"""ADMM against Newton for a κ-Huber fit at large m (``SketchedRegressor(solver=)``).

Protocol
--------
- Data: synthetic, ``x ~ N(0, I_10)``, d = 20 outputs ``y_j = sin(x·w_j) + 0.1 ε``, 5 % of the
  rows with gross errors (+5 on every output); n = 20 000 (``--n``; ``--quick``: 5 000).
- Model: ``SketchedRegressor(Gaussian(0.1), loss=Huber(1.0), sketch=SubSampling(m),
  lam=1e-5, tol=1e-4, store=PATH)`` with ``solver="newton"`` and ``solver="admm"`` on the same
  store (the second fit reuses the pass), m ∈ {1000, 4000} (``--quick``: 200, 400), each fit
  in a fresh process.
- Reported: solver wall time (the fit minus the pass, which both share), sweeps, objective
  and certified relative duality gap, each fit's peak RSS (its process), the time of the
  first fit (pass + Newton) and the 1-minute load average before and after.

Writes the ``lipschitz_admm`` section of ENGINE.md and results/lipschitz_admm.jsonl at
n = 20 000; at another n its own section ``lipschitz_admm_<n>`` (n = 10⁵: ``lipschitz_admm_1e5``)
and results/lipschitz_admm_<n>.jsonl, rewritten after each m (a run cut short keeps the m
done). Nothing is written with ``--quick`` or ``--no-record`` (the section is printed once, at
the end).

    python benchmarks/bench_lipschitz_admm.py [--n 20000] [--ms 1000 4000] [--quick]
    python benchmarks/bench_lipschitz_admm.py --n 100000 --ms 1000 4000
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import warnings
from pathlib import Path

import numpy as np

from _common import load_average, parser, peak_rss_mib, record, recording, run_child

D_IN, D_OUT = 10, 20
ROOT = Path(__file__).resolve().parent.parent / ".benchmarks-tmp"
NOTE = ("Both routes stop at the first certified relative gap ≤ tol. The fit time includes "
        "each route's driver set-up on the stored sums (the whitening's eigendecomposition of "
        "B; for ADMM also that of the centred feature Gram). With 5 % outliers few rows are "
        "off the Huber's base curvature, so Newton's weighted Grams are small: this is the "
        "case least favourable to ADMM.")


def make_data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(D_IN, D_OUT)) / np.sqrt(D_IN)
    X = rng.normal(size=(n, D_IN))
    Y = np.sin(X @ W) + 0.1 * rng.normal(size=(n, D_OUT))
    Y[rng.random(n) < 0.05] += 5.0
    return X, Y


def child(n: int, m: int, solver: str) -> None:
    import distsketch as ds
    from distsketch.losses.radial import Huber

    X, Y = make_data(n)
    store = ROOT / f"admm-{n}-{m}.zarr"
    est = ds.SketchedRegressor(ds.Gaussian(gamma=0.1), loss=Huber(1.0), sketch=ds.SubSampling(m),
                               lam=1e-5, tol=1e-4, max_iter=3000, random_state=0, solver=solver,
                               store=store)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, Y)
    secs = time.perf_counter() - t
    print(json.dumps({"n": n, "m": m, "solver": solver, "fit_s": secs,
                      "sweeps": int(est.n_iter_), "objective": est.objective_,
                      "rel_gap": est.duality_gap_ / est.objective_,
                      "peak_rss_mib": peak_rss_mib()}))


def section_name(n: int) -> str:
    """``lipschitz_admm`` at n = 20 000 (the first runs'), else ``lipschitz_admm_<n>``
    (``1e5`` for 10⁵)."""
    if n == 20_000:
        return "lipschitz_admm"
    e = int(round(np.log10(n)))
    return f"lipschitz_admm_1e{e}" if 10**e == n else f"lipschitz_admm_{n}"


def main() -> None:
    ap = parser(__doc__, quick="n = 5 000, m = 200 and 400")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--ms", type=int, nargs="+", default=[1000, 4000])
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(int(args.child[0]), int(args.child[1]), args.child[2])
        return
    n, ms = (5000, [200, 400]) if args.quick else (args.n, args.ms)
    rows, first = [], []
    load0 = load_average()
    for m in ms:
        shutil.rmtree(ROOT / f"admm-{n}-{m}.zarr", ignore_errors=True)
        # a first fit makes the pass; the timed fits reuse it (their solver's time)
        t = time.perf_counter()
        row = run_child([__file__, "--child", str(n), str(m), "newton"])
        first.append({"m": m, "pass_and_fit_s": time.perf_counter() - t,
                      "peak_rss_mib": row["peak_rss_mib"]})
        print(first[-1], flush=True)
        for solver in ("newton", "admm"):
            import zarr

            # a solve from scratch on the pass already stored: no solver state kept
            grp = zarr.open_group(str(ROOT / f"admm-{n}-{m}.zarr"), mode="a")
            if "solver" in grp:
                del grp["solver"]
            row = run_child([__file__, "--child", str(n), str(m), solver])
            rows.append(row)
            print(row, flush=True)
        shutil.rmtree(ROOT / f"admm-{n}-{m}.zarr", ignore_errors=True)
        if recording(args):  # after each m: a run cut short keeps what it measured
            write(n, ms, rows, first, load0, args)
    if not recording(args):
        write(n, ms, rows, first, load0, args)


def write(n: int, ms: list, rows: list, first: list, load0: float, args) -> None:
    load1 = load_average()
    big = n != 20_000
    lines = ["| m | solver | fit on the stored pass (s) | sweeps | objective | certified "
             "relative gap |" + (" peak RSS (MiB) |" if big else ""),
             "|---|---|---|---|---|---|" + ("---|" if big else "")]
    for r in rows:
        lines.append(f"| {r['m']} | {r['solver']} | {r['fit_s']:.1f} | {r['sweeps']} | "
                     f"{r['objective']:.8g} | {r['rel_gap']:.1e} |"
                     + (f" {r['peak_rss_mib']:.0f} |" if big else ""))
    md = (f"κ-Huber (κ = 1), n = {n}, d = {D_OUT} outputs, λ = 1e-5, tol = 1e-4, store on "
          f"local disk; each fit on the already stored pass (the solver's time).\n\n"
          + "\n".join(lines) + "\n\n" + NOTE)
    if big:
        done = sorted({r["m"] for r in rows})
        firsts = "; ".join(f"m = {f['m']}: {f['pass_and_fit_s']:.0f} s, peak RSS "
                           f"{f['peak_rss_mib']:.0f} MiB" for f in first)
        md += (f"\n\nThe first fit of each m (the pass, then Newton; not timed above): "
               f"{firsts}. Peak RSS: each fit's own process (`ru_maxrss`). 1-minute load "
               f"average (2 cores shared with other engineers' jobs): {load0:.2f} at the "
               f"start, {load1:.2f} when this section was written"
               + (f"; m = {', '.join(str(m) for m in ms if m not in done)} "
                  f"not finished in this run" if set(done) != set(ms) else "") + ".")
    record(section_name(n), md, {"rows": rows, "first_fits": first, "load_start": load0,
                                 "load_end": load1}, args=args)


if __name__ == "__main__":
    main()
