"""Sparse input blocks: when is a kernel block cheaper from the CSR rows than from dense ones?

Measures the crossover density behind ``distsketch.Tuning.sparse_max_density`` and the
Bibtex kernel blocks of the pass and of prediction.

(a) Synthetic grid, the block shapes of a pass: rows ``b`` ∈ {1 000, 4 000}, features
    ``d`` ∈ {1 000, 2 000}, ``n_b = 2 000`` landmarks; binary rows of uniform random density
    ρ, columns scaled by random factors in [0.5, 2] (as rows scaled by 1/std). For each shape,
    the time of one Gaussian kernel block ``Kernel.fill`` into a float64 ``(b, n_b)`` array
    (one BLAS thread, as in the pass; least CPU time of the calling thread over ``--repeats``,
    robust to other processes sharing the cores) along three routes:

    - ``dense``: dense rows and landmarks (the GEMM route of the library's dense blocks);
    - ``sparse×dense``: CSR rows times dense transposed panels of the landmarks, 4 MiB each
      (the library's sparse route, ``Tuning.sparse_panel_bytes``);
    - ``one panel``: the same with all landmarks in one dense panel (``sparse_panel_bytes``
      huge), what panels save;
    - ``sparse×sparse``: CSR rows and CSR landmarks (``sparse_panel_bytes = 0``).

    The sparse routes run with the density rule off (``Tuning(sparse_max_density=1)``, through
    ``distsketch.kernels.tuned``). Per shape, the crossover density is where the
    ``sparse×dense`` time meets the ``dense`` time (linear interpolation between the grid
    densities); the smallest one over the shapes is the default to write into
    ``Tuning.sparse_max_density`` (below it the sparse route wins on every shape measured). Rates: ``2·b·d·n_b`` flops / time for dense, ``2·nnz·n_b`` for sparse.
(b) Bibtex (``bibtex/`` of the data folder, ``_common.bibtex_dir``; skipped when absent):
    Gaussian γ = 1/(2·10⁴) blocks ``K(X, X_J)`` with ``X_J`` = 2 250 training rows drawn with
    seed 0, ``K(X_test, X_J)`` and ``K(X, X)``, from the sparse rows scaled by 1/std (the
    library's default rule) against the dense standardised rows ``(X − mean)/std``; the same
    kernel values (the mean cancels in ``x − x'``), max |difference| reported.

Writes the ``sparse_blocks`` section of ENGINE.md and results/sparse_blocks.jsonl (not with
``--quick`` or ``--no-record``).

    python benchmarks/bench_sparse_blocks.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

SHAPES = [(1000, 1000), (1000, 2000), (4000, 1000), (4000, 2000)]
DENSITIES = [0.01, 0.02, 0.04, 0.08, 0.12, 0.16, 0.24]
N_LANDMARKS = 2000
PANEL_BYTES = 4 << 20  # distsketch.Tuning.sparse_panel_bytes, the library's default
GAMMA_BIBTEX = 1.0 / (2.0 * 1e4)


def best_time(f, repeats: int) -> float:
    """Least CPU time of the calling thread over ``repeats`` calls (seconds). With one BLAS
    thread every operation runs in this thread, and CPU time, unlike wall time, does not grow
    when other processes share the cores (what is left: their cache and memory traffic)."""
    out = []
    for _ in range(repeats):
        t = time.thread_time()
        f()
        out.append(time.thread_time() - t)
    return min(out)


def sparse_rows(rng, n: int, d: int, density: float, col_scale: np.ndarray) -> sp.csr_array:
    """Binary rows of uniform density, columns scaled by ``col_scale``."""
    M = sp.random_array((n, d), density=density, rng=rng, format="csr",
                        data_sampler=lambda size: np.ones(size))
    M.sort_indices()
    return sp.csr_array((M.data * col_scale[M.indices], M.indices, M.indptr), shape=M.shape)


def crossover(densities, t_sparse, t_dense) -> float | None:
    """Density where the sparse time meets the dense one (linear interpolation), or None
    when the sparse route is faster (or slower) at every measured density."""
    for (r0, a), (r1, b) in zip(zip(densities, t_sparse), zip(densities[1:], t_sparse[1:])):
        if a <= t_dense < b:
            return r0 + (t_dense - a) * (r1 - r0) / (b - a)
    return None


def dense_time(kernel, A, L, out, repeats: int) -> float:
    return best_time(lambda: kernel.fill(A, L, out), repeats)


def grid(repeats: int, shapes, densities) -> dict:
    from distsketch.kernels import sparse as kernels
    from distsketch.kernels.families import Gaussian

    kernel = Gaussian(gamma=1e-3)
    rng = np.random.default_rng(0)
    rows = []
    crossovers = {}
    for b, d in shapes:
        scale = rng.uniform(0.5, 2.0, d)
        out = np.empty((b, N_LANDMARKS))
        t_dense = dense_time(kernel, rng.standard_normal((b, d)), rng.standard_normal((N_LANDMARKS, d)),
                             out, repeats)
        gflops_dense = 2e-9 * b * d * N_LANDMARKS / t_dense
        t_sd = []
        for rho in densities:
            A = sparse_rows(rng, b, d, rho, scale)
            L = sparse_rows(rng, N_LANDMARKS, d, rho, scale)
            with _knobs(kernels, max_density=1.0, panel_bytes=PANEL_BYTES):
                t1 = best_time(lambda: kernel.fill(A, L, out), repeats)
            with _knobs(kernels, max_density=1.0, panel_bytes=1 << 40):
                t_one = best_time(lambda: kernel.fill(A, L, out), repeats)
            with _knobs(kernels, max_density=1.0, panel_bytes=0):
                t2 = best_time(lambda: kernel.fill(A, L, out), repeats)
            t_sd.append(t1)
            row = {"b": b, "d": d, "n_b": N_LANDMARKS, "density": rho, "nnz": int(A.nnz),
                   "dense_s": t_dense, "sparse_dense_s": t1, "one_panel_s": t_one, "sparse_sparse_s": t2,
                   "dense_gflops": gflops_dense, "sparse_dense_gflops": 2e-9 * A.nnz * N_LANDMARKS / t1}
            rows.append(row)
            print(f"b={b} d={d} ρ={rho:.2f}: dense {t_dense:.3f} s ({gflops_dense:.1f} GFLOP/s), "
                  f"sparse×dense {t1:.3f} s ({row['sparse_dense_gflops']:.2f} GFLOP/s), one panel "
                  f"{t_one:.3f} s, sparse×sparse {t2:.3f} s", flush=True)
            if min(t1, t2) > 1.5 * t_dense:
                break  # well past the crossover
        crossovers[f"{b}x{d}"] = crossover(densities[:len(t_sd)], t_sd, t_dense)
    found = [c for c in crossovers.values() if c is not None]
    return {"rows": rows, "crossovers": crossovers, "threshold": min(found) if found else None}


def _knobs(kernels, *, max_density: float, panel_bytes: int):
    """The density rule's knobs for a ``with`` block (``kernels.tuned``)."""
    from distsketch import Tuning

    return kernels.tuned(Tuning(sparse_max_density=max_density, sparse_panel_bytes=panel_bytes))


def bibtex(repeats: int, with_full: bool) -> dict | None:
    import distsketch as ds
    from distsketch.io.arff import load_arff
    from distsketch.kernels import sparse as kernels

    folder = _common.bibtex_dir()
    if not (folder / "bibtex-train.arff").exists():
        print(f"skipped (b): Bibtex data not found in {folder}")
        return None
    Xtr, _ = load_arff(folder / "bibtex-train.arff", n_targets=159)
    Xte, _ = load_arff(folder / "bibtex-test.arff", n_targets=159)
    Xtr, Xte = sp.csr_array(Xtr), sp.csr_array(Xte)
    dense_tr = Xtr.toarray()
    mean, std = dense_tr.mean(axis=0), dense_tr.std(axis=0)
    std[std == 0] = 1.0
    Dtr, Dte = (dense_tr - mean) / std, (Xte.toarray() - mean) / std
    Str, Ste = Xtr @ sp.diags_array(1.0 / std), Xte @ sp.diags_array(1.0 / std)
    Str, Ste = sp.csr_array(Str), sp.csr_array(Ste)
    J = np.sort(np.random.default_rng(0).choice(Xtr.shape[0], 2250, replace=False))
    kernel = ds.Gaussian(gamma=GAMMA_BIBTEX)
    cases = [("K(X, X_J)", (Str, Str[J]), (Dtr, Dtr[J])),
             ("K(X_test, X_J)", (Ste, Str[J]), (Dte, Dtr[J]))]
    if with_full:
        cases.append(("K(X, X)", (Str, Str), (Dtr, Dtr)))
    res = {"n_train": Xtr.shape[0], "n_test": Xte.shape[0], "d": Xtr.shape[1],
           "density_train": Xtr.nnz / np.prod(Xtr.shape), "density_test": Xte.nnz / np.prod(Xte.shape),
           "blocks": []}
    for name, (sa, sb), (da, db) in cases:
        if name == "K(X, X)":
            sb, db = sa, da  # the same object: A is B
        with _knobs(kernels, max_density=1.0, panel_bytes=PANEL_BYTES):
            t_sd = best_time(lambda: kernel(sa, sb), repeats)
            diff = float(np.abs(kernel(sa, sb) - kernel(da, db)).max())
        with _knobs(kernels, max_density=1.0, panel_bytes=0):
            t_ss = best_time(lambda: kernel(sa, sb), repeats)
        t_default = best_time(lambda: kernel(sa, sb), repeats)
        t_dense = best_time(lambda: kernel(da, db), repeats)
        res["blocks"].append({"block": name, "shape": [sa.shape[0], sb.shape[0]], "sparse_dense_s": t_sd,
                              "sparse_sparse_s": t_ss, "default_rule_s": t_default, "dense_s": t_dense,
                              "max_abs_diff": diff})
        print(f"Bibtex {name} {sa.shape[0]}×{sb.shape[0]}: sparse×dense {t_sd:.3f} s, sparse×sparse "
              f"{t_ss:.3f} s, default rule {t_default:.3f} s, dense standardised rows {t_dense:.3f} s; "
              f"max |ΔK| {diff:.1e}", flush=True)
    return res


def main() -> None:
    from threadpoolctl import threadpool_limits

    ap = _common.parser(__doc__, quick="one small shape, three densities, one run each, no "
                        "K(X, X)", repeats=3, repeats_help="least CPU time of this many runs")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 1
    shapes, densities = (SHAPES, DENSITIES) if not args.quick else ([(1000, 1000)], [0.02, 0.08, 0.16])
    t0 = time.perf_counter()
    load_start = _common.load_average()
    gemm = _common.gemm_gflops()
    with threadpool_limits(1, "blas"):
        g = grid(args.repeats, shapes, densities)
        bib = bibtex(args.repeats, with_full=not args.quick)
    total = time.perf_counter() - t0
    load_end = _common.load_average()
    print(f"crossover densities: {g['crossovers']}; threshold (smallest) {g['threshold']}")
    print(f"total {total:.0f} s; load average {load_start:.1f} → {load_end:.1f}")

    def fmt_cross(c):
        return "none in the grid" if c is None else f"{100 * c:.1f} %"

    lines = ["| b | d | density | nnz | dense (s) | sparse×dense (s) | one panel (s) | sparse×sparse (s) | "
             "dense GFLOP/s | sparse×dense GFLOP/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in g["rows"]:
        lines.append(f"| {r['b']} | {r['d']} | {100 * r['density']:.0f} % | {r['nnz']} | {r['dense_s']:.3f} | "
                     f"{r['sparse_dense_s']:.3f} | {r['one_panel_s']:.3f} | {r['sparse_sparse_s']:.3f} | "
                     f"{r['dense_gflops']:.1f} | {r['sparse_dense_gflops']:.2f} |")
    cross = "; ".join(f"{k}: {fmt_cross(v)}" for k, v in g["crossovers"].items())
    md = (
        "Gaussian kernel block `Kernel.fill` into a float64 (b, 2 000) array, one BLAS thread "
        f"(as in the pass), least CPU time of the calling thread over {args.repeats} runs (not wall "
        "time: the machine is shared, and a thread's CPU time does not grow with the load, though "
        "other processes' cache and memory traffic still moves it by up to about 40 %); binary rows "
        "of uniform density, columns scaled (as rows scaled by 1/std). `dense`: dense rows and "
        "landmarks (GEMM route); `sparse×dense`: CSR rows times dense transposed 4 MiB panels of the "
        "landmarks (the library's sparse route); `one panel`: the same, all landmarks in one panel; "
        "`sparse×sparse`: CSR rows and landmarks. A shape's densities stop once the sparse×dense and sparse×sparse times both exceed 1.5× the dense time. "
        f"numpy GEMM (all cores) {gemm:.1f} GFLOP/s in the same run; total {total:.0f} s, 1-minute "
        f"load average {load_start:.1f} → {load_end:.1f}.\n\n" + "\n".join(lines) +
        f"\n\nCrossover density (sparse×dense = dense) per b×d: {cross}. Smallest: "
        f"{fmt_cross(g['threshold'])} → `distsketch.Tuning.sparse_max_density`.\n"
    )
    if bib:
        md += (f"\nBibtex ({bib['n_train']} train / {bib['n_test']} test rows, d = {bib['d']}, density "
               f"{100 * bib['density_train']:.2f} % / {100 * bib['density_test']:.2f} %), Gaussian γ = 1/(2·10⁴), "
               "`kernel(A, B)` one BLAS thread, least thread CPU time of the repeats: sparse rows scaled by 1/std "
               "(CSR × dense landmarks, CSR × CSR, and the library's default rule) against dense "
               "standardised rows (the mean cancels in x − x'; max abs ΔK: CSR × dense against dense). "
               "X_J = 2 250 training rows, seed 0.\n\n"
               "| block | shape | CSR × dense (s) | CSR × CSR (s) | default rule (s) | dense rows (s) | "
               "dense / default | max abs ΔK |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|\n" +
               "\n".join(f"| {b['block']} | {b['shape'][0]} × {b['shape'][1]} | {b['sparse_dense_s']:.3f} | "
                         f"{b['sparse_sparse_s']:.3f} | {b['default_rule_s']:.3f} | {b['dense_s']:.3f} | "
                         f"{b['dense_s'] / b['default_rule_s']:.2f} | {b['max_abs_diff']:.1e} |"
                         for b in bib["blocks"]) + "\n")
    _common.record("sparse_blocks", md, {"grid": g, "bibtex": bib, "repeats": args.repeats,
                                         "gemm_gflops": gemm, "total_s": total,
                                         "load_average": [load_start, load_end]}, args=args)


if __name__ == "__main__":
    main()
