"""Pass throughput against this machine's roofline, and the 2-worker speed-up.

Synthetic regression (d = 20), ``SketchedKRR(Gaussian, SubSampling(1000))``: the streaming
pass computes, per row, one kernel row against the m landmarks (m exponentials and a
2m(d + 2)-flop GEMM row), its contribution ``m²`` to ``G = Σ C_Iᵀ C_I`` (a symmetric
rank update, one triangle) and ``2m`` to
``b = Σ C_Iᵀ y_I``, and writes the m-wide row of ``C`` to the zarr store.

Roofline (issue #5): the slower of the GEMM-bound time ``flops / R_gemm`` at the numpy
float64 GEMM rate measured in this run, and the exp-bound time ``n·m / R_exp`` at the
all-cores ``numpy.exp`` rate measured in this run (one thread per core, each on its own
array). Throughput is reported as roofline time / measured time, for the pass as
distsketch logs it (every block's kernel block, sums and store write, and the tree
reduction) on the default threaded scheduler, and for the whole ``fit`` (also the landmark
gather, the driver's eigendecompositions and solve, and the saved model).

Also in the same run: the same fit on a ``LocalCluster`` of 1 worker process × 1 thread vs
2 worker processes × 1 thread (speed-up target ≥ 1.6×), with the store and with
``store=None`` (no blocks written), and the kernel block computed the
way distsketch does (one augmented GEMM, a clip and an in-place ``exp``) against the
textbook numpy expansion and against numexpr when installed (why distsketch needs no
numexpr here: numpy's SIMD ``exp`` is faster than numexpr's on this machine).

    python benchmarks/bench_pass.py [--n 200000] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import dask
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

D, M, LAM = 20, 1000, 1e-6
GAMMA = 1.0 / (2 * D)


def data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    y = np.sin(X @ (np.ones(D) / np.sqrt(D))) + 0.1 * rng.standard_normal(n)
    return X, y


def exp_rate_all_cores(size: int = 4_000_000, repeats: int = 5) -> float:
    """Aggregate ``numpy.exp`` rate with one thread per core, each on its own array (1/s)."""
    import os

    cores = os.cpu_count() or 1
    arrays = [np.random.default_rng(i).standard_normal(size) for i in range(cores)]
    outs = [np.empty(size) for _ in range(cores)]
    rates = []
    for _ in range(repeats):
        threads = [threading.Thread(target=np.exp, args=(a,), kwargs={"out": o})
                   for a, o in zip(arrays, outs)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        rates.append(cores * size / (time.perf_counter() - t))
    return float(np.median(rates))


def write_seconds(folder: Path, *, blocks: int = 24, rows: int = 4096) -> float:
    """Median wall time to write one ``rows × M`` float64 block to a new file (page cache)."""
    block = np.random.default_rng(0).standard_normal((rows, M))
    times = []
    for i in range(blocks):
        t = time.perf_counter()
        with open(folder / f"write-{i}", "wb") as f:
            f.write(memoryview(block).cast("B"))
        times.append(time.perf_counter() - t)
    for i in range(blocks):
        (folder / f"write-{i}").unlink()
    return float(np.median(times))


def pass_flops(n: int) -> float:
    """Floating-point operations of the pass: ``G = CᵀC`` is a symmetric rank-b update
    (numpy's ``C.T @ C`` calls BLAS ``syrk``: one triangle, ``n·m²`` flops, which this
    machine runs at the GEMM rate), the kernel GEMM ``2·n·m·(d + 2)`` and ``b = Cᵀy`` ``2·n·m``.
    """
    return n * (1.0 * M * M + 2.0 * M * (D + 2) + 2.0 * M)


class _PassTimes(logging.Handler):
    """Collects the pass wall time that ``distsketch.accumulate`` logs after each pass."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "pass_seconds"):
            self.seconds.append(record.pass_seconds)


PASS_TIMES = _PassTimes()


def fit_seconds(X, y, store: Path | None) -> tuple[float, float]:
    """Wall time of one ``fit`` and of its pass (on the active dask scheduler).

    ``store=None``: distsketch writes no pass blocks (nothing could resume from them).
    """
    import distsketch as ds

    if store is not None:
        shutil.rmtree(store, ignore_errors=True)
    model = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(M), lam=LAM,
                           random_state=0, store=store,
                           options=ds.EngineOptions(progress=False, overwrite=True))
    before = len(PASS_TIMES.seconds)
    t = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - t
    if store is not None:
        shutil.rmtree(store, ignore_errors=True)
    assert len(PASS_TIMES.seconds) == before + 1, "the fit ran no pass"
    return seconds, PASS_TIMES.seconds[-1]


def cluster_fit_seconds(X, y, store: Path | None, n_workers: int) -> tuple[float, float]:
    """``fit_seconds`` on a fresh LocalCluster of ``n_workers`` processes × 1 thread."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster):
        fit_seconds(X[:20_000], y[:20_000], store)  # warm-up: imports in the workers
        return fit_seconds(X, y, store)


def kernel_variants(repeats: int) -> dict:
    """Seconds for one 4096 × 1000 Gaussian block (d = 20), single thread, three ways."""
    from threadpoolctl import threadpool_limits

    import distsketch as ds

    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((4096, D)), rng.standard_normal((M, D))
    k = ds.Gaussian(gamma=GAMMA)

    def textbook():
        K = A @ B.T
        K *= -2.0
        K += np.einsum("ij,ij->i", A, A)[:, None]
        K += np.einsum("ij,ij->i", B, B)[None, :]
        np.maximum(K, 0.0, out=K)
        K *= -GAMMA
        return np.exp(K, out=K)

    def med(f):
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    out = {}
    with threadpool_limits(1):
        out["distsketch"] = med(lambda: k(A, B))
        out["numpy_textbook"] = med(textbook)
        try:
            import numexpr as ne
        except ImportError:
            pass
        else:
            na = np.einsum("ij,ij->i", A, A)[:, None]
            nb = np.einsum("ij,ij->i", B, B)[None, :]
            for threads in (1, ne.detect_number_of_cores()):
                ne.set_num_threads(threads)
                out[f"numexpr_{threads}_threads"] = med(lambda: ne.evaluate(
                    "exp(where(na + nb - 2 * G > 0, (2 * G - na - nb) * g, 0))",
                    local_dict={"na": na, "nb": nb, "G": A @ B.T, "g": GAMMA}))
        assert np.allclose(k(A, B), textbook(), rtol=1e-12, atol=1e-14)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="n = 20 000, 1 repeat, no RESULTS.md")
    args = ap.parse_args()
    if args.quick:
        args.n, args.repeats = 20_000, 1
    logger = logging.getLogger("distsketch.accumulate")
    logger.setLevel(logging.INFO)
    logger.addHandler(PASS_TIMES)

    X, y = data(args.n)
    tmp = Path(tempfile.mkdtemp(prefix="distsketch-bench-pass-", dir="."))
    store = tmp / "fit.zarr"
    gemm, expr, threaded, threaded_mem, one, two, one_mem, two_mem = [], [], [], [], [], [], [], []
    try:
        fit_seconds(X[:20_000], y[:20_000], store)  # warm-up: imports, thread pools
        # interleaved, so drift hits every contender; one contender alive at a time (a
        # LocalCluster's scheduler and idle workers would share the 2 cores with the others)
        for r in range(args.repeats):
            gemm.append(_common.gemm_gflops(repeats=3))
            expr.append(exp_rate_all_cores(repeats=3))
            threaded.append(fit_seconds(X, y, store))
            threaded_mem.append(fit_seconds(X, y, None))
            one.append(cluster_fit_seconds(X, y, store, 1))
            two.append(cluster_fit_seconds(X, y, store, 2))
            one_mem.append(cluster_fit_seconds(X, y, None, 1))
            two_mem.append(cluster_fit_seconds(X, y, None, 2))
            print(f"repeat {r + 1}: GEMM {gemm[-1]:.1f} GFLOP/s, exp {expr[-1] / 1e6:.0f} M/s; "
                  f"fit / pass (s): threaded {threaded[-1][0]:.2f} / {threaded[-1][1]:.2f} "
                  f"(store=None {threaded_mem[-1][0]:.2f} / {threaded_mem[-1][1]:.2f}), "
                  f"1 worker {one[-1][0]:.2f} / {one[-1][1]:.2f}, "
                  f"2 workers {two[-1][0]:.2f} / {two[-1][1]:.2f}; store=None: "
                  f"1 worker {one_mem[-1][0]:.2f} / {one_mem[-1][1]:.2f}, "
                  f"2 workers {two_mem[-1][0]:.2f} / {two_mem[-1][1]:.2f}", flush=True)
        kernels = kernel_variants(repeats=7)
        write_s = write_seconds(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def median(values, i=None):
        return float(np.median([v if i is None else v[i] for v in values]))

    runs = {"threaded": threaded, "threaded_mem": threaded_mem, "one": one, "two": two,
            "one_mem": one_mem, "two_mem": two_mem}
    fit = {k: median(v, 0) for k, v in runs.items()}
    pas = {k: median(v, 1) for k, v in runs.items()}
    rate_gemm, rate_exp = median(gemm), median(expr)
    t_gemm = pass_flops(args.n) / (rate_gemm * 1e9)
    t_exp = args.n * M / rate_exp
    roofline = max(t_gemm, t_exp)
    fraction = roofline / pas["threaded"]
    fraction_fit = roofline / fit["threaded"]
    fraction_mem = roofline / pas["threaded_mem"]
    speedup = pas["one"] / pas["two"]
    speedup_fit = fit["one"] / fit["two"]
    speedup_mem = pas["one_mem"] / pas["two_mem"]
    v_roof = "PASS" if fraction >= 0.6 else "FAIL"
    v_speed = "PASS" if speedup >= 1.6 else "FAIL"
    print(f"roofline {roofline:.2f} s (GEMM-bound {t_gemm:.2f} s, exp-bound {t_exp:.2f} s); "
          f"threaded pass {pas['threaded']:.2f} s = {fraction:.0%} of roofline ({v_roof}); "
          f"whole fit {fit['threaded']:.2f} s = {fraction_fit:.0%}; store=None pass "
          f"{pas['threaded_mem']:.2f} s = {fraction_mem:.0%}")
    print(f"LocalCluster pass 1 worker {pas['one']:.2f} s, 2 workers {pas['two']:.2f} s: "
          f"speed-up {speedup:.2f}x ({v_speed}); whole fit {speedup_fit:.2f}x; "
          f"store=None pass {pas['one_mem']:.2f} s / {pas['two_mem']:.2f} s: {speedup_mem:.2f}x")
    block_bytes = 4096 * M * 8
    print(f"store write of a 4096 x {M} float64 block: {write_s * 1e3:.1f} ms "
          f"({block_bytes / write_s / 2**30:.2f} GiB/s)")
    print("kernel block 4096 x 1000 (ms): " +
          ", ".join(f"{k} {v * 1e3:.1f}" for k, v in kernels.items()))
    if args.quick:
        return
    krows = "\n".join(f"| {k.replace('_', ' ')} | {v * 1e3:.1f} |" for k, v in kernels.items())
    md = f"""SketchedKRR, Gaussian kernel, `SubSampling({M})`, d = {D}, n = {args.n:,} synthetic
rows in memory, float64 blocks to a local zarr store; medians of {args.repeats} interleaved
repeats, one contender alive at a time. "pass" is the wall time of the streaming pass as
distsketch logs it (every row block's kernel block, its sums and its store write, and the
tree reduction); "fit" is the whole `fit` (also the landmark gather, the driver's
eigendecompositions and solve, the store metadata and the saved model).

| figure | value |
|---|---:|
| numpy float64 GEMM rate (this run) | {rate_gemm:.1f} GFLOP/s |
| numpy `exp`, all cores (this run) | {rate_exp / 1e6:.0f} M/s |
| pass work | {pass_flops(args.n) / 1e9:.0f} GFLOP, {args.n * M / 1e6:.0f} M exp |
| roofline: max(GEMM-bound, exp-bound) | {roofline:.2f} s (max({t_gemm:.2f}, {t_exp:.2f})) |
| pass / fit, threaded scheduler (default) | {pas['threaded']:.2f} s / {fit['threaded']:.2f} s |
| **pass throughput / roofline** (target ≥ 60 %) | **{fraction:.0%} ({v_roof})** |
| whole fit, roofline / fit time | {fraction_fit:.0%} |
| pass / fit, threaded, `store=None` (no blocks written) | {pas['threaded_mem']:.2f} s / {fit['threaded_mem']:.2f} s |
| pass throughput / roofline, `store=None` | {fraction_mem:.0%} |
| pass / fit, LocalCluster 1 worker × 1 thread | {pas['one']:.2f} s / {fit['one']:.2f} s |
| pass / fit, LocalCluster 2 workers × 1 thread | {pas['two']:.2f} s / {fit['two']:.2f} s |
| **2-worker speed-up of the pass** (target ≥ 1.6×) | **{speedup:.2f}× ({v_speed})** |
| 2-worker speed-up of the whole fit | {speedup_fit:.2f}× |
| pass / fit, `store=None` (no blocks written), 1 worker | {pas['one_mem']:.2f} s / {fit['one_mem']:.2f} s |
| pass / fit, `store=None` (no blocks written), 2 workers | {pas['two_mem']:.2f} s / {fit['two_mem']:.2f} s |
| 2-worker speed-up of the pass, `store=None` | {speedup_mem:.2f}× |

Writing one 4096 × {M} float64 block (32 MiB) to a new file on this machine's disk (the page
cache; the store's write path) took {write_s * 1e3:.1f} ms, {block_bytes / write_s / 2**30:.2f} GiB/s,
median of 24 in this run: the pass writes 8·n·m bytes ({8 * args.n * M / 2**30:.1f} GiB here), CPU work
the roofline does not count, which shares the 2 cores with the pass (`store=None` rows: the
same pass without it).

One 4096 × 1000 Gaussian kernel block (d = 20), one thread, median of 7 (ms):

| implementation | ms |
|---|---:|
{krows}
"""
    _common.record("pass", md, {"n": args.n, "gemm_gflops": gemm, "exp_per_s": expr,
                                "threaded_fit_pass_s": threaded, "one_worker_fit_pass_s": one,
                                "threaded_no_store_fit_pass_s": threaded_mem,
                                "no_store_fraction_of_roofline": fraction_mem,
                                "two_workers_fit_pass_s": two, "roofline_s": roofline,
                                "one_worker_no_store_fit_pass_s": one_mem,
                                "two_workers_no_store_fit_pass_s": two_mem,
                                "speedup_2_workers_no_store": speedup_mem,
                                "gemm_bound_s": t_gemm, "exp_bound_s": t_exp,
                                "fraction_of_roofline": fraction,
                                "fit_fraction_of_roofline": fraction_fit,
                                "speedup_2_workers": speedup, "fit_speedup_2_workers": speedup_fit,
                                "kernel_block_s": kernels, "block_write_s": write_s})


if __name__ == "__main__":
    main()
