"""Pass throughput against this machine's roofline, and the 2-worker speed-up.

Synthetic regression (d = 20), ``SketchedKRR(Gaussian, SubSampling(1000))``: the streaming
pass computes, per row, one kernel row against the m landmarks (m exponentials and a
2m(d + 2)-flop GEMM row), its contribution ``m²`` to ``G = Σ C_Iᵀ C_I`` (a symmetric
rank update, one triangle) and ``2m`` to
``b = Σ C_Iᵀ y_I``, and writes the m-wide row of ``C`` to the zarr store.

Roofline: the slower of the GEMM-bound time ``flops / R_gemm`` at the numpy
float64 GEMM rate measured in this run, and the exp-bound time ``n·m / R_exp`` at the
all-cores ``numpy.exp`` rate measured in this run (one thread per core, each on its own
array). Throughput is reported as roofline time / measured time, for the pass as
distsketch logs it (every block's kernel block, sums and store write, and the tree
reduction) on the default threaded scheduler, and for the whole ``fit`` (also the landmark
gather, the driver's eigendecompositions and solve, and the saved model).

Also in the same run: the threaded pass with float64 blocks, with float64 blocks written
through the page cache (``direct_io=False``) and with ``store=None`` (no blocks written);
the same fit on a ``LocalCluster`` of 1 worker process × 1 thread vs
2 worker processes × 1 thread (speed-up target ≥ 1.6×), with the store and with
``store=None``; the cost of one block write (wall, CPU, hypervisor steal) through the page
cache and with O_DIRECT; and the kernel block computed the way the pass does (row tiles of
about 4 MiB, each one augmented GEMM, a clip and an ``exp`` in float32 into the float32
block) against float64, one whole-block call, the textbook numpy expansion and numexpr
when installed (why distsketch needs no numexpr here: numpy's SIMD ``exp`` is faster than
numexpr's on this machine, and its float32 ``exp`` 3–4× its float64 one).

Writes the ``pass`` section of ENGINE.md and results/pass.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_pass.py [--n 200000] [--repeats 5] [--quick]
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

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


def _steal_seconds() -> float:
    """CPU time the hypervisor has taken from this machine's vCPUs so far (Linux)."""
    try:
        fields = open("/proc/stat").readline().split()
    except OSError:
        return float("nan")
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def write_costs(folder: Path, *, blocks: int = 24, rows: int = 4096) -> dict:
    """Per ``rows × M`` block: wall, CPU of this process and hypervisor steal of writing it
    to a new file, through the page cache (float64) and the way the store writes it
    (``chunkwrite.write_rows``: O_DIRECT) as float64 and float32, the disk idle otherwise."""
    import zarr

    from distsketch.engine.chunkwrite import write_rows

    block = np.random.default_rng(0).standard_normal((rows, M))

    def buffered(i):
        with open(folder / f"write-{i}", "wb") as f:
            f.write(memoryview(block).cast("B"))

    arrays = {}

    def stored(dtype):
        arrays[dtype] = zarr.create_array(folder / f"w-{dtype}.zarr", shape=(rows * blocks, M),
                                          chunks=(rows, M), dtype=dtype, compressors=None)
        return lambda i: write_rows(arrays[dtype], i * rows, block)

    out = {}
    for label, write in (("page cache, float64", buffered),
                         ("O_DIRECT, float64", stored("float64")),
                         ("O_DIRECT, float32", stored("float32"))):
        wall, cpu, steal = [], [], []
        for i in range(blocks):
            t, c, st = time.perf_counter(), time.process_time(), _steal_seconds()
            write(i)
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            steal.append(_steal_seconds() - st)
        out[label] = {"wall_s": float(np.median(wall)), "cpu_s": float(np.median(cpu)),
                      "steal_s": float(np.sum(steal) / blocks)}
        os.sync()  # the page-cache writes' write-back, before the next contender
    for i in range(blocks):
        (folder / f"write-{i}").unlink()
    for dtype in arrays:
        shutil.rmtree(folder / f"w-{dtype}.zarr")
    return out


def pass_flops(n: int) -> float:
    """Floating-point operations of the pass: ``G = CᵀC`` is a symmetric rank-b update
    (numpy's ``C.T @ C`` calls BLAS ``syrk``: one triangle, ``n·m²`` flops, which this
    machine runs at the GEMM rate), the kernel GEMM ``2·n·m·(d + 2)`` and ``b = Cᵀy`` ``2·n·m``.
    """
    return n * (1.0 * M * M + 2.0 * M * (D + 2) + 2.0 * M)


PASS_TIMES = _common.PassTimes()


def fit_seconds(X, y, store: Path | None, **options) -> tuple[float, float, float]:
    """Wall time of one ``fit``, of its pass (on the active dask scheduler), and the vCPU
    time the hypervisor took from the machine meanwhile (steal).

    ``store=None``: distsketch writes no pass blocks (nothing could resume from them);
    ``options``: EngineOptions fields other than the defaults.
    """
    import distsketch as ds

    if store is not None:
        shutil.rmtree(store, ignore_errors=True)
    model = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(M), lam=LAM,
                           random_state=0, store=store,
                           options=ds.EngineOptions(progress=False, overwrite=True, **options))
    before = len(PASS_TIMES.seconds)
    # flush earlier contenders' dirty pages first: their write-back would otherwise take
    # this machine's CPU (hypervisor steal) during this fit
    os.sync()
    steal = _steal_seconds()
    t = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - t
    steal = _steal_seconds() - steal
    if store is not None:
        shutil.rmtree(store, ignore_errors=True)
    assert len(PASS_TIMES.seconds) == before + 1, "the fit ran no pass"
    return seconds, PASS_TIMES.seconds[-1], steal


def cluster_fit_seconds(X, y, store: Path | None, n_workers: int,
                        **options) -> tuple[float, float, float]:
    """``fit_seconds`` on a fresh LocalCluster of ``n_workers`` processes × 1 thread."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster):
        fit_seconds(X[:20_000], y[:20_000], store, **options)  # warm-up: imports in the workers
        return fit_seconds(X, y, store, **options)


def kernel_variants(repeats: int) -> dict:
    """Seconds for one 4096 × 1000 Gaussian block (d = 20), single thread: the pass's way
    (``gram_dot``: row tiles, float32 exponentials into the float32 block; and into a
    float64 block), one whole-block kernel call, the textbook numpy expansion, numexpr."""
    from threadpoolctl import threadpool_limits

    import distsketch as ds
    from distsketch.linalg.blocks import gram_dot

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
        out["distsketch pass, float32 block (default)"] = med(
            lambda: gram_dot(k, A, B, chunk=M, dtype=np.float32))
        out["distsketch pass, float64 block"] = med(lambda: gram_dot(k, A, B, chunk=M))
        out["one kernel call k(A, B), float64"] = med(lambda: k(A, B))
        out["numpy textbook, float64"] = med(textbook)
        try:
            import numexpr as ne
        except ImportError:
            pass
        else:
            na = np.einsum("ij,ij->i", A, A)[:, None]
            nb = np.einsum("ij,ij->i", B, B)[None, :]
            for threads in (1, ne.detect_number_of_cores()):
                ne.set_num_threads(threads)
                out[f"numexpr {threads} threads, float64"] = med(lambda: ne.evaluate(
                    "exp(where(na + nb - 2 * G > 0, (2 * G - na - nb) * g, 0))",
                    local_dict={"na": na, "nb": nb, "G": A @ B.T, "g": GAMMA}))
        assert np.allclose(k(A, B), textbook(), rtol=1e-12, atol=1e-14)
        assert np.allclose(gram_dot(k, A, B, chunk=M, dtype=np.float32), textbook(),
                           rtol=2e-6, atol=0)
    return out


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 20 000, 1 repeat", repeats=5)
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args()
    if args.quick:
        args.n, args.repeats = 20_000, 1
    logger = logging.getLogger("distsketch.engine.accumulate")
    logger.setLevel(logging.INFO)
    logger.addHandler(PASS_TIMES)

    X, y = data(args.n)
    tmp = Path(tempfile.mkdtemp(prefix="distsketch-bench-pass-", dir="."))
    store = tmp / "fit.zarr"
    # contender -> how it runs; threaded ones on the default scheduler, the others on a
    # fresh LocalCluster of that many 1-thread workers
    contenders = {
        "threaded": (0, store, {}),
        "threaded_f64": (0, store, {"block_dtype": "float64"}),
        "threaded_page_cache": (0, store, {"block_dtype": "float64", "direct_io": False}),
        "threaded_mem": (0, None, {}),
        "one": (1, store, {}), "two": (2, store, {}),
        "one_mem": (1, None, {}), "two_mem": (2, None, {}),
    }
    runs = {k: [] for k in contenders}
    gemm, expr, expr32 = [], [], []
    try:
        fit_seconds(X[:20_000], y[:20_000], store)  # warm-up: imports, thread pools
        # interleaved, so drift hits every contender; one contender alive at a time (a
        # LocalCluster's scheduler and idle workers would share the 2 cores with the others)
        for r in range(args.repeats):
            gemm.append(_common.gemm_gflops(repeats=3))
            expr.append(_common.exp_rate_all_cores(repeats=3))
            expr32.append(_common.exp_rate_all_cores(repeats=3, dtype=np.float32))
            for name, (workers, where, options) in contenders.items():
                if workers:
                    runs[name].append(cluster_fit_seconds(X, y, where, workers, **options))
                else:
                    runs[name].append(fit_seconds(X, y, where, **options))
            print(f"repeat {r + 1}: GEMM {gemm[-1]:.1f} GFLOP/s, exp {expr[-1] / 1e6:.0f} M/s; "
                  "fit / pass / steal (s): " + ", ".join(
                      f"{k} {v[-1][0]:.2f} / {v[-1][1]:.2f} / {v[-1][2]:.2f}"
                      for k, v in runs.items()), flush=True)
        kernels = kernel_variants(repeats=7)
        writes = write_costs(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def median(values, i=None):
        return float(np.median([v if i is None else v[i] for v in values]))

    fit = {k: median(v, 0) for k, v in runs.items()}
    pas = {k: median(v, 1) for k, v in runs.items()}
    steal = {k: median(v, 2) for k, v in runs.items()}
    rate_gemm, rate_exp, rate_exp32 = median(gemm), median(expr), median(expr32)
    t_gemm = pass_flops(args.n) / (rate_gemm * 1e9)
    t_exp = args.n * M / rate_exp
    roofline = max(t_gemm, t_exp)
    fraction = {k: roofline / pas[k] for k in ("threaded", "threaded_f64", "threaded_page_cache",
                                               "threaded_mem")}
    fraction_fit = roofline / fit["threaded"]
    speedup = pas["one"] / pas["two"]
    per_repeat = ", ".join(f"{a[1] / b[1]:.2f}×" for a, b in zip(runs["one"], runs["two"]))
    speedup_fit = fit["one"] / fit["two"]
    speedup_mem = pas["one_mem"] / pas["two_mem"]
    v_roof = "PASS" if fraction["threaded"] >= 0.6 else "FAIL"
    v_speed = "PASS" if speedup >= 1.6 else "FAIL"
    print(f"roofline {roofline:.2f} s (GEMM-bound {t_gemm:.2f} s, exp-bound {t_exp:.2f} s); "
          f"threaded pass {pas['threaded']:.2f} s = {fraction['threaded']:.0%} of roofline "
          f"({v_roof}); whole fit {fit['threaded']:.2f} s = {fraction_fit:.0%}; float64 blocks "
          f"{fraction['threaded_f64']:.0%}, page cache {fraction['threaded_page_cache']:.0%}, "
          f"store=None {fraction['threaded_mem']:.0%}")
    print(f"LocalCluster pass 1 worker {pas['one']:.2f} s, 2 workers {pas['two']:.2f} s: "
          f"speed-up {speedup:.2f}x ({v_speed}); whole fit {speedup_fit:.2f}x; "
          f"store=None pass {pas['one_mem']:.2f} s / {pas['two_mem']:.2f} s: {speedup_mem:.2f}x")
    for label, w in writes.items():
        print(f"write a 4096 x {M} block, {label}: wall {w['wall_s'] * 1e3:.1f} ms, "
              f"CPU {w['cpu_s'] * 1e3:.1f} ms, steal {w['steal_s'] * 1e3:.1f} ms")
    print("kernel block 4096 x 1000 (ms): " +
          ", ".join(f"{k} {v * 1e3:.1f}" for k, v in kernels.items()))
    krows = "\n".join(f"| {k} | {v * 1e3:.1f} |" for k, v in kernels.items())
    wrows = "\n".join(f"| {k} | {w['wall_s'] * 1e3:.1f} | {w['cpu_s'] * 1e3:.1f} | "
                      f"{w['steal_s'] * 1e3:.1f} |" for k, w in writes.items())
    md = f"""SketchedKRR, Gaussian kernel, `SubSampling({M})`, d = {D}, n = {args.n:,} synthetic
rows in memory, default options (float32 blocks, exponentials in float32, float64 sums of the
stored values, blocks written to a local zarr store with O_DIRECT) unless a row says otherwise; medians of {args.repeats} interleaved repeats, one
contender alive at a time. "pass" is the wall time of the streaming pass as distsketch logs it
(every row block's kernel block, its sums and its store write, and the tree reduction); "fit"
is the whole `fit` (also the landmark gather, the driver's eigendecompositions and solve, the
store metadata and the saved model).

| figure | value |
|---|---:|
| numpy float64 GEMM rate (this run) | {rate_gemm:.1f} GFLOP/s |
| numpy `exp`, all cores (this run), float64 / float32 | {rate_exp / 1e6:.0f} / {rate_exp32 / 1e6:.0f} M/s |
| pass work | {pass_flops(args.n) / 1e9:.0f} GFLOP, {args.n * M / 1e6:.0f} M exp |
| roofline: max(GEMM-bound, exp-bound) | {roofline:.2f} s (max({t_gemm:.2f}, {t_exp:.2f})) |
| pass / fit, threaded scheduler (default) | {pas['threaded']:.2f} s / {fit['threaded']:.2f} s |
| hypervisor steal during that fit (vCPU time, both cores) | {steal['threaded']:.2f} s ({steal['threaded_mem']:.2f} s with `store=None`) |
| **pass throughput / roofline** (target ≥ 60 %) | **{fraction['threaded']:.0%} ({v_roof})** |
| whole fit, roofline / fit time | {fraction_fit:.0%} |
| pass, float64 blocks (`block_dtype="float64"`) | {pas['threaded_f64']:.2f} s = {fraction['threaded_f64']:.0%} of roofline |
| pass, float64 blocks through the page cache (`direct_io=False`) | {pas['threaded_page_cache']:.2f} s = {fraction['threaded_page_cache']:.0%} |
| pass, `store=None` (no blocks written) | {pas['threaded_mem']:.2f} s = {fraction['threaded_mem']:.0%} |
| pass / fit, LocalCluster 1 worker × 1 thread | {pas['one']:.2f} s / {fit['one']:.2f} s |
| pass / fit, LocalCluster 2 workers × 1 thread | {pas['two']:.2f} s / {fit['two']:.2f} s |
| **2-worker speed-up of the pass** (target ≥ 1.6×) | **{speedup:.2f}× ({v_speed})** |
| the same, repeat by repeat | {per_repeat} |
| 2-worker speed-up of the whole fit | {speedup_fit:.2f}× |
| pass / fit, `store=None` (no blocks written), 1 worker | {pas['one_mem']:.2f} s / {fit['one_mem']:.2f} s |
| pass / fit, `store=None` (no blocks written), 2 workers | {pas['two_mem']:.2f} s / {fit['two_mem']:.2f} s |
| 2-worker speed-up of the pass, `store=None` | {speedup_mem:.2f}× |

Writing one 4096 × {M} block to a new file on this machine's disk, median of 24 in this run,
the machine otherwise idle (ms; steal: vCPU time the hypervisor took meanwhile, mean per
block; the pass writes n·m values, {args.n * M / 2**28:.1f} GiB as float32 here). O_DIRECT hands the
buffer to the virtual disk without filling the page cache; on this virtual machine the
hypervisor's disk emulation then takes its CPU from the vCPUs, visible as steal when both
cores are busy (the steal row above), not when one is idle:

| write | wall | CPU | steal |
|---|---:|---:|---:|
{wrows}

One 4096 × 1000 Gaussian kernel block (d = 20), one thread, median of 7 (ms). The roofline
above takes the float64 `exp` rate; it is GEMM-bound either way:

| implementation | ms |
|---|---:|
{krows}
"""
    _common.record("pass", md, {"n": args.n, "gemm_gflops": gemm, "exp_per_s": expr,
                                "exp_float32_per_s": expr32,
                                "fit_pass_s": runs, "roofline_s": roofline,
                                "gemm_bound_s": t_gemm, "exp_bound_s": t_exp,
                                "fraction_of_roofline": fraction,
                                "fit_fraction_of_roofline": fraction_fit,
                                "speedup_2_workers": speedup, "fit_speedup_2_workers": speedup_fit,
                                "speedup_2_workers_no_store": speedup_mem,
                                "kernel_block_s": kernels, "block_writes": writes}, args=args)


if __name__ == "__main__":
    main()
