"""Large m: ``SketchedKRR(solver="pcg")`` (Falkon's PCG) against the direct route.

Synthetic regression, d = 20, ``X ~ N(0, I)``, ``y = sin(X w) + 0.1·noise`` (w = 1/√d),
Gaussian kernel γ = 1/(2d), ``SubSampling(m)`` landmarks, λ = 1e-6, default engine options
(float32 kernel blocks, float64 sums), ``store=None``, threaded scheduler.

(a) n = 10⁵ (``--n``), m over ``--ms``: fit time and test RMSE (20 000 fresh rows) of the
    direct route (one pass forming ``G = CᵀC``, ``2nm²`` flops, then the driver's ``m × m``
    eigendecompositions) and of PCG at ``--tol`` (each iteration one pass of recomputed
    kernel blocks, ``4nm`` flops plus the kernel), the relative RMSE difference (target
    ≤ 1e-6), the iterations, and the crossover m (the smallest m of the grid where PCG is
    faster). Time per PCG pass = fit time / passes (the first pass computes ``K_nmᵀy``, the
    others ``K_nmᵀ(K_nm v)``; the driver's m-sized work is included), against the roofline
    of one pass: ``max(flops / R_gemm, n·m / R_exp)`` with ``2nm(d + 2) + 4nm`` flops (the
    kernel GEMM, ``K v`` and ``Kᵀ(Kv)``) and ``n·m`` float32 exponentials, at the GEMM and
    all-cores exp rates measured in this run (benchmarks/bench_pass.py's method).
(b) ``--part b``: n = 10⁶, m = 20 000 with PCG, each fit in a fresh process whose peak RSS
    (``ru_maxrss``) is reported (benchmarks/bench_rss.py's method), with the test RMSE of
    m = 1 000 and 5 000 for comparison. Long (targets: ≤ 20 min, ≤ 8 GB).

(c) ``--part none --probe --n 200000``: one PCG pass's wall time per kernel value at
    m = ``--probe-m`` (20 000), with ``gram_product``'s cache-sized tiles against fixed
    256-row tiles, alternated (a few iterations each; the section keeps the last (a), (b)).

Writes the ``large_m`` section of RESULTS.md and results/large_m.jsonl (not with ``--quick``
or ``--no-record``).

    python benchmarks/bench_large_m.py [--n 100000] [--ms 2000 4000 ...]
                                       [--part a|b|ab|none] [--probe] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

D = 20
GAMMA = 1.0 / (2 * D)
LAM = 1e-6
BLOCK_DTYPE = "float32"  # the engine's default; --block-dtype float64 for the rounding floor
N_TEST = 20_000


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows generated in chunks of 100 000 from ``[seed, chunk]`` (any n, the same rows)."""
    w = np.ones(D) / np.sqrt(D)
    Xs, ys = [], []
    for i, s in enumerate(range(0, n, 100_000)):
        rng = np.random.default_rng([seed, i])
        xb = rng.standard_normal((min(100_000, n - s), D))
        Xs.append(xb)
        ys.append(np.sin(xb @ w) + 0.1 * rng.standard_normal(len(xb)))
    return np.concatenate(Xs), np.concatenate(ys)


def fit(X, y, Xt, yt, *, m: int, solver: str, tol: float) -> dict:
    import distsketch as ds

    t = time.perf_counter()
    opts = {} if BLOCK_DTYPE == "float32" else {"options": ds.EngineOptions(block_dtype=BLOCK_DTYPE)}
    est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(m), lam=LAM,
                         solver=solver, tol=tol, max_iter=500, random_state=0, **opts).fit(X, y)
    seconds = time.perf_counter() - t
    rmse = float(np.sqrt(np.mean((np.asarray(est.predict(Xt)) - yt) ** 2)))
    out = {"m": m, "solver": est.solver_, "seconds": seconds, "rmse": rmse}
    if est.solver_ == "pcg":
        out.update(iterations=int(est.n_iter_), passes=int(est.n_passes_),
                   per_pass=seconds / est.n_passes_)
    return out


def pass_flops(n: int, m: int) -> float:
    """One PCG pass: the kernel GEMM (augmented, ``2nm(d + 2)``), ``K v`` and ``Kᵀ(Kv)``."""
    return 2.0 * n * m * (D + 2) + 4.0 * n * m


def rates() -> tuple[float, float]:
    return (_common.gemm_gflops(repeats=3),
            _common.exp_rate_all_cores(repeats=3, dtype=np.float32))


def part_a(args, report=None) -> dict:
    """``report(partial)`` after each m (the figures so far are recorded as they come)."""
    X, y = data(args.n, 0)
    Xt, yt = data(N_TEST, 1)
    fit(X[:5000], y[:5000], Xt[:100], yt[:100], m=100, solver="pcg", tol=args.tol)  # warm-up
    rows = []
    for m in args.ms:
        gemm, expr = rates()
        d = fit(X, y, Xt, yt, m=m, solver="direct", tol=args.tol)
        p = fit(X, y, Xt, yt, m=m, solver="pcg", tol=args.tol)
        roof = max(pass_flops(args.n, m) / (gemm * 1e9), args.n * m / expr)
        row = {"m": m, "direct_s": d["seconds"], "pcg_s": p["seconds"], "rmse_direct": d["rmse"],
               "rmse_pcg": p["rmse"], "rmse_rel_diff": abs(p["rmse"] - d["rmse"]) / d["rmse"],
               "iterations": p["iterations"], "passes": p["passes"], "per_pass_s": p["per_pass"],
               "roofline_pass_s": roof, "gemm_gflops": gemm, "exp32_per_s": expr}
        rows.append(row)
        print(f"m={m:>6}  direct {d['seconds']:8.1f} s  RMSE {d['rmse']:.6f} | pcg {p['seconds']:8.1f}"
              f" s  RMSE {p['rmse']:.6f}  rel diff {row['rmse_rel_diff']:.1e}  {p['iterations']}"
              f" it, {p['per_pass']:.2f} s/pass (roofline {roof:.2f} s: "
              f"{roof / p['per_pass']:.0%})", flush=True)
        faster = [r["m"] for r in rows if r["pcg_s"] < r["direct_s"]]
        out = {"rows": rows, "crossover_m": faster[0] if faster else None}
        if report is not None:
            report(out)
    return out


def child(m: int, n: int, tol: float, solver: str) -> None:
    """One fit in this fresh process; prints one JSON line (peak RSS included)."""
    X, y = data(n, 0)
    Xt, yt = data(N_TEST, 1)
    out = fit(X, y, Xt, yt, m=m, solver=solver, tol=tol)
    out["peak_rss_mib"] = _common.peak_rss_mib()
    out["tol"] = tol
    print(json.dumps(out))


def probe(args) -> dict:
    """One PCG fit of ``--probe-iterations`` iterations at n = ``--n``, m = ``--probe-m``,
    ``--probe-reps`` times per tile setting (alternated): the passes' wall times, from the
    sweeper's calls."""
    import distsketch.engine.sweep as sw

    X, y = data(args.n, 0)
    times: list[float] = []
    call = sw.Sweeper.__call__

    def timed(self, it):
        t = time.perf_counter()
        out = call(self, it)
        times.append(time.perf_counter() - t)
        return out

    sw.Sweeper.__call__ = timed
    default = sw.PRODUCT_TILE_BYTES
    rows = {}
    try:
        for rep in range(args.probe_reps):
            for tiles, nbytes in (("cache-sized", default), ("256 rows", 256 * 8 * args.probe_m)):
                sw.PRODUCT_TILE_BYTES = nbytes
                times.clear()
                t = time.perf_counter()
                fit_only(X, y, m=args.probe_m, iterations=args.probe_iterations)
                seconds = time.perf_counter() - t
                per = float(np.median(times[1:]))
                rows.setdefault(tiles, []).append((seconds, per))
                print(f"{tiles}: fit {seconds:.1f} s, {per:.2f} s / pass", flush=True)
    finally:
        sw.Sweeper.__call__ = call
        sw.PRODUCT_TILE_BYTES = default
    out = []
    for tiles, v in rows.items():
        sec, per = np.median([a for a, _ in v]), np.median([b for _, b in v])
        out.append({"tiles": tiles, "seconds": float(sec), "per_pass": float(per),
                    "ns_per_value": float(per / (args.n * args.probe_m) * 1e9)})
    return {"n": args.n, "m": args.probe_m, "iterations": args.probe_iterations, "rows": out}


def tolerances(args) -> dict:
    """PCG fits at n = ``--n``, m = ``--tols-m`` for each tolerance of ``--tols``: iterations,
    time and test RMSE, and the RMSE's relative difference to the smallest tolerance's."""
    X, y = data(args.n, 0)
    Xt, yt = data(N_TEST, 1)
    rows = []
    for tol in sorted(args.tols):
        r = fit(X, y, Xt, yt, m=args.tols_m, solver="pcg", tol=tol)
        r["tol"] = tol
        rows.append(r)
        print(f"tol {tol:g}: {r['iterations']} it, {r['seconds']:.1f} s, RMSE {r['rmse']:.6f}",
              flush=True)
    ref = rows[0]["rmse"]
    for r in rows:
        r["rmse_rel_diff"] = abs(r["rmse"] - ref) / ref
    return {"n": args.n, "m": args.tols_m, "rows": rows}


def fit_only(X, y, *, m: int, iterations: int) -> None:
    import warnings

    import distsketch as ds

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter is reached on purpose
        ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(m), lam=LAM,
                       solver="pcg", tol=1e-12, max_iter=iterations, random_state=0).fit(X, y)


def part_b(args) -> dict:
    """The largest m with PCG first, then the comparison m with ``solver="auto"`` (the
    direct route at these m: faster than PCG there, the same model to the PCG tolerance)."""
    gemm, expr = rates()
    ms = sorted(args.ms_b)
    rows = []
    for m in [ms[-1]] + ms[:-1]:
        tol = args.tol_b if (m == ms[-1] and args.tol_b is not None) else args.tol
        r = _common.run_child([__file__, "--child", str(m), "--n", str(args.n_b),
                               "--tol", str(tol),
                               "--solver", "pcg" if m == ms[-1] else "auto"])
        if r["solver"] == "pcg":
            r["roofline_pass_s"] = max(pass_flops(args.n_b, m) / (gemm * 1e9),
                                       args.n_b * m / expr)
        rows.append(r)
        print(f"n={args.n_b:,} m={m:>6} ({r['solver']}): {r['seconds']:.0f} s, "
              f"{r.get('iterations', '-')} it, RMSE {r['rmse']:.6f}, "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
    return {"rows": sorted(rows, key=lambda r: r["m"]), "gemm_gflops": gemm,
            "exp32_per_s": expr}


def main() -> None:
    ap = _common.parser(__doc__, quick="part (a) at n = 4 000, m = 100 and 200")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--n-b", type=int, default=1_000_000)
    ap.add_argument("--ms", type=int, nargs="+", default=[2000, 4000, 6000, 8000, 10_000])
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--tol-b", type=float, default=None,
                    help="(b): PCG tolerance of the largest m (default --tol); see (d) of the "
                         "section for the test RMSE against the tolerance")
    ap.add_argument("--part", default="a", choices=["a", "b", "ab", "none"])
    ap.add_argument("--block-dtype", default="float32", choices=["float32", "float64"],
                    help="kernel blocks' dtype (the engine's default float32; float64 shows how "
                         "much of PCG's RMSE difference from the direct solve is float32 rounding; "
                         "part (a) only)")
    ap.add_argument("--probe", action="store_true",
                    help="(c): a pass's cost at n = --n, m = --probe-m, cache-sized product "
                         "tiles against 256-row ones (use with --part none)")
    ap.add_argument("--probe-m", type=int, default=20_000)
    ap.add_argument("--probe-iterations", type=int, default=3)
    ap.add_argument("--probe-reps", type=int, default=1, help="alternated fits per setting")
    ap.add_argument("--tols", type=float, nargs="+", default=None,
                    help="(d): PCG fits at n = --n, m = --tols-m for each of these tolerances: "
                         "iterations and test RMSE against the smallest tolerance's")
    ap.add_argument("--tols-m", type=int, default=4000)
    ap.add_argument("--ms-b", type=int, nargs="+", default=[1000, 5000, 20_000],
                    help="m of part (b): the largest with PCG, the others with solver='auto'")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--solver", default="pcg", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global BLOCK_DTYPE
    BLOCK_DTYPE = args.block_dtype
    if args.child is not None:
        return child(args.child, args.n, args.tol, args.solver)
    if args.quick:
        args.n, args.ms, args.part = 4000, [100, 200], "a"
    out = {"n": args.n, "n_b": args.n_b, "d": D, "lam": LAM, "tol": args.tol,
           "block_dtype": args.block_dtype}

    def partial(a):  # written after each m: a run cut short keeps what it measured
        if _common.recording(args):
            write({**out, "a": a, "partial": True}, args)

    if "a" in args.part:
        out["a"] = part_a(args, report=partial if len(args.ms) > 1 else None)
    if "b" in args.part:
        out["b"] = part_b(args)
    if args.probe:
        out["probe"] = probe(args)
    if args.tols:
        out["tols"] = tolerances(args)
    write(out, args)


def last_grid(part: str = "a") -> tuple[str | None, dict | None]:
    """The newest record of results/large_m.jsonl with a finished ``part`` (for (a): a grid
    of several m)."""
    path = _common.RESULTS_DIR / "large_m.jsonl"
    if not path.exists():
        return None, None
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    recs = [r for r in recs if part in r and not r.get("partial")
            and (part != "a" or len(r["a"].get("rows", [])) > 1)]
    return (recs[-1]["date"], recs[-1]) if recs else (None, None)


def _with_last(out: dict, part: str) -> dict:
    """``out`` with the newest recorded ``part`` (dated) where this run has none."""
    if part in out:
        return out
    date, rec = last_grid(part)
    return out if rec is None else {**out, part: {**rec[part], "date": date}}


def write(out: dict, args) -> None:
    """Replace RESULTS.md's ``large_m`` section (and append the record) with ``out``."""
    measured = out  # the record holds this run's parts only, not the ones shown from earlier runs
    md = [f"Synthetic d = {D}, Gaussian γ = 1/(2d), SubSampling(m), λ = {LAM:g}, "
          f"{out.get('block_dtype', 'float32')} blocks, store=None; PCG at tol = {out['tol']:g} (relative residual). Test RMSE on "
          f"{N_TEST:,} fresh rows. Time per PCG pass = fit time / passes; roofline of a pass = "
          f"max(flops / GEMM rate, n·m / float32 exp rate), both rates measured in this run."]
    a_date = None
    if "a" not in out:  # a (b)-only run: the section keeps the last recorded (a) grid
        a_date, a_rec = last_grid()
        if a_rec is not None:
            out = {**out, "a": a_rec["a"], "n": a_rec["n"]}
    if "a" in out:
        a = out["a"]
        md.append(f"\n(a) n = {out['n']:,}" + (f" (from the run of {a_date})" if a_date else "")
                  + "\n\n| m | direct (s) | PCG (s) | RMSE direct | RMSE PCG | "
                  "rel. diff | PCG iterations | s / pass | roofline / pass | GEMM (GFLOP/s) | "
                  "exp f32 (G/s) |\n|---|---|---|---|---|---|---|---|---|---|---|")
        for r in a["rows"]:
            md.append(f"| {r['m']:,} | {r['direct_s']:.1f} | {r['pcg_s']:.1f} | "
                      f"{r['rmse_direct']:.6f} | {r['rmse_pcg']:.6f} | {r['rmse_rel_diff']:.1e} | "
                      f"{r['iterations']} | {r['per_pass_s']:.2f} | "
                      f"{r['roofline_pass_s']:.2f} s ({r['roofline_pass_s'] / r['per_pass_s']:.0%}) | "
                      f"{r['gemm_gflops']:.1f} | {r['exp32_per_s'] / 1e9:.2f} |")
        cm = a["crossover_m"]
        md.append("\nCrossover (smallest m of the grid where PCG is faster): "
                  + (f"m = {cm:,}" if cm else "not reached in this grid") + "."
                  + (" (Written after each m: the run had not finished the grid.)"
                     if out.get("partial") else ""))
    b_date = None
    if "b" not in out:  # likewise the last recorded (b)
        b_date, b_rec = last_grid("b")
        if b_rec is not None:
            out = {**out, "b": b_rec["b"], "n_b": b_rec["n_b"]}
    if "b" in out and b_date is None:  # rows of other (m, tol) kept from earlier (b) runs
        prev = [json.loads(line) for line in
                (_common.RESULTS_DIR / "large_m.jsonl").read_text().splitlines()
                if line.strip()] if (_common.RESULTS_DIR / "large_m.jsonl").exists() else []
        have = {(r["m"], r.get("tol", out["tol"])) for r in out["b"]["rows"]}
        carried = []
        for rec in prev:
            for r in rec.get("b", {}).get("rows", []) if not rec.get("partial") else []:
                key = (r["m"], r.get("tol", rec["tol"]))
                if rec.get("n_b") == out["n_b"] and key not in have:
                    have.add(key)
                    carried.append({**r, "tol": key[1], "date": rec["date"]})
        b_rows = sorted(out["b"]["rows"] + carried, key=lambda r: (r["m"], -r.get("tol", 0)))
    if "b" in out:
        b = {**out["b"], "rows": b_rows} if b_date is None else out["b"]
        md.append(f"\n(b) n = {out['n_b']:,}" + (f" (from the run of {b_date})" if b_date else "")
                  + ", one fresh process per fit (the largest m with "
                  "PCG, the others with `solver=\"auto\"`); GEMM "
                  f"{b.get('gemm_gflops', float('nan')):.1f} GFLOP/s, float32 exp "
                  f"{b.get('exp32_per_s', float('nan')) / 1e9:.2f} G/s in this run\n\n"
                  "| m | solver | tol | fit (s) | iterations | s / pass | roofline / pass | "
                  "test RMSE | peak RSS (MiB) | run |\n|---|---|---|---|---|---|---|---|---|---|")
        for r in b["rows"]:
            if r.get("passes") is not None:  # a PCG fit
                roof = r.get("roofline_pass_s")
                cells = [str(r["iterations"]), f"{r['per_pass']:.1f}",
                         f"{roof:.1f} s ({roof / r['per_pass']:.0%})" if roof else ""]
            else:
                cells = ["", "", ""]
            tol = r.get("tol", out["tol"]) if r.get("solver", "pcg") == "pcg" else None
            md.append(f"| {r['m']:,} | {r.get('solver', 'pcg')} | "
                      + (f"{tol:g}" if tol is not None else "") + f" | {r['seconds']:.0f} | "
                      + " | ".join(cells) + f" | {r['rmse']:.6f} | {r['peak_rss_mib']:.0f} | "
                      + (r["date"][:16] if r.get("date") else b_date[:16] if b_date else "this run") + " |")
    out = _with_last(out, "probe")  # (c): the last recorded one where this run has none
    if "probe" in out:
        pr = out["probe"]
        md.append(f"\n(c) `--probe`: one PCG pass's cost at n = {pr['n']:,}, m = {pr['m']:,} "
                  f"({pr['iterations']} iterations, float32 blocks): median wall time of the "
                  "passes after the first, per kernel value, with `gram_product`'s tiles sized "
                  "to the cache (`sweep.PRODUCT_TILE_BYTES`) and with fixed 256-row tiles "
                  "(alternated fits)" + (f" (from the run of {pr['date']})" if pr.get("date")
                                         else "") + "\n\n| tiles | fit (s) | s / pass | ns per value (wall) |\n"
                  "|---|---|---|---|")
        for r in pr["rows"]:
            md.append(f"| {r['tiles']} | {r['seconds']:.1f} | {r['per_pass']:.2f} | "
                      f"{r['ns_per_value']:.3f} |")
    out = _with_last(out, "tols")  # (d): the last recorded one where this run has none
    if "tols" in out:
        tl = out["tols"]
        md.append(f"\n(d) `--tols`: PCG at n = {tl['n']:,}, m = {tl['m']:,} for several "
                  "tolerances (relative residual): iterations and test RMSE against the smallest "
                  "tolerance's" + (f" (from the run of {tl['date']})" if tl.get("date") else "")
                  + "\n\n| tol | iterations | fit (s) | test RMSE | rel. diff |\n"
                  "|---|---|---|---|---|")
        for r in tl["rows"]:
            md.append(f"| {r['tol']:g} | {r['iterations']} | {r['seconds']:.1f} | "
                      f"{r['rmse']:.6f} | {r['rmse_rel_diff']:.1e} |")
    _common.record("large_m", "\n".join(md), measured, args=args)


if __name__ == "__main__":
    main()
