"""The GPU benchmark's sections, rendered from bench_gpu.py's JSON payloads: RESULTS.md ``gpu``
(the pass, fits, decoding and PCG against the roofline and the CPU path), ENGINE.md
``gpu_sparse`` (the device's sparse-rows crossover) and ``gpu_factor`` (PCG's preconditioner,
host against device).

The same renderers serve a run that records where it measured, and
``python benchmarks/bench_gpu.py --record-json FILE...``, which records here the JSON that a
borrowed GPU machine wrote (benchmarks/gpu_check.sh brings back only its output folder). Each
section then names that machine, its date and its command, not this one's. A ``gpu`` section
may be put together from several files: the parts ``pass``, ``decode`` and ``pcg`` can each be
run as a separate command within the device's per-command limit. The latest file with a part
wins, and the roofline comes from the file whose pass is used.
"""

from __future__ import annotations

import json
from pathlib import Path

import _common

#: The parts of section ``gpu`` (``bench_gpu.py --parts``) and the one of ``gpu_sparse``.
GPU_PARTS = ("pass", "decode", "pcg")
TARGET_ROOF, TARGET_SPEEDUP, TARGET_DECODE = 0.60, 20.0, 0.50


def crossover(densities: list[float], sparse_s: list[float], dense_s: list[float]) -> str:
    """The density where the sparse route's time meets the dense route's (linear
    interpolation between grid points), as text: ``"< lo"`` / ``"> hi"`` off the grid."""
    diff = [s - d for s, d in zip(sparse_s, dense_s)]
    if diff[0] >= 0:
        return f"< {densities[0]:g}"
    for i in range(1, len(diff)):
        if diff[i] >= 0:
            lo, hi = densities[i - 1], densities[i]
            return f"{lo + (hi - lo) * -diff[i - 1] / (diff[i] - diff[i - 1]):.4f}"
    return f"> {densities[-1]:g}"


def sparse_table(rows: list[dict]) -> tuple[str, dict]:
    """The crossover table (markdown) and the per-shape crossover densities of the sparse and
    the SpMM routes against the dense one."""
    lines = ["| b | d | density | nnz | sparse×sparse (s) | sparse×dense SpMM (s) | dense (s) "
             "| sparse / dense | SpMM / dense |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cross = {}
    for b, d in dict.fromkeys((r["b"], r["d"]) for r in rows):
        sub = [r for r in rows if (r["b"], r["d"]) == (b, d)]
        for r in sub:
            lines.append(f"| {b} | {d} | {r['density']:g} | {r['nnz']} | {r['sparse_s']:.4f} | "
                         f"{r['spmm_s']:.4f} | {r['dense_s']:.4f} | "
                         f"{r['sparse_s'] / r['dense_s']:.2f} | {r['spmm_s'] / r['dense_s']:.2f} |")
        rho, dense_s = [r["density"] for r in sub], [r["dense_s"] for r in sub]
        cross[f"{b}x{d}"] = {route: crossover(rho, [r[f"{route}_s"] for r in sub], dense_s)
                             for route in ("sparse", "spmm")}
    return "\n".join(lines), cross


def sparse_markdown(p: dict) -> str:
    """Section ``gpu_sparse`` of payload ``p``."""
    table, cross = sparse_table(p["sparse_rows"])
    s = p["setup"]
    n_land = s["sparse_landmarks"]
    return f"""GPU: {p['machine_gpu']}. Gaussian `Kernel.fill` into a float64
(b, {n_land}) device array from device CSR rows and {n_land} CSR landmarks of the same
density (values in [0.5, 2)); `sparse` route: kept as cupyx CSR (device threshold 1);
`dense` route: densified on the device (threshold 0), then the dense GEMM route; median of
{s['repeats']} after a warm-up. `sparse×dense SpMM`: the same CSR rows against the
landmarks as a dense device array (the route the host takes with dense landmark panels; the
device's kernels do not take it today). Crossover density per shape (b × d), sparse×sparse /
SpMM against dense: """ + ", ".join(f"{k}: {v['sparse']} / {v['spmm']}"
                                    for k, v in cross.items()) + f""".
`distsketch.backends.cuda.DEVICE_SPARSE_MAX_DENSITY` was {s['device_sparse_max_density']}
during this run (set it to the smallest sparse×sparse crossover; if SpMM wins by far,
densify the landmarks' operand on the device instead).

""" + table + "\n"


def factor_markdown(p: dict) -> str:
    """Section ``gpu_factor`` of payload ``p``."""
    rows, s = p["factor"], p["setup"]
    wins = [r["m"] for r in rows if r["device_wins"]]
    table = "\n".join(
        f"| {r['m']:,} | {r['host_factor_s']:.2f} | {r['device_factor_s']:.2f} | "
        f"{r['host_preconditioner_s']:.2f} | {r['device_preconditioner_s']:.2f} | "
        f"{r['host_iteration_s']:.4f} | {r['device_iteration_s']:.4f} |" for r in rows)
    return f"""GPU: {p['machine_gpu']}. Host: {p['machine']['cores']} cores
(`driver_threads`). PCG's driver work for m Gaussian landmarks (d = {s['d']}): `factor_kmm` (the
device's including the copy of `K_mm` over the bus), one λ's preconditioner, and one
iteration's `Pᵀ`, `P` and `K_mm` products on one column (median of {s['repeats']}); seconds.
`DEVICE_FACTOR_MIN_M` was {s['device_factor_min_m']} during this run; the device won both
at m = {wins or 'none measured'}.

| m | host factor | device factor | host preconditioner | device preconditioner | host iteration | device iteration |
|---:|---:|---:|---:|---:|---:|---:|
""" + table + "\n"


def gpu_markdown(p: dict) -> str:
    """Section ``gpu`` of payload ``p`` (its ``pass``, ``decode`` and ``pcg``)."""
    roof, s = p["roofline"], p["setup"]
    rows = "\n".join(
        f"| {r['n']:,} | {r['m']} | {r['gpu_pass_s']:.2f} | {r['gpu_fit_s']:.2f} | "
        f"{r['cpu_pass_s']:.2f} | {r['cpu_fit_s']:.2f} | {r['speedup_pass']:.1f}× | "
        f"{r['fraction_of_roofline']:.0%} |" for r in p["pass"])
    dec = p["decode"]
    pcg = "\n".join(
        f"| {r['n']:,} | {r['m']:,} | {r['tol']:g} | {r['gpu']['fit_s']:.1f} | "
        f"{r['gpu']['iterations']} | {r['gpu']['rmse']:.6f} | "
        + (f"{r['cpu']['fit_s']:.1f} | {r['cpu']['rmse']:.6f} |" if "cpu" in r else "– | – |")
        for r in p["pcg"])
    return f"""GPU: {p['machine_gpu']}. CPU path: {p['machine']['cores']} cores, threaded scheduler.
Roofline (measured in the run): float64 GEMM {roof['gemm_f64'] / 1e12:.1f} TFLOP/s, float32
GEMM {roof['gemm_f32'] / 1e12:.1f} TFLOP/s, float32 exp {roof['exp_f64_to_f32'] / 1e9:.0f} G/s.
`SketchedKRR(Gaussian, SubSampling(m))`, d = {s['d']}, `store=None`, float32 blocks; times in s.

| n | m | GPU pass | GPU fit | CPU pass | CPU fit | pass speed-up (target ≥ {TARGET_SPEEDUP:g}×) | GPU pass / roofline (target ≥ {TARGET_ROOF:.0%}) |
|---|---|---|---|---|---|---|---|
{rows}

Decoding {dec['queries']} queries × {dec['candidates']:,} candidates (r = {dec['r']}, k =
{dec['k']}, precomputed features): GPU {dec['gpu_s']:.2f} s =
{dec['fraction_of_gemm_f32']:.0%} of the float32 GEMM rate (target ≥ {TARGET_DECODE:.0%}), CPU
{dec['cpu_s']:.2f} s.

`SketchedKRR(solver="pcg")`, λ = {s['pcg_lam']:g}, Gaussian γ = {s['gamma']:g}, float32
blocks, 20 000 test rows (the kernel blocks and both products of each iteration on the GPU;
the preconditioner on the driver's GPU from `DEVICE_FACTOR_MIN_M` =
{s['device_factor_min_m']} landmarks on, else on the host; the iterates on the host):

| n | m | tol | GPU fit (s) | iterations | GPU test RMSE | CPU fit (s) | CPU test RMSE |
|---|---|---|---|---|---|---|---|
{pcg}
"""


def measured(p: dict) -> dict:
    """What :func:`_common.record` takes of a payload measured elsewhere."""
    return {k: p[k] for k in ("date", "machine", "command")}


def sections(payloads: list[dict]) -> tuple[dict, list[str]]:
    """The sections the payloads (oldest first) make:
    ``{name: (markdown, data, measured)}``, and what could not be made, as sentences."""
    out, missing = {}, []
    for p in payloads:
        if p.get("factor"):
            out["gpu_factor"] = (factor_markdown(p), {"machine_gpu": p["machine_gpu"],
                                                      "rows": p["factor"]}, measured(p))
        if p.get("sparse_rows"):
            _, cross = sparse_table(p["sparse_rows"])
            out["gpu_sparse"] = (sparse_markdown(p), {"machine_gpu": p["machine_gpu"],
                                                      "rows": p["sparse_rows"],
                                                      "crossover": cross}, measured(p))
    parts = {}
    for p in payloads:
        for part in GPU_PARTS:
            if p.get(part):
                parts[part] = p
    if parts:
        absent = [part for part in GPU_PARTS if part not in parts]
        if absent:
            missing.append(f"section gpu needs the parts {', '.join(GPU_PARTS)}; none of the "
                           f"files has {', '.join(absent)} (run bench_gpu.py --parts "
                           f"{','.join(absent)} on the GPU machine)")
        else:
            base = parts["pass"]
            p = {**base, **{part: parts[part][part] for part in GPU_PARTS}}
            data = {"machine_gpu": p["machine_gpu"], "roofline": p["roofline"],
                    **{part: p[part] for part in GPU_PARTS},
                    "parts_from": {part: parts[part]["command"] for part in GPU_PARTS}}
            out["gpu"] = (gpu_markdown(p), data, measured(base))
    return out, missing


def load_measured(path: str) -> dict:
    """A payload written by bench_gpu.py on a GPU (refusing an emulated, ``--quick`` or
    unfinished run's, naming the file)."""
    try:
        p = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"bench_gpu --record-json: cannot read {path}: {exc}") from None
    why = ("its device path was emulated (no GPU)" if p.get("emulated") else
           "it is a --quick run" if p.get("quick") else
           "the run did not finish (complete: false)" if not p.get("complete") else
           "it predates the machine and date fields" if not all(
               k in p for k in ("date", "machine", "setup")) else None)
    if why:
        raise SystemExit(f"bench_gpu --record-json: {path} is not a measurement to record: {why}")
    return p


def record_json(paths: list[str], args) -> list[str]:
    """Record the sections the files make (:func:`sections`); returns the names written."""
    made, missing = sections([load_measured(path) for path in paths])
    for line in missing:
        print(f"bench_gpu --record-json: {line}")
    if not made:
        raise SystemExit("bench_gpu --record-json: the files make no section")
    for name, (markdown, data, where) in made.items():
        _common.record(name, markdown, data, args=args, measured=where)
    return sorted(made)
