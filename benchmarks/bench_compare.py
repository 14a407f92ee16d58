"""This tree against a base git revision, interleaved in the same run: did a change slow the pass?

The absolute figures of the other benchmarks move with the machine (this one is shared: its
GEMM rate varies by 10–20 % between hours). A refactor is judged here instead: the same fit
of ``bench_pass.py`` (``SketchedKRR(Gaussian, SubSampling(1000))``, d = 20, n = 200 000,
store written, default options) runs in a fresh process for the base revision and for this
tree, alternately (the order flips every repeat), on the threaded scheduler (also with
``store=None``, which takes the disk and its noise out), a 1-worker and a 2-worker
``LocalCluster``. The base revision is checked out with ``git worktree`` into a
temporary directory and imported through ``PYTHONPATH`` with the same virtualenv.

Writes the ``compare`` section of ENGINE.md and results/compare.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_compare.py --base 8498ec0 [--repeats 5] [--n 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODES = {"threaded": "threaded scheduler", "memory": "threaded scheduler, `store=None`",
         "one": "LocalCluster, 1 worker × 1 thread", "two": "LocalCluster, 2 workers × 1 thread"}


def child(mode: str, n: int, workdir: str) -> None:
    """One timed fit (run with the tree to measure first on PYTHONPATH); prints JSON."""
    import distsketch as ds
    from bench_pass import GAMMA, LAM, M, data

    X, y = data(n)
    times = _common.watch_pass()
    store = tempfile.mkdtemp(dir=workdir)
    est = ds.SketchedKRR(ds.Gaussian(GAMMA), sketch=ds.SubSampling(M), lam=LAM, random_state=0,
                         store=None if mode == "memory" else os.path.join(store, "fit.zarr"))

    def fit():
        os.sync()
        t = time.perf_counter()
        est.fit(X, y)
        return time.perf_counter() - t

    if mode in ("threaded", "memory"):
        total = fit()
    else:
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=1 if mode == "one" else 2, threads_per_worker=1,
                          processes=True, dashboard_address=None) as cluster, Client(cluster):
            total = fit()
    shutil.rmtree(store, ignore_errors=True)
    print(json.dumps({"fit": total, "pass": times.seconds[-1], "module": ds.__file__}))


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 20 000, 1 repeat", repeats=5)
    ap.add_argument("--base", help="git revision to compare with (required)")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return
    if not args.base:
        ap.error("--base: give the git revision to compare with")
    if args.quick:
        args.n, args.repeats = 20_000, 1
    base = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "distsketch"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    work = Path(tempfile.mkdtemp(prefix="distsketch-compare-", dir=ROOT / ".benchmarks-tmp"
                                 if (ROOT / ".benchmarks-tmp").is_dir() else None))
    tree = work / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), base], cwd=ROOT, check=True,
                   capture_output=True)
    versions = {"base": str(tree), "this": str(ROOT)}
    runs: dict = {m: {v: [] for v in versions} for m in MODES}
    gemm = [_common.gemm_gflops()]
    try:
        for r in range(args.repeats):
            for mode in MODES:
                order = list(versions) if r % 2 == 0 else list(versions)[::-1]
                for v in order:
                    out = _common.run_child([__file__, "--child", mode, str(args.n), str(work)],
                                            env={"PYTHONPATH": versions[v]})
                    assert out["module"].startswith(versions[v]), out["module"]
                    runs[mode][v].append(out)
                    print(f"repeat {r + 1} {mode:8s} {v}: pass {out['pass']:.2f} s, "
                          f"fit {out['fit']:.2f} s", flush=True)
        gemm.append(_common.gemm_gflops())
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)

    rows, data = [], {}
    for mode, label in MODES.items():
        med = {v: {k: float(np.median([o[k] for o in runs[mode][v]])) for k in ("pass", "fit")}
               for v in versions}
        ratio = med["this"]["pass"] / med["base"]["pass"]
        per = ", ".join(f"{t['pass'] / b['pass']:.2f}" for b, t in zip(runs[mode]["base"],
                                                                       runs[mode]["this"]))
        rows.append(f"| {label} | {med['base']['pass']:.2f} / {med['base']['fit']:.2f} | "
                    f"{med['this']['pass']:.2f} / {med['this']['fit']:.2f} | **{ratio:.3f}** | "
                    f"{per} |")
        data[mode] = {"median": med, "ratio": ratio,
                      "runs": {v: [{k: o[k] for k in ("pass", "fit")} for o in runs[mode][v]]
                               for v in versions}}
    this = f"{head}{' + uncommitted changes' if dirty else ''}"
    md = f"""
This tree ({this}) against base revision {base}, the same fit in fresh processes, alternating
(order flipped every repeat), medians of {args.repeats}: `SketchedKRR(Gaussian, SubSampling(1000))`,
d = 20, n = {args.n:,}, store written (default options) except the `store=None` row. numpy GEMM {gemm[0]:.1f} / {gemm[-1]:.1f}
GFLOP/s before / after. A ratio this / base near 1 means no change of speed; the per-repeat
ratios show the run-to-run noise.

| scheduler | base pass / fit (s) | this pass / fit (s) | pass ratio this / base | per repeat |
|---|---:|---:|---:|---|
{chr(10).join(rows)}
"""
    _common.record("compare", md, {"base": base, "this": this, "gemm_gflops": gemm, **data},
                   args=args)


if __name__ == "__main__":
    main()
