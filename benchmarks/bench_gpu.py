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
flops). Targets: pass ≥ 60 % of the roofline, ≥ 20× the CPU path on the same
machine, decoding ≥ 50 % of the float32 GEMM rate; printed with PASS/FAIL.

Sparse rows on the device (section ``gpu_sparse``): the crossover density behind
``distsketch.backends.cuda.DEVICE_SPARSE_MAX_DENSITY`` (a placeholder until this runs on a GPU). For
row blocks of ``b`` ∈ {4 096, 16 384} CSR rows, ``d`` ∈ {1 000, 4 000} features, against 2 000
CSR landmarks of the same density (as in a pass over sparse data, where the landmarks are
training rows), the time of one Gaussian ``Kernel.fill`` into a float64 ``(b, 2000)`` device
array from operands already on the device as CSR, along the two routes of the device's density
rule (its threshold set by ``distsketch.kernels.tuned(Tuning(device_sparse_max_density=…))``):
``sparse`` (threshold 1: kept as cupyx CSR, the product a cuSPARSE sparse × sparse
product densified) and ``dense`` (threshold 0: ``toarray`` on the device, then the dense
route's one GEMM); and, for comparison, ``spmm`` (the CSR rows against dense landmarks:
cuSPARSE's sparse × dense product, which the host's panel route corresponds to and the device's
kernels do not take today). Median of ``--repeats`` after a warm-up. Per shape the crossover
density is where a sparse route's time meets the dense one's (linear interpolation between grid
densities); the smallest ``sparse`` crossover over the shapes is the value to write into
``DEVICE_SPARSE_MAX_DENSITY`` (below it the sparse route won on every shape measured).

PCG's preconditioner on the driver's device (section ``gpu_factor``): the threshold behind
``distsketch.backends.cuda.DEVICE_FACTOR_MIN_M`` (a placeholder until this runs on a GPU). For
``m`` landmarks (``--factor-ms``, default 10 000 and 20 000; d = 20, Gaussian), the host's and
the device's (``distsketch.solvers.devicefactor``) times of the three things PCG's driver
does: factoring ``K_mm`` (``factor_kmm``, the device's including its copy of ``K_mm`` over the
bus), building the preconditioner for one λ, and one iteration's driver work (``Pᵀ``, ``P``
and ``K_mm`` applied to one column; median of ``--repeats``). The host runs on every core
(``driver_threads``). ``K_mm``'s fill is left out of both, since it is the same host work.

    python benchmarks/bench_gpu.py [--n 1000000,10000000] [--m 1000,4000] [--quick]
    python benchmarks/bench_gpu.py --sparse-only [--densities 0.001,0.002,...]
    python benchmarks/bench_gpu.py --factor-only [--factor-ms 10000,20000]
    python benchmarks/bench_gpu.py --parts pass --no-record --json pass.json   # one part
    python benchmarks/bench_gpu.py --record-json pass.json decode.json pcg.json  # here

Without CuPy and a CUDA device the full run stops at once (nothing is measured or written).
``--quick`` runs tiny sizes once and writes nothing: on a machine without a GPU it runs the
CPU path and the CUDA backend's code on numpy (:class:`distsketch.testing.devices.HostModules`), to
check the script end to end — those "device" times are host times and are labelled so.

``--json PATH`` also writes the figures as JSON to PATH (rewritten after each measurement,
with ``"complete": false`` until the run ends, so a run cut short keeps what it measured), with
the machine, date and command; ``--no-record`` leaves benchmarks/RESULTS.md, ENGINE.md and
results/ alone (a borrowed machine's copy of the tree, whose changes never come back:
benchmarks/gpu_check.sh passes both). Sections: ``gpu`` (RESULTS.md; parts ``pass``,
``decode``, ``pcg``), ``gpu_sparse`` and ``gpu_factor`` (ENGINE.md). ``--parts`` measures
some of them. On a borrowed GPU machine each part can then be one command within the
per-command limit, and ``--record-json FILE...`` records here, in this tree, the sections
those files make, naming the GPU machine, its date and its command (gpu_sections.py).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from gpu_sections import (  # noqa: E402
    GPU_PARTS,
    TARGET_DECODE,
    TARGET_ROOF,
    TARGET_SPEEDUP,
    factor_markdown,
    gpu_markdown,
    record_json,
    sparse_markdown,
    sparse_table,
)

D, LAM = 20, 1e-6
GAMMA = 1.0 / (2 * D)
SPARSE_SHAPES = [(4096, 1000), (4096, 4000), (16384, 1000), (16384, 4000)]  # (b, d)
SPARSE_DENSITIES = "0.001,0.002,0.005,0.01,0.02,0.05,0.1"
SPARSE_LANDMARKS = 2000


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


def _host_seconds(f, repeats: int) -> float:
    """Median wall time of ``f()`` after a warm-up (the emulated device runs synchronously)."""
    f()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def sparse_rows(n: int, d: int, density: float, seed: int):
    """CSR rows of uniform random density, values in [0.5, 2) (rows scaled by 1/std)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    return sp.random(n, d, density=density, format="csr", random_state=rng,
                     data_rvs=lambda k: rng.uniform(0.5, 2.0, k))


def write_json(path: str | None, payload: dict) -> None:
    """``payload`` as JSON to ``path`` (atomically: a reader never sees half a file)."""
    if path:
        tmp = Path(f"{path}.tmp")
        tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
        tmp.replace(path)


def sparse_crossover(be, shapes, densities, n_landmarks: int, seconds,
                     on_row=None) -> list[dict]:
    """Per shape and density, ``Gaussian.fill`` seconds from operands on the device along three
    routes: ``sparse`` (CSR rows and CSR landmarks kept sparse, device threshold 1: the route a
    pass over sparse data takes below the threshold, a sparse × sparse product densified),
    ``spmm`` (CSR rows kept sparse against dense landmarks: cuSPARSE's sparse × dense SpMM, the
    route the host takes with its dense landmark panels) and ``dense`` (threshold 0: both
    densified on the device, then the dense route's GEMM). ``on_row(rows)`` after each row."""
    import distsketch as ds
    from distsketch.kernels.sparse import tuned

    kernel = ds.Gaussian(gamma=0.5)
    rows = []
    for b, d in shapes:
        for rho in densities:
            A = sparse_rows(b, d, rho, 0)
            L = sparse_rows(n_landmarks, d, rho, 1)
            Ad, Ld = be.asarray(A, dtype=np.float64), be.asarray(L, dtype=np.float64)
            Ldense = be.asarray(L.toarray())
            out = be.xp.empty((b, n_landmarks))
            t = {}
            for route, limit, right in (("sparse", 1.0, Ld), ("spmm", 1.0, Ldense),
                                        ("dense", 0.0, Ld)):
                with tuned(ds.Tuning(device_sparse_max_density=limit)):
                    t[route] = seconds(lambda: kernel.fill(Ad, right, out))
            rows.append({"b": b, "d": d, "density": rho, "nnz": int(A.nnz),
                         **{f"{k}_s": v for k, v in t.items()}})
            if on_row is not None:
                on_row(rows)
    return rows


def _driver_seconds(gram, v: np.ndarray, repeats: int) -> dict:
    """Seconds of ``factor_kmm(gram)``, of one λ's preconditioner and (median of ``repeats``)
    of one iteration's ``Pᵀ``, ``P`` and ``K_mm`` products, on ``gram``'s device or host."""
    from distsketch.solvers.preconditioner import Preconditioner, factor_kmm

    t = time.perf_counter()
    T = factor_kmm(gram)
    factor_s = time.perf_counter() - t
    t = time.perf_counter()
    P = (Preconditioner(gram, PCG_LAM, 10**6, T=T) if gram.on_device is None
         else gram.on_device.preconditioner(T, PCG_LAM, 10**6))
    precond_s = time.perf_counter() - t
    return {"factor_s": factor_s, "preconditioner_s": precond_s,
            "iteration_s": _host_seconds(lambda: P.apply(P.apply_t(v)) + gram.dot(v), repeats)}


def factor_compare(device_be, ms: list[int], repeats: int, on_row=None) -> list[dict]:
    """Per ``m``: seconds of ``factor_kmm``, of one λ's preconditioner and of one iteration's
    driver work (``P.apply_t``, ``P.apply``, ``K_mm v``; median of ``repeats``), on the host
    and on ``device_be``'s device. ``on_row(rows)`` after each ``m``."""
    import distsketch as ds
    from distsketch.engine.features import FeatureMap
    from distsketch.options import driver_threads
    from distsketch.solvers.devicefactor import DeviceAlgebra
    from distsketch.solvers.preconditioner import LandmarkGram, factor_kmm

    rows = []
    for m in ms:
        land = np.random.default_rng(5).standard_normal((m, D))
        fmap = FeatureMap(ds.Gaussian(gamma=GAMMA), land, None, 2048, None)
        v = np.random.default_rng(6).standard_normal((m, 1))
        row = {"m": m}
        for where in ("host", "device"):
            device = None if where == "host" else DeviceAlgebra(device_be)
            if device is not None:  # warm-up: cuSOLVER's and cuBLAS's first calls
                small = LandmarkGram(FeatureMap(ds.Gaussian(gamma=GAMMA), land[:256], None,
                                                2048, None), on_device=DeviceAlgebra(device_be))
                small.on_device.preconditioner(factor_kmm(small), PCG_LAM, 10**6).apply(v[:256])
            with driver_threads(m):
                row.update({f"{where}_{k}": t for k, t in
                            _driver_seconds(LandmarkGram(fmap, on_device=device), v,
                                            repeats).items()})
        row["device_wins"] = (row["device_factor_s"] + row["device_preconditioner_s"]
                              < row["host_factor_s"] + row["host_preconditioner_s"]
                              and row["device_iteration_s"] < row["host_iteration_s"])
        rows.append(row)
        print(f"factor m={m}: host factor {row['host_factor_s']:.2f} s, preconditioner "
              f"{row['host_preconditioner_s']:.2f} s, iteration {row['host_iteration_s']:.3f} s;"
              f" device {row['device_factor_s']:.2f} / {row['device_preconditioner_s']:.2f} / "
              f"{row['device_iteration_s']:.3f} s")
        if on_row is not None:
            on_row(rows)
    return rows


#: PCG's λ and iteration cap (the issue's n = 10⁶, m = 2·10⁴ fits at tol 1e-3 and 1e-6).
PCG_LAM = 1e-6
PCG_MAX_ITER = 200


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


def pcg_fit(X, y, Xt, yt, m: int, tol: float, *, device: str, backend: str = "numpy",
            **options) -> dict:
    """One ``SketchedKRR(solver="pcg")`` fit (``store=None``): its wall time, iterations,
    kernel passes and test RMSE."""
    import distsketch as ds

    opts = ds.EngineOptions(device=device, backend=backend, **options)
    model = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(m), lam=PCG_LAM,
                           solver="pcg", tol=tol, max_iter=PCG_MAX_ITER, random_state=0,
                           options=opts)
    t = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - t
    pred = np.asarray(model.predict(Xt), dtype=np.float64)
    return {"fit_s": seconds, "iterations": int(model.n_iter_), "passes": int(model.n_passes_),
            "rmse": float(np.sqrt(np.mean((pred - yt) ** 2)))}


def decode_seconds(q: int, c: int, r: int, k: int, backend: str, candidate_rows: int) -> float:
    """Wall time of ``decode_fixed`` over precomputed candidate features (scores + top-k)."""
    from distsketch.decoding.preimage import decode_fixed
    from distsketch.engine.features import FeatureMap

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



def record_or_print(name: str, markdown: str, data: dict, args, *, gpu: bool) -> None:
    """Record section ``name`` (a GPU run without ``--quick`` or ``--no-record``), else say
    that nothing was recorded."""
    if gpu and not args.quick and not args.no_record:
        _common.record(name, markdown, data, args=args)
    else:
        print(f"({name}: --quick / no GPU / --no-record: nothing recorded)")


def run_sparse(args, out: dict, device_be, seconds, label: str) -> None:
    """The sparse-rows crossover into ``out`` (``sparse_rows``, ``sparse_crossover``)."""
    densities = [float(v) for v in args.densities.split(",")]
    shapes, n_land = SPARSE_SHAPES, SPARSE_LANDMARKS
    if args.quick:
        shapes, n_land, densities = [(512, 300)], 256, [0.01, 0.05, 0.2]
    out["setup"]["sparse_landmarks"] = n_land
    rows = sparse_crossover(device_be, shapes, densities, n_land,
                            lambda f: seconds(f, 1 if args.quick else args.repeats),
                            on_row=lambda rows: write_json(args.json, {**out, "sparse_rows": rows}))
    _, cross = sparse_table(rows)
    print(f"sparse rows on the device ({label}): crossover density per (b x d), sparse×sparse "
          f"/ SpMM against dense: "
          + ", ".join(f"{k} {v['sparse']} / {v['spmm']}" for k, v in cross.items()))
    out.update(sparse_rows=rows, sparse_crossover=cross)
    write_json(args.json, out)


def run_factor(args, out: dict, device_be, label: str) -> None:
    """:func:`factor_compare` into ``out`` (``factor``, ``device_wins_from``)."""
    ms = [300, 600] if args.quick else [int(v) for v in args.factor_ms.split(",")]
    rows = factor_compare(device_be, ms, out["setup"]["repeats"],
                          on_row=lambda rows: write_json(args.json, {**out, "factor": rows}))
    wins = [r["m"] for r in rows if r["device_wins"]]
    out.update(factor=rows, device_wins_from=min(wins) if wins else None)
    write_json(args.json, out)
    print(f"factor ({label}): the device wins (factor + preconditioner, and the iteration) at "
          f"m = {wins or 'none measured'}; DEVICE_FACTOR_MIN_M is "
          f"{out['setup']['device_factor_min_m']}")


def run_pass(args, out: dict, gpu: dict, label: str, ns, ms) -> None:
    """The pass and whole fit, GPU against the CPU path, into ``out["pass"]``."""
    import dask

    roof = out["roofline"]
    times = _common.watch_pass()
    results = out["pass"] = []
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
            write_json(args.json, out)
            frac = (f"{res['fraction_of_roofline']:.0%} of roofline "
                    f"({'PASS' if res['fraction_of_roofline'] >= TARGET_ROOF else 'FAIL'})"
                    if roof else "no roofline (no GPU)")
            speed = (f"speed-up {res['speedup_pass']:.1f}× "
                     f"({'PASS' if res['speedup_pass'] >= TARGET_SPEEDUP else 'FAIL'})"
                     if roof else "no speed-up figure (no GPU)")
            print(f"n={n} m={m}: {label} pass {g_pass:.2f} s, fit {g_fit:.2f} s; CPU pass "
                  f"{c_pass:.2f} s, fit {c_fit:.2f} s; {speed}; {frac}")


def run_decode(args, out: dict, gpu: dict, label: str, q: int, c: int, r: int) -> None:
    """Decoding on the device against the CPU path, into ``out["decode"]``."""
    import dask

    with dask.config.set(scheduler="threads", num_workers=args.gpu_threads):
        g_dec = decode_seconds(q, c, r, 10, "cuda" if gpu["device"] == "cuda"
                               else gpu["backend"], 16384)
    with dask.config.set(scheduler="threads", num_workers=None):
        c_dec = decode_seconds(q, c, r, 10, "numpy", 16384)
    dec = {"queries": q, "candidates": c, "r": r, "k": 10, "gpu_s": g_dec, "cpu_s": c_dec}
    line = f"decoding {q} × {c:,} (r = {r}, k = 10): {label} {g_dec:.2f} s, CPU {c_dec:.2f} s"
    if out["roofline"]:
        dec["fraction_of_gemm_f32"] = 2.0 * q * c * r / g_dec / out["roofline"]["gemm_f32"]
        ok = "PASS" if dec["fraction_of_gemm_f32"] >= TARGET_DECODE else "FAIL"
        line += f"; {dec['fraction_of_gemm_f32']:.0%} of the float32 GEMM rate ({ok})"
    print(line)
    out["decode"] = dec
    write_json(args.json, out)


def run_pcg(args, out: dict, gpu: dict, label: str) -> None:
    """PCG fits on the device (and, for ``--pcg-cpu-tols``, the CPU path), into
    ``out["pcg"]``."""
    import dask

    pcg_n, pcg_m = (20_000, 300) if args.quick else (args.pcg_n, args.pcg_m)
    X, y = data(pcg_n)
    Xt, yt = data(20_000, seed=1)
    pcg = out["pcg"] = []
    cpu_tols = [float(v) for v in args.pcg_cpu_tols.split(",") if v]
    for tol in [float(v) for v in args.pcg_tols.split(",") if v]:
        with dask.config.set(scheduler="threads", num_workers=args.gpu_threads):
            row = {"n": pcg_n, "m": pcg_m, "tol": tol,
                   "gpu": pcg_fit(X, y, Xt, yt, pcg_m, tol, **gpu)}
        if tol in cpu_tols:
            with dask.config.set(scheduler="threads", num_workers=None):
                row["cpu"] = pcg_fit(X, y, Xt, yt, pcg_m, tol, device="cpu")
            row["rmse_rel_diff"] = abs(row["gpu"]["rmse"] - row["cpu"]["rmse"]) / row["cpu"]["rmse"]
        pcg.append(row)
        write_json(args.json, out)
        print(f"PCG n={pcg_n} m={pcg_m} tol={tol:g}: {label} {row['gpu']['fit_s']:.1f} s, "
              f"{row['gpu']['iterations']} it., RMSE {row['gpu']['rmse']:.6f}"
              + (f"; CPU {row['cpu']['fit_s']:.1f} s, RMSE {row['cpu']['rmse']:.6f}"
                 if "cpu" in row else ""))


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 20 000, m = 200, 50 × 20 000 decoding, one sparse "
                        "shape", repeats=5,
                        repeats_help="timed repetitions of each sparse-rows block fill and of "
                                     "the preconditioner's iteration (median)")
    ap.add_argument("--n", default="1000000,10000000", help="training rows, comma-separated")
    ap.add_argument("--m", default="1000,4000", help="sketch sizes, comma-separated")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=2_000_000)
    ap.add_argument("--r", type=int, default=256, help="candidate feature width")
    ap.add_argument("--gpu-block-memory", type=int, default=2**30,
                    help="EngineOptions.block_memory of the GPU fits (bytes)")
    ap.add_argument("--gpu-threads", type=int, default=2,
                    help="threads of the scheduler feeding the one GPU")
    ap.add_argument("--parts", default="sparse," + ",".join(GPU_PARTS),
                    help="what to measure, comma-separated from sparse (section gpu_sparse), "
                         "factor (gpu_factor), pass, decode, pcg (together section gpu; a "
                         "part's JSON is recorded with the others' by --record-json)")
    ap.add_argument("--sparse-only", action="store_true", help="the same as --parts sparse")
    ap.add_argument("--factor-only", action="store_true", help="the same as --parts factor")
    ap.add_argument("--factor-ms", default="10000,20000",
                    help="landmarks of the preconditioner comparison, comma-separated")
    ap.add_argument("--densities", default=SPARSE_DENSITIES,
                    help="densities of the sparse-rows crossover, comma-separated")
    ap.add_argument("--pcg-n", type=int, default=1_000_000, help="PCG's training rows")
    ap.add_argument("--pcg-m", type=int, default=20_000, help="PCG's landmarks")
    ap.add_argument("--pcg-tols", default="1e-3,1e-6", help="PCG tolerances, comma-separated")
    ap.add_argument("--pcg-cpu-tols", default="1e-3",
                    help="the tolerances also fitted on the CPU path (comma-separated; '' none)")
    ap.add_argument("--json", metavar="PATH",
                    help="also write the figures as JSON to PATH (partial ones while running)")
    ap.add_argument("--record-json", nargs="+", metavar="FILE",
                    help="measure nothing: record the sections made by these JSON files, written "
                         "by --json on a GPU machine (benchmarks/gpu_check.sh's output)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.record_json:
        record_json(args.record_json, args)
        return
    parts = ({"sparse"} if args.sparse_only else {"factor"} if args.factor_only
             else {p.strip() for p in args.parts.split(",") if p.strip()})
    unknown = parts - {"sparse", "factor", *GPU_PARTS}
    if unknown or not parts:
        ap.error(f"--parts: unknown {sorted(unknown)}; choose from sparse, factor, "
                 f"{', '.join(GPU_PARTS)}")
    from distsketch.backends.base import register_backend

    why = gpu_status()
    if why is not None and not args.quick:
        print(f"bench_gpu: {why}: nothing measured, nothing written. Run it on a machine with "
              f"a CUDA GPU and 'pip install \"distsketch[gpu]\"', or use --quick to check the "
              f"script on the CPU.")
        raise SystemExit(2)
    if why is None:
        from distsketch.backends.base import get_backend

        gpu = {"device": "cuda", "backend": "numpy"}
        label, machine = "GPU", gpu_description()
        device_be, seconds = get_backend("cuda"), _device_seconds
        roof = gpu_roofline() if parts & set(GPU_PARTS) else None
    else:
        from distsketch.backends.cuda import CupyBackend
        from distsketch.testing.devices import HostModules

        device_be = register_backend(CupyBackend(HostModules(), name="cuda-emulated"))
        gpu = {"device": "cpu", "backend": "cuda-emulated"}
        label, machine, roof = "emulated CUDA backend on numpy (NOT a GPU)", why, None
        seconds = _host_seconds
    print(f"device path: {label} — {machine}")
    if roof:
        print("roofline: " + ", ".join(f"{k} {v / 1e12:.1f} T/s" if k.startswith("gemm")
                                       else f"{k} {v / 1e9:.0f} G/s" for k, v in roof.items()))
    import distsketch.backends.cuda as dcuda

    out = {"command": _common.command_line(),
           "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "machine": _common.machine(), "quick": args.quick, "parts": sorted(parts),
           "sparse_only": parts == {"sparse"}, "factor_only": parts == {"factor"},
           "device_path": label, "machine_gpu": machine, "emulated": why is not None,
           "roofline": roof, "complete": False,
           "setup": {"d": D, "gamma": GAMMA, "pcg_lam": PCG_LAM,
                     "repeats": 1 if args.quick else args.repeats,
                     "device_sparse_max_density": dcuda.DEVICE_SPARSE_MAX_DENSITY,
                     "device_factor_min_m": dcuda.DEVICE_FACTOR_MIN_M}}
    if parts == {"sparse"}:
        out["device_sparse_max_density"] = dcuda.DEVICE_SPARSE_MAX_DENSITY
    if parts == {"factor"}:
        out["device_factor_min_m"] = dcuda.DEVICE_FACTOR_MIN_M
    write_json(args.json, out)
    if args.quick:
        ns, ms, q, c, r = [20_000], [200], 50, 20_000, 32
    else:
        ns, ms = [int(v) for v in args.n.split(",")], [int(v) for v in args.m.split(",")]
        q, c, r = args.queries, args.candidates, args.r
    if "sparse" in parts:
        run_sparse(args, out, device_be, seconds, label)
    if "factor" in parts:
        run_factor(args, out, device_be, label)
    if "pass" in parts:
        run_pass(args, out, gpu, label, ns, ms)
    if "decode" in parts:
        run_decode(args, out, gpu, label, q, c, r)
    if "pcg" in parts:
        run_pcg(args, out, gpu, label)
    out["complete"] = True
    write_json(args.json, out)
    on_gpu = why is None
    if "sparse" in parts:
        record_or_print("gpu_sparse", sparse_markdown(out),
                        {"machine_gpu": machine, "rows": out["sparse_rows"],
                         "crossover": out["sparse_crossover"]}, args, gpu=on_gpu)
    if "factor" in parts:
        record_or_print("gpu_factor", factor_markdown(out),
                        {"machine_gpu": machine, "rows": out["factor"]}, args, gpu=on_gpu)
    if parts & set(GPU_PARTS):
        print({k: out.get(k) for k in GPU_PARTS})
        if parts >= set(GPU_PARTS) and on_gpu:
            record_or_print("gpu", gpu_markdown(out),
                            {"machine_gpu": machine, "roofline": roof,
                             **{k: out[k] for k in GPU_PARTS}}, args, gpu=on_gpu)
        else:
            print("(gpu: --quick / no GPU / only some of its parts: nothing recorded; "
                  "--record-json records parts measured apart)")


if __name__ == "__main__":
    main()
