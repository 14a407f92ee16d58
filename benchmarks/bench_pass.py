"""Pass throughput against this machine's roofline, and the 2-worker speed-up.

Synthetic regression (d = 20), ``SketchedKRR(Gaussian, SubSampling(1000))``: the streaming
pass computes, per row, one kernel row against the m landmarks (m exponentials and a
2m(d + 2)-flop GEMM row), its contribution ``2m²`` to ``G = Σ C_Iᵀ C_I`` and ``2m`` to
``b = Σ C_Iᵀ y_I``, and writes the m-wide row of ``C`` to the zarr store.

Roofline (issue #5): the slower of the GEMM-bound time ``flops / R_gemm`` at the numpy
float64 GEMM rate measured in this run, and the exp-bound time ``n·m / R_exp`` at the
all-cores ``numpy.exp`` rate measured in this run (one thread per core, each on its own
array). Throughput is reported as roofline time / measured time, measured as the whole
``fit`` wall time (pass, landmark gather, the driver's eigendecomposition and solve, store
writes) on the default threaded scheduler: a conservative figure for the pass itself.

Also in the same run: the same fit on a ``LocalCluster`` of 1 worker process × 1 thread vs
2 worker processes × 1 thread (speed-up target ≥ 1.6×), and the kernel block computed the
way distsketch does (one augmented GEMM, a clip and an in-place ``exp``) against the
textbook numpy expansion and against numexpr when installed (why distsketch needs no
numexpr here: numpy's SIMD ``exp`` is faster than numexpr's on this machine).

    python benchmarks/bench_pass.py [--n 200000] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
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


def pass_flops(n: int) -> float:
    return n * (2.0 * M * M + 2.0 * M * (D + 2) + 2.0 * M)


def fit_seconds(X, y, store: Path, *, client=None) -> float:
    import distsketch as ds

    shutil.rmtree(store, ignore_errors=True)
    model = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(M), lam=LAM,
                           random_state=0, store=store,
                           options=ds.EngineOptions(progress=False, overwrite=True))
    t = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - t
    shutil.rmtree(store, ignore_errors=True)
    return seconds


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
    from distributed import Client, LocalCluster

    X, y = data(args.n)
    tmp = Path(tempfile.mkdtemp(prefix="distsketch-bench-pass-", dir="."))
    store = tmp / "fit.zarr"
    gemm, expr, threaded, one, two = [], [], [], [], []
    try:
        fit_seconds(X[:20_000], y[:20_000], store)  # warm-up: imports, thread pools
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as c1, Client(c1) as cl1, \
             LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as c2, Client(c2) as cl2:
            for r in range(args.repeats):  # interleaved, so drift hits every contender
                gemm.append(_common.gemm_gflops(repeats=3))
                expr.append(exp_rate_all_cores(repeats=3))
                threaded.append(fit_seconds(X, y, store))
                with cl1.as_current():
                    one.append(fit_seconds(X, y, store, client=cl1))
                with cl2.as_current():
                    two.append(fit_seconds(X, y, store, client=cl2))
                print(f"repeat {r + 1}: GEMM {gemm[-1]:.1f} GFLOP/s, exp {expr[-1] / 1e6:.0f} M/s, "
                      f"threaded fit {threaded[-1]:.2f} s, 1 worker {one[-1]:.2f} s, "
                      f"2 workers {two[-1]:.2f} s", flush=True)
        kernels = kernel_variants(repeats=7)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: float(np.median(v)) for k, v in
           {"gemm": gemm, "exp": expr, "threaded": threaded, "one": one, "two": two}.items()}
    t_gemm = pass_flops(args.n) / (med["gemm"] * 1e9)
    t_exp = args.n * M / med["exp"]
    roofline = max(t_gemm, t_exp)
    fraction = roofline / med["threaded"]
    speedup = med["one"] / med["two"]
    v_roof = "PASS" if fraction >= 0.6 else "FAIL"
    v_speed = "PASS" if speedup >= 1.6 else "FAIL"
    print(f"roofline {roofline:.2f} s (GEMM-bound {t_gemm:.2f} s, exp-bound {t_exp:.2f} s); "
          f"threaded fit {med['threaded']:.2f} s = {fraction:.0%} of roofline ({v_roof})")
    print(f"LocalCluster 1 worker {med['one']:.2f} s, 2 workers {med['two']:.2f} s: "
          f"speed-up {speedup:.2f}x ({v_speed})")
    print("kernel block 4096 x 1000 (ms): " +
          ", ".join(f"{k} {v * 1e3:.1f}" for k, v in kernels.items()))
    if args.quick:
        return
    krows = "\n".join(f"| {k.replace('_', ' ')} | {v * 1e3:.1f} |" for k, v in kernels.items())
    md = f"""SketchedKRR, Gaussian kernel, `SubSampling({M})`, d = {D}, n = {args.n:,} synthetic
rows in memory, float64 blocks to a local zarr store; medians of {args.repeats} interleaved
repeats. The timed figure is the whole `fit` (pass, landmark gather, eigendecomposition, solve,
store writes).

| figure | value |
|---|---:|
| numpy float64 GEMM rate (this run) | {med['gemm']:.1f} GFLOP/s |
| numpy `exp`, all cores (this run) | {med['exp'] / 1e6:.0f} M/s |
| pass work | {pass_flops(args.n) / 1e9:.0f} GFLOP, {args.n * M / 1e6:.0f} M exp |
| roofline: max(GEMM-bound, exp-bound) | {roofline:.2f} s (max({t_gemm:.2f}, {t_exp:.2f})) |
| fit, threaded scheduler (default) | {med['threaded']:.2f} s |
| **throughput / roofline** (target ≥ 60 %) | **{fraction:.0%} ({v_roof})** |
| fit, LocalCluster 1 worker × 1 thread | {med['one']:.2f} s |
| fit, LocalCluster 2 workers × 1 thread | {med['two']:.2f} s |
| **2-worker speed-up** (target ≥ 1.6×) | **{speedup:.2f}× ({v_speed})** |

One 4096 × 1000 Gaussian kernel block (d = 20), one thread, median of 7 (ms):

| implementation | ms |
|---|---:|
{krows}
"""
    _common.record("pass", md, {"n": args.n, "gemm_gflops": gemm, "exp_per_s": expr,
                                "threaded_s": threaded, "one_worker_s": one,
                                "two_workers_s": two, "roofline_s": roofline,
                                "gemm_bound_s": t_gemm, "exp_bound_s": t_exp,
                                "fraction_of_roofline": fraction, "speedup_2_workers": speedup,
                                "kernel_block_s": kernels})


if __name__ == "__main__":
    main()
