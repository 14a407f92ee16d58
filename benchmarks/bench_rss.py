"""Peak RSS and wall time of SketchedKRR fits vs n: memory must not grow with n.

Synthetic regression, d = 20, SubSampling(500), Gaussian kernel. The data are written to a
zarr store on disk first; each fit then runs in a fresh process that reads them lazily, so
the peak RSS is the pipeline's own (blocks, landmarks, m × m sums), not a copy of the data.
Target: peak RSS at n = 400 000 within 1.3× of n = 50 000.

Writes the ``rss`` section of RESULTS.md and results/rss.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_rss.py [--sizes 50000 400000] [--repeats 3] [--quick]
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

D, M, GAMMA, LAM = 20, 500, 1.0 / 40, 1e-6
CHUNK = 25_000  # rows per stored chunk of the synthetic data


def make_data(path: Path, n: int, seed: int) -> None:
    """X ~ N(0, I_d), y = sin(X w) + 0.1·noise (std ≈ 0.66), written chunk by chunk."""
    import zarr

    w = np.random.default_rng(1000).standard_normal(D) / np.sqrt(D)
    g = zarr.open_group(str(path), mode="w")
    X = g.create_array("X", shape=(n, D), chunks=(CHUNK, D), dtype="f8")
    y = g.create_array("y", shape=(n,), chunks=(CHUNK,), dtype="f8")
    for i, s in enumerate(range(0, n, CHUNK)):
        rng = np.random.default_rng([seed, i])
        xb = rng.standard_normal((min(CHUNK, n - s), D))
        X[s : s + len(xb)] = xb
        y[s : s + len(xb)] = np.sin(xb @ w) + 0.1 * rng.standard_normal(len(xb))


def child(path: str) -> None:
    """Fit once from the zarr store and print one JSON line of figures."""
    import zarr

    import distsketch as ds

    g = zarr.open_group(path, mode="r")
    rss_before = _common.peak_rss_mib()
    t = time.perf_counter()
    model = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(M), lam=LAM,
                           random_state=0).fit(g["X"], g["y"])
    seconds = time.perf_counter() - t
    test = zarr.open_group(path + "-test", mode="r")
    rmse = float(np.sqrt(np.mean((model.predict(test["X"][:]) - test["y"][:]) ** 2)))
    print(json.dumps({"seconds": seconds, "peak_rss_mib": _common.peak_rss_mib(),
                      "rss_before_fit_mib": rss_before, "test_rmse": rmse}))


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 5 000 and 20 000, 1 process each", repeats=3,
                        repeats_help="fresh processes per n (medians reported)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[50_000, 400_000])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    if args.quick:
        args.sizes, args.repeats = [5_000, 20_000], 1
    gemm = _common.gemm_gflops()
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="distsketch-bench-"))
    try:
        for n in args.sizes:
            make_data(tmp / f"n{n}", n, seed=n)
            make_data(Path(f"{tmp / f'n{n}'}-test"), 5_000, seed=n + 1)
            runs = [_common.run_child([__file__, "--child", str(tmp / f"n{n}")])
                    for _ in range(args.repeats)]
            row = {"n": n, **{k: float(np.median([r[k] for r in runs])) for k in runs[0]}}
            row["rows_per_s"] = n / row["seconds"]
            rows.append(row)
            print(f"n={n:>9,}  fit {row['seconds']:6.2f} s  peak RSS {row['peak_rss_mib']:7.1f} MiB "
                  f"(before fit {row['rss_before_fit_mib']:6.1f})  test RMSE {row['test_rmse']:.4f}",
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    small, large = rows[0], rows[-1]
    ratio = large["peak_rss_mib"] / small["peak_rss_mib"]
    verdict = "PASS" if ratio <= 1.3 else "FAIL"
    print(f"peak RSS ratio n={large['n']:,} / n={small['n']:,}: {ratio:.3f} (target <= 1.3: {verdict})")
    table = "\n".join(
        f"| {r['n']:,} | {r['seconds']:.2f} | {r['rows_per_s']:,.0f} | {r['peak_rss_mib']:.0f} | "
        f"{r['rss_before_fit_mib']:.0f} | {r['test_rmse']:.4f} |" for r in rows)
    md = (f"SketchedKRR, Gaussian kernel, SubSampling({M}), d = {D}, data read from zarr on disk, "
          f"threaded scheduler, medians of {args.repeats} fresh processes. numpy GEMM in the same "
          f"run: {gemm:.1f} GFLOP/s.\n\n"
          "| n | fit (s) | rows/s | peak RSS (MiB) | RSS before fit (MiB) | test RMSE (target std ≈ 0.66) |\n"
          "|---:|---:|---:|---:|---:|---:|\n" + table +
          f"\n\nPeak RSS ratio n = {large['n']:,} / n = {small['n']:,}: **{ratio:.3f}** "
          f"(target ≤ 1.3: **{verdict}**).")
    _common.record("rss", md, {"rows": rows, "rss_ratio": ratio, "gemm_gflops": gemm}, args=args)


if __name__ == "__main__":
    main()
