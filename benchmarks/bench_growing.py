"""Growing data: appending a year of gas-turbine rows (``partial_fit``) against refitting.

Gas turbine CO and NOx emissions (UCI; one CSV per year, 2011–2015; 9 features, targets CO
and NOx). The model is fitted on 2011, then 2012, 2013 and 2014 are appended one year at a
time, and 2015 is predicted after each step. Per step, in the same run:

- the append's time (``partial_fit``: a pass over the new year, then the solve) against a
  full refit on every row so far, which draws its landmarks from all of them;
- the test RMSE on 2015 (per target, in the targets' units) of the appended model (the 2011
  landmarks kept) and of that refit (landmarks redrawn), and the appended model's distance to
  a fresh fit on the same rows with its own sketch (``sketch=model.sketch_``: equal to
  rounding, the check of what ``partial_fit`` computes);
- then a sliding window: ``forget(0)`` drops 2011 (its landmarks stay the dictionary), against
  a refit on 2012–2014.

With ``--synthetic N``: a fit on N rows (d = 20, m = 1000), then one append of 10 000 rows,
timed against the fit (the target: an append costs at most 5 % of the fit, the solve
included); with ``--store DIR`` also with a kept store (the fit's blocks, and each
appended batch's, written there). Medians of ``--repeats`` timings; the features are standardised with 2011's
statistics, the same for every model.

    python benchmarks/bench_growing.py [--repeats 3] [--synthetic 1000000] [--store DIR] [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import distsketch as ds  # noqa: E402

YEARS = (2011, 2012, 2013, 2014, 2015)
TARGETS = ("CO", "NOX")


def load_year(year: int):
    path = _common.data_path("gas_turbine_ppgas", f"gt_{year}.csv")
    with open(path) as f:
        header = [h.strip() for h in f.readline().split(",")]
    data = np.loadtxt(path, delimiter=",", skiprows=1)
    cols = [header.index(t) for t in TARGETS]
    feats = [i for i in range(len(header)) if i not in cols]
    return data[:, feats], data[:, cols]


def rmse(pred, Y):
    return np.sqrt(np.mean((np.asarray(pred) - Y) ** 2, axis=0))


def median_time(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), out


def model(m, sketch=None, seed=0):
    return ds.SketchedKRR(ds.Gaussian(gamma=0.1), sketch=sketch or ds.SubSampling(m),
                          lam=1e-6, random_state=seed)


def gas_turbine(args) -> tuple[list[dict], str]:
    _common.require(_common.data_path("gas_turbine_ppgas", "gt_2011.csv"), "gas turbine data")
    data = {y: load_year(y) for y in YEARS}
    if args.quick:
        data = {y: (X[:600], Y[:600]) for y, (X, Y) in data.items()}
    mu, sd = data[2011][0].mean(axis=0), data[2011][0].std(axis=0)
    data = {y: ((X - mu) / sd, Y) for y, (X, Y) in data.items()}
    X_test, Y_test = data[2015]
    m = 100 if args.quick else args.m
    rows = []
    first = model(m).fit(*data[2011])
    t_fit, _ = median_time(lambda: model(m).fit(*data[2011]), args.repeats)
    rows.append({"step": "fit 2011", "rows": len(data[2011][0]), "append_s": t_fit,
                 "refit_s": t_fit, "rmse_append": rmse(first.predict(X_test), Y_test).tolist(),
                 "rmse_refit": rmse(first.predict(X_test), Y_test).tolist(), "vs_fixed": 0.0})
    X_all, Y_all = data[2011]
    grown = first
    for year in (2012, 2013, 2014):
        Xn, Yn = data[year]

        def append():
            import copy

            est = copy.deepcopy(grown)
            return est.partial_fit(Xn, Yn)

        t_app, appended = median_time(append, args.repeats)
        X_all, Y_all = np.vstack([X_all, Xn]), np.vstack([Y_all, Yn])
        t_ref, refit = median_time(lambda: model(m).fit(X_all, Y_all), args.repeats)
        fixed = model(m, sketch=appended.sketch_).fit(X_all, Y_all)
        pa, pf = appended.predict(X_test), fixed.predict(X_test)
        rows.append({"step": f"append {year}", "rows": len(X_all), "append_s": t_app,
                     "refit_s": t_ref, "rmse_append": rmse(pa, Y_test).tolist(),
                     "rmse_refit": rmse(refit.predict(X_test), Y_test).tolist(),
                     "vs_fixed": float(np.max(np.abs(pa - pf)) / np.max(np.abs(pf)))})
        grown = appended
    window = grown
    t_forget, window = median_time(lambda: __import__("copy").deepcopy(grown).forget(0),
                                   args.repeats)
    Xw = np.vstack([data[y][0] for y in (2012, 2013, 2014)])
    Yw = np.vstack([data[y][1] for y in (2012, 2013, 2014)])
    t_ref, refit = median_time(lambda: model(m).fit(Xw, Yw), args.repeats)
    rows.append({"step": "forget 2011", "rows": len(Xw), "append_s": t_forget, "refit_s": t_ref,
                 "rmse_append": rmse(window.predict(X_test), Y_test).tolist(),
                 "rmse_refit": rmse(refit.predict(X_test), Y_test).tolist(), "vs_fixed": None})
    lines = ["| step | rows | append or forget (s) | refit (s) | ratio | test RMSE CO, NOx: "
             "appended (2011 landmarks) | refit (landmarks redrawn) | appended vs a fresh fit "
             "with its sketch |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fmt = lambda v: ", ".join(f"{x:.4f}" for x in v)  # noqa: E731
        vs = "–" if r["vs_fixed"] in (None, 0.0) else f"{r['vs_fixed']:.1e}"
        lines.append(f"| {r['step']} | {r['rows']} | {r['append_s']:.3f} | {r['refit_s']:.3f} | "
                     f"{r['append_s'] / r['refit_s']:.3f} | {fmt(r['rmse_append'])} | "
                     f"{fmt(r['rmse_refit'])} | {vs} |")
    text = (f"Gas turbine, 9 features standardised with 2011's statistics, targets CO and NOx; "
            f"`SketchedKRR(Gaussian(γ = 0.1), SubSampling({m}), λ = 1e-6)`, test year 2015 "
            f"({len(X_test)} rows). Medians of {args.repeats}. The first row is the fit on 2011; "
            f"\"forget 2011\" is `forget(0)` after 2014 (a sliding window), against a refit on "
            f"2012–2014.\n\n" + "\n".join(lines))
    return rows, text


def synthetic(args, *, store: str | None = None) -> tuple[dict, str]:
    """The fit on n rows, then appends of 10 000 rows: without a store, each repeat appends to a
    copy of the fit; with ``store`` (a directory, emptied for each fit), the fit keeps its
    blocks there and each repeat appends other rows to the stored model, a batch each (its
    blocks, records and sums written to the store, the model saved again)."""
    import copy
    import shutil

    n, d, m, new = args.synthetic, 20, 1000, 10_000
    if args.quick:
        n, m, new = 20_000, 200, 1000
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n + new * args.repeats, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=len(X))
    est = ds.SketchedKRR(ds.Gaussian(gamma=1.0 / d), sketch=ds.SubSampling(m), lam=1e-6,
                         random_state=0)
    path = None if store is None else str(Path(store) / "synthetic.zarr")

    def fit():
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        return ds.SketchedKRR(**{**est.get_params(deep=False), "store": path}).fit(X[:n], y[:n])

    t_fit, fitted = median_time(fit, args.repeats)
    if path is None:
        t_app, _ = median_time(lambda: copy.deepcopy(fitted).partial_fit(X[n:n + new], y[n:n + new]),
                               args.repeats)
    else:
        times = []
        for k in range(args.repeats):
            rows = slice(n + k * new, n + (k + 1) * new)
            t = time.perf_counter()
            fitted.partial_fit(X[rows], y[rows])
            times.append(time.perf_counter() - t)
        t_app = float(np.median(times))
        shutil.rmtree(path, ignore_errors=True)
    where = "no store" if path is None else "a kept store (blocks written to disk)"
    rec = {"n": n, "d": d, "m": m, "appended": new, "store": path is not None, "fit_s": t_fit,
           "append_s": t_app, "ratio": t_app / t_fit}
    text = (f"Synthetic, n = {n}, d = {d}, `SubSampling({m})`, {where}: fit {t_fit:.2f} s; "
            f"appending {new} rows {t_app:.3f} s (pass and solve"
            f"{'' if path is None else ', blocks and model written'}): "
            f"**{100 * t_app / t_fit:.1f} %** of the fit (target ≤ 5 %). Medians of {args.repeats}.")
    return rec, text


def successive(args, *, store: str) -> tuple[dict, str]:
    """Twelve successive appends of 2 000 rows to a model with a kept store (n = 30 000,
    m = 1000): whether an append's cost grows with the number of batches held."""
    import shutil

    n, d, m, new, count = 30_000, 20, 1000, 2000, 12
    if args.quick:
        n, m, new, count = 5000, 200, 500, 4
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n + count * new, d))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=len(X))
    path = str(Path(store) / "successive.zarr")
    shutil.rmtree(path, ignore_errors=True)
    est = ds.SketchedKRR(ds.Gaussian(gamma=1.0 / d), sketch=ds.SubSampling(m), lam=1e-6,
                         random_state=0, store=path).fit(X[:n], y[:n])
    times = []
    for k in range(count):
        rows = slice(n + k * new, n + (k + 1) * new)
        t = time.perf_counter()
        est.partial_fit(X[rows], y[rows])
        times.append(time.perf_counter() - t)
    shutil.rmtree(path, ignore_errors=True)
    rec = {"n": n, "m": m, "appended": new, "times_s": times}
    text = (f"Successive appends with a kept store (n = {n}, `SubSampling({m})`, {count} batches "
            f"of {new} rows, each saved model referring to the stored batches): "
            + ", ".join(f"{t:.2f}" for t in times) + " s.")
    return rec, text


def main() -> None:
    ap = _common.parser(__doc__, quick="600 rows a year, m = 100; synthetic n = 20 000",
                        repeats=3)
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--synthetic", type=int, default=0, metavar="N",
                    help="also the synthetic append at N rows (the issue's: 1000000)")
    ap.add_argument("--store", metavar="DIR",
                    help="also the synthetic fit and appends with a kept store in DIR (n m "
                         "float32 values on disk: 4 GB at the issue's size)")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 1
    rows, text = gas_turbine(args)
    data = {"gas_turbine": rows}
    if args.synthetic or args.quick:
        if args.quick and not args.synthetic:
            args.synthetic = 20_000
        rec, more = synthetic(args)
        data["synthetic"] = rec
        text += "\n\n" + more
        if args.store:
            rec, more = synthetic(args, store=args.store)
            data["synthetic_store"] = rec
            text += "\n\n" + more
            rec, more = successive(args, store=args.store)
            data["successive_store"] = rec
            text += "\n\n" + more
    _common.record("growing", text + f"\n\nCPU load average at the end: "
                   f"{_common.load_average():.2f}.", data, args=args)


if __name__ == "__main__":
    main()
