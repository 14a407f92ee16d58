"""The CUDA backend against its GPU's roofline and against all CPU cores, in one run.

Synthetic regression (d = 20), ``SketchedKRR(Gaussian, SubSampling(m))``, ``store=None``,
float32 blocks: the pass (as distsketch logs it) and the whole fit at n = 10⁶ and 10⁷,
m = 1000 and 4000, with ``EngineOptions(device="cuda")`` and with the CPU path on all cores
(the threaded scheduler); decoding 1000 queries × 2·10⁶ candidates (precomputed candidate
features of width r, the scores GEMM and top-k of every task: ``decode_fixed`` with
``backend="cuda"`` and ``"numpy"``).

Roofline of the GPU pass: the slower of the GEMM-bound time (kernel GEMM ``2·n·m·(d + 2)`` and
``G = CᵀC`` ``2·n·m²``, both float64 on the device, plus ``b = Cᵀy``, at the float64 GEMM rate
measured in this run) and the exp-bound time (``n·m`` float32 exponentials at the measured
``cupy.exp`` rate). Decoding's reference is the measured float32 GEMM rate (``2·q·c·r``
flops). Targets (issue 17): pass ≥ 60 % of the roofline, ≥ 20× the CPU path on the same
machine, decoding ≥ 50 % of the float32 GEMM rate; printed with PASS/FAIL.

    python benchmarks/bench_gpu.py [--n 1000000,10000000] [--m 1000,4000] [--quick]

Without CuPy and a CUDA device the full run stops at once (nothing is measured or written).
``--quick`` runs tiny sizes once and writes nothing: on a machine without a GPU it runs the
CPU path and the CUDA backend's code on numpy (:class:`distsketch.cuda.HostModules`), to
check the script end to end — those "device" times are host times and are labelled so.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

D, LAM = 20, 1e-6
GAMMA = 1.0 / (2 * D)
TARGET_ROOF, TARGET_SPEEDUP, TARGET_DECODE = 0.60, 20.0, 0.50


def data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    y = np.sin(X @ (np.ones(D) / np.sqrt(D))) + 0.1 * rng.standard_normal(n)
    return X, y


def gpu_status() -> str | None:
    """None when CuPy and a CUDA device are usable, else why not."""
    try:
        import cupy
    except ImportError as exc:
        return f"CuPy not importable ({exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return "no CUDA device visible"
    except Exception as exc:
        return f"no CUDA runtime/device ({exc})"
    return None


def gpu_description() -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return (f"{name}, {props['totalGlobalMem'] / 2**30:.0f} GiB; CuPy {cupy.__version__}, "
            f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")


def _device_seconds(f, repeats: int) -> float:
    """Median wall time of ``f()`` followed by a device synchronisation."""
    import cupy

    f()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def gpu_roofline(repeats: int = 5) -> dict:
    """Measured GEMM (float32, float64; 8192²) and float32/float64 ``exp`` (2²⁸ values) rates."""
    import cupy

    n = 8192
    out = {}
    for name, dt in (("gemm_f32", cupy.float32), ("gemm_f64", cupy.float64)):
        a = cupy.random.default_rng(0).standard_normal((n, n)).astype(dt)
        c = cupy.empty_like(a)
        out[name] = 2 * n**3 / _device_seconds(lambda: cupy.matmul(a, a, out=c), repeats)
    size = 1 << 28
    x = cupy.random.default_rng(1).standard_normal(size, dtype=cupy.float64) * 0.1
    y32 = cupy.empty(size, dtype=cupy.float32)
    x32 = x.astype(cupy.float32)
    out["exp_f32"] = size / _device_seconds(lambda: cupy.exp(x32, out=y32), repeats)
    out["exp_f64_to_f32"] = size / _device_seconds(
        lambda: cupy.exp(x, out=y32, dtype=cupy.float32), repeats)
    return out


def pass_flops(n: int, m: int) -> float:
    """Kernel GEMM, ``G = CᵀC`` as the full GEMM the device runs, and ``b = Cᵀy``."""
    return n * (2.0 * m * (D + 2) + 2.0 * m * m + 2.0 * m)


def fit_seconds(X, y, m: int, *, device: str, backend: str = "numpy",
                times: _common.PassTimes, **options) -> tuple[float, float]:
    """Wall time of one ``fit`` (store=None) and of its pass."""
    import distsketch as ds

    opts = ds.EngineOptions(device=device, backend=backend, **options)
    model = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(m), lam=LAM,
                           random_state=0, options=opts)
    before = len(times.seconds)
    t = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - t
    assert len(times.seconds) == before + 1, "the fit ran no pass"
    return seconds, times.seconds[-1]


def decode_seconds(q: int, c: int, r: int, k: int, backend: str, candidate_rows: int) -> float:
    """Wall time of ``decode_fixed`` over precomputed candidate features (scores + top-k)."""
    from distsketch.decode import decode_fixed
    from distsketch.features import FeatureMap

    rng = np.random.default_rng(3)
    phi = rng.standard_normal((c, r))
    kyy = rng.random(c)
    G = rng.standard_normal((q, r))
    fmap = FeatureMap(None, np.zeros((1, 1)))  # unused: the candidates are "cached"

    def read(a, b):
        return ("cached", phi, kyy, a, b)

    t = time.perf_counter()
    decode_fixed(fmap, G, read, n_candidates=c, k=k, block_rows=candidate_rows,
                 backend=backend)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1000000,10000000", help="training rows, comma-separated")
    ap.add_argument("--m", default="1000,4000", help="sketch sizes, comma-separated")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=2_000_000)
    ap.add_argument("--r", type=int, default=256, help="candidate feature width")
    ap.add_argument("--gpu-block-memory", type=int, default=2**30,
                    help="EngineOptions.block_memory of the GPU fits (bytes)")
    ap.add_argument("--gpu-threads", type=int, default=2,
                    help="threads of the scheduler feeding the one GPU")
    ap.add_argument("--quick", action="store_true",
                    help="n = 20 000, m = 200, 50 × 20 000 decoding, nothing recorded")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import dask

    from distsketch.backends import register_backend

    why = gpu_status()
    if args.quick:
        ns, ms, q, c, r = [20_000], [200], 50, 20_000, 32
    else:
        ns = [int(v) for v in args.n.split(",")]
        ms = [int(v) for v in args.m.split(",")]
        q, c, r = args.queries, args.candidates, args.r
    if why is not None and not args.quick:
        print(f"bench_gpu: {why}: nothing measured, nothing written. Run it on a machine with "
              f"a CUDA GPU and 'pip install \"distsketch[gpu]\"', or use --quick to check the "
              f"script on the CPU.")
        raise SystemExit(2)
    if why is None:
        gpu = {"device": "cuda", "backend": "numpy"}
        label, machine = "GPU", gpu_description()
        roof = gpu_roofline()
    else:
        from distsketch.cuda import CupyBackend, HostModules

        register_backend(CupyBackend(HostModules(), name="cuda-emulated"))
        gpu = {"device": "cpu", "backend": "cuda-emulated"}
        label, machine, roof = "emulated CUDA backend on numpy (NOT a GPU)", why, None
    print(f"device path: {label} — {machine}")
    if roof:
        print("roofline: " + ", ".join(f"{k} {v / 1e12:.1f} T/s" if k.startswith("gemm")
                                       else f"{k} {v / 1e9:.0f} G/s" for k, v in roof.items()))
    times = _common.watch_pass()
    rows, results = [], []
    for n in ns:
        X, y = data(n)
        for m in ms:
            with dask.config.set(scheduler="threads", num_workers=args.gpu_threads):
                fit_seconds(X[:20_000], y[:20_000], m, times=times, **gpu)  # warm-up
                g_fit, g_pass = fit_seconds(X, y, m, times=times,
                                            block_memory=args.gpu_block_memory, **gpu)
            with dask.config.set(scheduler="threads", num_workers=None):
                c_fit, c_pass = fit_seconds(X, y, m, device="cpu", times=times)
            res = {"n": n, "m": m, "gpu_pass_s": g_pass, "gpu_fit_s": g_fit,
                   "cpu_pass_s": c_pass, "cpu_fit_s": c_fit, "speedup_pass": c_pass / g_pass}
            if roof:
                t_gemm = pass_flops(n, m) / roof["gemm_f64"]
                t_exp = n * m / roof["exp_f64_to_f32"]
                res["roofline_s"] = max(t_gemm, t_exp)
                res["fraction_of_roofline"] = res["roofline_s"] / g_pass
            results.append(res)
            frac = (f"{res['fraction_of_roofline']:.0%} of roofline "
                    f"({'PASS' if res['fraction_of_roofline'] >= TARGET_ROOF else 'FAIL'})"
                    if roof else "no roofline (no GPU)")
            speed = (f"speed-up {res['speedup_pass']:.1f}× "
                     f"({'PASS' if res['speedup_pass'] >= TARGET_SPEEDUP else 'FAIL'})"
                     if roof else "no speed-up figure (no GPU)")
            print(f"n={n} m={m}: {label} pass {g_pass:.2f} s, fit {g_fit:.2f} s; CPU pass "
                  f"{c_pass:.2f} s, fit {c_fit:.2f} s; {speed}; {frac}")
            rows.append(f"| {n:,} | {m} | {g_pass:.2f} | {g_fit:.2f} | {c_pass:.2f} | {c_fit:.2f} "
                        f"| {res['speedup_pass']:.1f}× | "
                        f"{res.get('fraction_of_roofline', float('nan')):.0%} |")
    with dask.config.set(scheduler="threads", num_workers=args.gpu_threads):
        g_dec = decode_seconds(q, c, r, 10, gpu["backend"] if why else "cuda", 16384)
    with dask.config.set(scheduler="threads", num_workers=None):
        c_dec = decode_seconds(q, c, r, 10, "numpy", 16384)
    flops = 2.0 * q * c * r
    dec = {"queries": q, "candidates": c, "r": r, "k": 10, "gpu_s": g_dec, "cpu_s": c_dec}
    line = f"decoding {q} × {c:,} (r = {r}, k = 10): {label} {g_dec:.2f} s, CPU {c_dec:.2f} s"
    if roof:
        dec["fraction_of_gemm_f32"] = flops / g_dec / roof["gemm_f32"]
        ok = "PASS" if dec["fraction_of_gemm_f32"] >= TARGET_DECODE else "FAIL"
        line += f"; {dec['fraction_of_gemm_f32']:.0%} of the float32 GEMM rate ({ok})"
    print(line)
    print({"pass": results, "decode": dec})
    if args.quick or roof is None:
        print("(--quick / no GPU: nothing recorded)")
        return
    md = f"""GPU: {machine}. CPU path: {_common.machine()['cores']} cores, threaded scheduler.
Roofline (measured now): float64 GEMM {roof['gemm_f64'] / 1e12:.1f} TFLOP/s, float32 GEMM
{roof['gemm_f32'] / 1e12:.1f} TFLOP/s, float32 exp {roof['exp_f64_to_f32'] / 1e9:.0f} G/s.
`SketchedKRR(Gaussian, SubSampling(m))`, d = {D}, `store=None`, float32 blocks; times in s.

| n | m | GPU pass | GPU fit | CPU pass | CPU fit | pass speed-up (target ≥ 20×) | GPU pass / roofline (target ≥ 60 %) |
|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + f"""

Decoding {q} queries × {c:,} candidates (r = {r}, k = 10, precomputed features): GPU
{g_dec:.2f} s = {dec['fraction_of_gemm_f32']:.0%} of the float32 GEMM rate (target ≥ 50 %),
CPU {c_dec:.2f} s.
"""
    _common.record("gpu", md, {"machine_gpu": machine, "roofline": roof, "pass": results,
                               "decode": dec})


if __name__ == "__main__":
    main()
