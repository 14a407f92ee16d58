"""Scaling to a million rows on one box, and accuracy vs time against scikit-learn.

Part 1 (time and memory vs n): ``SketchedKRR(Gaussian, SubSampling(1000))`` on synthetic
regression data (d = 20) stored in zarr on disk, each fit in a fresh process reading the
data lazily, for n = 1e5 … 1e6. Targets: the log-log slope of fit time vs n
≤ 1.1, peak RSS at n = 1e6 within 1.3× of n = 1e5, and the n = 1e6 fit under 3 minutes.

Part 2 (accuracy vs time, like the SISOKR paper's Fig. 2): at n = 100 000, test RMSE and fit
time of distsketch for m ∈ {125, 250, 500, 1000, 2000} side by side with scikit-learn's
``Nystroem(n_components=m) + Ridge`` at the same kernel, m and regularisation
(``alpha = n·λ``, no intercept: the same estimator, so the same accuracy is expected).

Writes ``results/scaling_time.png``, ``results/scaling_rss.png``,
``results/accuracy_vs_time.png``, results/scaling.jsonl and the ``scaling`` section of
RESULTS.md (not with ``--quick`` or ``--no-record``).

    python benchmarks/bench_scaling.py [--sizes 100000 200000 500000 1000000] [--repeats 3]
    python benchmarks/bench_scaling.py --quick      # small sizes, nothing written
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from bench_rss import D, make_data  # noqa: E402  (same generator: X ~ N(0, I), y = sin(Xw) + noise)

M, LAM = 1000, 1e-6
GAMMA = 1.0 / (2 * D)
M_GRID = (125, 250, 500, 1000, 2000)


def child(path: str, m: int, store: str) -> None:
    """One fit from the zarr data at ``path``; prints a JSON line (time, RSS, RMSE)."""
    import zarr

    import distsketch as ds

    g = zarr.open_group(path, mode="r")
    t = time.perf_counter()
    model = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), fit_intercept=False, sketch=ds.SubSampling(m), lam=LAM,
                           random_state=0, store=store,
                           options=ds.EngineOptions(progress=False, overwrite=True)).fit(g["X"], g["y"])
    seconds = time.perf_counter() - t
    test = zarr.open_group(path + "-test", mode="r")
    rmse = float(np.sqrt(np.mean((model.predict(test["X"][:]) - test["y"][:]) ** 2)))
    print(json.dumps({"seconds": seconds, "peak_rss_mib": _common.peak_rss_mib(), "test_rmse": rmse}))


def sklearn_child(path: str, m: int) -> None:
    """Nystroem(m) + Ridge(alpha = nλ, no intercept) on the same data, in memory."""
    import zarr
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline

    g = zarr.open_group(path, mode="r")
    X, y = g["X"][:], g["y"][:]
    t = time.perf_counter()
    model = make_pipeline(Nystroem(gamma=GAMMA, n_components=m, random_state=0),
                          Ridge(alpha=len(X) * LAM, fit_intercept=False)).fit(X, y)
    seconds = time.perf_counter() - t
    test = zarr.open_group(path + "-test", mode="r")
    rmse = float(np.sqrt(np.mean((model.predict(test["X"][:]) - test["y"][:]) ** 2)))
    print(json.dumps({"seconds": seconds, "peak_rss_mib": _common.peak_rss_mib(), "test_rmse": rmse}))


def medians(runs: list[dict]) -> dict:
    return {k: float(np.median([r[k] for r in runs])) for k in runs[0]}


def plots(rows: list[dict], acc: list[dict], slope: float) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    n = np.array([r["n"] for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.loglog(n, [r["seconds"] for r in rows], "o-", label=f"distsketch (slope {slope:.2f})")
    ax.loglog(n, rows[0]["seconds"] * n / n[0], "k:", label="linear in n")
    ax.set_xlabel("n (rows)")
    ax.set_ylabel("fit wall time (s)")
    ax.set_title(f"SketchedKRR, SubSampling({M}), d = {D}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(_common.RESULTS_DIR / "scaling_time.png", dpi=110)
    out.append("results/scaling_time.png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.semilogx(n, [r["peak_rss_mib"] for r in rows], "o-")
    ax.set_ylim(0, 1.2 * max(r["peak_rss_mib"] for r in rows))
    ax.set_xlabel("n (rows)")
    ax.set_ylabel("peak RSS of the fit process (MiB)")
    ax.set_title("memory does not grow with n (data read lazily from zarr)", fontsize=9)
    fig.tight_layout()
    fig.savefig(_common.RESULTS_DIR / "scaling_rss.png", dpi=110)
    out.append("results/scaling_rss.png")
    plt.close(fig)

    if acc:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for who, style in (("distsketch", "o-"), ("sklearn", "s--")):
            pts = [(a[who]["seconds"], a[who]["test_rmse"], a["m"]) for a in acc]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                    label="distsketch SketchedKRR" if who == "distsketch" else "sklearn Nystroem + Ridge")
            for x, yv, m in pts:
                ax.annotate(f"m={m}", (x, yv), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("fit wall time (s)")
        ax.set_ylabel("test RMSE")
        ax.set_title(f"accuracy vs time, n = {acc[0]['n']:,}, d = {D}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(_common.RESULTS_DIR / "accuracy_vs_time.png", dpi=110)
        out.append("results/accuracy_vs_time.png")
        plt.close(fig)
    return out


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 10 000 and 20 000, one repeat", repeats=3,
                        repeats_help="fresh processes per fit (medians reported)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 200_000, 500_000, 1_000_000])
    ap.add_argument("--accuracy-n", type=int, default=100_000)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--sklearn-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), args.child[2])
    if args.sklearn_child:
        return sklearn_child(args.sklearn_child[0], int(args.sklearn_child[1]))
    if args.quick:
        args.sizes, args.repeats, args.accuracy_n = [10_000, 20_000], 1, 10_000

    tmp = Path(tempfile.mkdtemp(prefix="distsketch-bench-scaling-", dir="."))
    gemm = []
    rows, acc = [], []
    try:
        for n in sorted(set(args.sizes) | {args.accuracy_n}):
            make_data(tmp / f"n{n}", n, seed=n)
            make_data(Path(f"{tmp / f'n{n}'}-test"), 10_000, seed=n + 1)
        store = str(tmp / "fit.zarr")
        for n in args.sizes:
            runs = []
            for _ in range(args.repeats):
                gemm.append(_common.gemm_gflops(repeats=3))
                runs.append(_common.run_child([__file__, "--child", str(tmp / f"n{n}"), str(M), store]))
                shutil.rmtree(store, ignore_errors=True)
            row = {"n": n, **medians(runs)}
            rows.append(row)
            print(f"n={n:>9,}  fit {row['seconds']:7.2f} s  peak RSS {row['peak_rss_mib']:7.1f} MiB  "
                  f"test RMSE {row['test_rmse']:.4f}", flush=True)
        data = str(tmp / f"n{args.accuracy_n}")
        for m in M_GRID:
            if m > args.accuracy_n // 2:
                continue
            ours, theirs = [], []
            for _ in range(args.repeats):  # interleaved
                ours.append(_common.run_child([__file__, "--child", data, str(m), store]))
                shutil.rmtree(store, ignore_errors=True)
                theirs.append(_common.run_child([__file__, "--sklearn-child", data, str(m)]))
            a = {"n": args.accuracy_n, "m": m, "distsketch": medians(ours), "sklearn": medians(theirs)}
            acc.append(a)
            print(f"m={m:>5}  distsketch {a['distsketch']['seconds']:6.2f} s RMSE "
                  f"{a['distsketch']['test_rmse']:.4f} | sklearn Nystroem+Ridge "
                  f"{a['sklearn']['seconds']:6.2f} s RMSE {a['sklearn']['test_rmse']:.4f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    logn = np.log([r["n"] for r in rows])
    slope = float(np.polyfit(logn, np.log([r["seconds"] for r in rows]), 1)[0])
    rss_ratio = rows[-1]["peak_rss_mib"] / rows[0]["peak_rss_mib"]
    largest = rows[-1]
    v_slope = "PASS" if slope <= 1.1 else "FAIL"
    v_rss = "PASS" if rss_ratio <= 1.3 else "FAIL"
    v_time = "PASS" if largest["seconds"] < 180 else "FAIL"
    print(f"log-log slope {slope:.3f} ({v_slope}); peak RSS ratio {rss_ratio:.3f} ({v_rss}); "
          f"n={largest['n']:,} in {largest['seconds']:.1f} s ({v_time})")
    pngs = plots(rows, acc, slope) if _common.recording(args) else []
    table = "\n".join(f"| {r['n']:,} | {r['seconds']:.2f} | {r['n'] / r['seconds']:,.0f} | "
                      f"{r['peak_rss_mib']:.0f} | {r['test_rmse']:.4f} |" for r in rows)
    atable = "\n".join(
        f"| {a['m']} | {a['distsketch']['seconds']:.2f} | {a['distsketch']['test_rmse']:.4f} | "
        f"{a['sklearn']['seconds']:.2f} | {a['sklearn']['test_rmse']:.4f} | "
        f"{a['distsketch']['seconds'] / a['sklearn']['seconds']:.2f} |" for a in acc)
    md = f"""`SketchedKRR(Gaussian(1/{2 * D}), SubSampling({M}))`, λ = {LAM:g}, d = {D}; data in
zarr on disk read lazily, each fit in a fresh process (threaded scheduler, float64 blocks to a
local zarr store); medians of {args.repeats}. numpy GEMM in this run: median
{np.median(gemm):.1f} GFLOP/s.

| n | fit (s) | rows/s | peak RSS (MiB) | test RMSE (noise floor 0.1) |
|---:|---:|---:|---:|---:|
{table}

- log-log slope of time vs n: **{slope:.3f}** (target ≤ 1.1: **{v_slope}**)
- peak RSS n = {largest['n']:,} / n = {rows[0]['n']:,}: **{rss_ratio:.3f}** (target ≤ 1.3: **{v_rss}**)
- n = {largest['n']:,} fit: **{largest['seconds']:.1f} s** (target < 180 s: **{v_time}**)

Accuracy vs time at n = {args.accuracy_n:,} (same data, same kernel, α = nλ, no intercept on
either side; scikit-learn's pipeline holds the data in memory, distsketch streams it and writes
its blocks to disk):

| m | distsketch fit (s) | distsketch RMSE | sklearn Nystroem+Ridge fit (s) | sklearn RMSE | time ratio |
|---:|---:|---:|---:|---:|---:|
{atable}
""" + (f"""
Plots: {", ".join(f"[{p}]({p})" for p in pngs)}
""" if pngs else "")
    _common.record("scaling", md, {"rows": rows, "accuracy": acc, "slope": slope,
                                   "rss_ratio": rss_ratio, "gemm_gflops": gemm}, args=args)


if __name__ == "__main__":
    main()
