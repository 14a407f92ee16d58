"""Bibtex multi-label: train / inference wall time and F1 of IOKR, SIOKR, ISOKR, SISOKR.

Compared, in the same run, with in-memory NumPy versions of the four models written as the
SISOKR authors' reference code computes them (``Methods/SketchedIOKR.py`` and
``Methods/Sketch.py`` of tamim-el/sisokr; "authors' code" below is this transcription of their
algorithm, not their own classes): IOKR fit = Gram matrix + ``np.linalg.inv(K_X + nλI)``,
inference = ``k_X(X_te, X) M k_Y(Y, Y_c)``, argmax over the unique training label vectors
``Y_c``; the sketched ones with their sub-sampling (``√(n/m)``-scaled columns) and
p-sparsified Gaussian sketches (decomposition trick over the non-null columns), the input side
``inv(K Rᵀ R K + nλ R K Rᵀ + 10⁻⁸ I) (K Rᵀ)ᵀ`` and the output side ``· K_Y R_Yᵀ inv(R_Y K_Y R_Yᵀ)``.
Also listed: the paper's Table 3 (other hardware).

Protocol
--------
- Data: ``bibtex/`` of the data folder (``_common.data_root``), the Mulan train / test
  split (4 880 / 2 515 rows, 1 836 binary features, 159 labels). Inputs standardised with the
  training mean and standard deviation (constant columns left as they are).
- Hyper-parameters of the authors' ``run_bibtex.py`` (as ``examples/bibtex_multilabel.py``):
  Gaussian kernels with ``γ = 1/(2σ²)``;
  IOKR σ²_x = 1e4, σ²_y = 1, λ = 1e-5; SIOKR ``SubSampling(2250)`` in, σ²_x = 1e4, σ²_y = 1e7,
  λ = 1e-6; ISOKR ``PSparsified(200, p=20/n, gaussian)`` out, σ²_x = 1e4, σ²_y = 1e6, λ = 1e-5;
  SISOKR both sketches, σ²_x = σ²_y = 1e4, λ = 1e-5.
- distsketch's models get CSR inputs with columns scaled by ``1/std`` (``load(folder,
  sparse=True)`` of the example) instead of the dense standardised ones: the same Gaussian
  kernel, since the mean cancels in ``x − x'`` (docs/design/engine.md, "Sparse inputs"), with kernel
  blocks from sparse products (measured faster for all four models, same F1:
  examples/bibtex_multilabel.py); ``--dense`` gives them the dense standardised rows. The
  NumPy reference and the authors' code always get the dense standardised arrays they expect.
- Train = ``fit(X, Y)`` (numpy input, ``store=None``: no pass blocks written). Inference = ``predict(X_te)``
  right after that fit, over the unique training label vectors (the default candidates; the
  first call computes their output features, as the reference computes ``k_Y(Y, Y_c)``).
- ``--repeats`` rounds; round ``r`` uses sketch seed ``r`` and a rotated order of the eight
  contenders. Times are medians over rounds; F1 (:func:`distsketch.metrics.f1_samples`) is the
  mean ± std over rounds (the sketch seeds; the paper averages 30 draws). distsketch limits
  BLAS to ``distsketch.blas-threads`` (default 1) in the pass, runs tasks on dask's threaded
  scheduler and gives the driver's solve the cores it finds idle; the NumPy reference and the
  authors' code use the BLAS library's default threads.

Writes the ``bibtex`` section of RESULTS.md and results/bibtex.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_bibtex.py [--repeats 3] [--quick] [--no-record] [--dense]
    python benchmarks/bench_bibtex.py --driver-crossover   # distsketch.Tuning.eigen_crossover
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

REFERENCE = "NumPy IOKR (authors' reference)"
# SISOKR paper (El Ahmad et al., AISTATS 2024), Bibtex: Table 3 wall times (s) and F1 (%).
# SIOKR / ISOKR paper figures are not in the project's notes (only IOKR and SISOKR), so they stay blank here.
PAPER = {"IOKR": {"fit_s": 2.54, "predict_s": 1.18, "f1": 44.9},
         "SIOKR": {}, "ISOKR": {},
         "SISOKR": {"fit_s": 1.41, "predict_s": 0.46, "f1": 44.1}}


def specs(n: int, m_in: int, m_out: int) -> list[dict]:
    import distsketch as ds

    def sub():
        return ds.SubSampling(m_in)

    def psparse():
        return ds.PSparsified(m_out, p=20.0 / n, kind="gaussian")

    def exact():
        return None

    return [{"name": "IOKR", "sx2": 1e4, "sy2": 1.0, "lam": 1e-5, "inp": exact, "out": exact},
            {"name": "SIOKR", "sx2": 1e4, "sy2": 1e7, "lam": 1e-6, "inp": sub, "out": exact},
            {"name": "ISOKR", "sx2": 1e4, "sy2": 1e6, "lam": 1e-5, "inp": exact, "out": psparse},
            {"name": "SISOKR", "sx2": 1e4, "sy2": 1e4, "lam": 1e-5, "inp": sub, "out": psparse}]


# --------------------------------------------------------------------------- contenders


def rbf(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    """``exp(−γ‖a − b‖²)`` through one GEMM (as scikit-learn's ``rbf_kernel``)."""
    D = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    np.maximum(D, 0.0, out=D)
    D *= -gamma
    return np.exp(D, out=D)


def run_reference(X, Y, Xte, Yte, *, lam=1e-5, sx2=1e4, sy2=1.0) -> dict:
    """The authors' IOKR: dense inverse, then scores ``k_X(x, X) M k_Y(Y, Y_c)``, argmax.

    ``np.linalg.inv`` on purpose: this is the baseline as the paper's code computes it
    (distsketch itself never forms an inverse).
    """
    from distsketch.metrics import f1_samples

    gx, gy = 1.0 / (2.0 * sx2), 1.0 / (2.0 * sy2)
    t = time.perf_counter()
    n = len(X)
    M = np.linalg.inv(rbf(X, X, gx) + n * lam * np.eye(n))
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    _, first = np.unique(Y, axis=0, return_index=True)
    Yc = Y[np.sort(first)]
    scores = rbf(Xte, X, gx) @ M @ rbf(Y, Yc, gy)
    P = Yc[np.argmax(scores, axis=1)]
    predict_s = time.perf_counter() - t
    return {"fit_s": fit_s, "predict_s": predict_s, "f1": f1_samples(Yte, P)}


def run_authors(spec: dict, X, Y, Xte, Yte, *, seed: int, m_in: int, m_out: int) -> dict:
    """SIOKR / ISOKR / SISOKR as the authors' classes compute them (``np.linalg.inv``, their
    sketches' scalings and jitters: ``mu_in = 1e-8`` on the input side, none on the output side)."""
    from distsketch.metrics import f1_samples

    rng = np.random.default_rng(1000 + seed)
    gx, gy = 1.0 / (2.0 * spec["sx2"]), 1.0 / (2.0 * spec["sy2"])
    n, lam = len(X), spec["lam"]
    sketch_in, sketch_out = spec["inp"]() is not None, spec["out"]() is not None
    t = time.perf_counter()
    if sketch_in:  # SubSample: R = √(n/m) E_idxᵀ
        idx = rng.choice(n, m_in, replace=False)
        scale = np.sqrt(n / m_in)
        KRT = scale * rbf(X, X[idx], gx)
        RKRT = scale * KRT[idx]
        Omega = np.linalg.inv(KRT.T @ KRT + n * lam * RKRT + 1e-8 * np.eye(m_in)) @ KRT.T
    else:
        Omega = np.linalg.inv(rbf(X, X, gx) + n * lam * np.eye(n))
    if sketch_out:  # pSparsified: SG on the non-null columns, 1/√(m p)
        p = 20.0 / n
        mask = rng.binomial(1, p, (m_out, n))
        cols = np.flatnonzero(mask.any(axis=0))
        SG = rng.normal(size=(m_out, len(cols))) * mask[:, cols]
        c = 1.0 / np.sqrt(m_out * p)
        KyRT = c * (rbf(Y, Y[cols], gy) @ SG.T)
        RKyRT = c * (SG @ KyRT[cols])
        M = Omega @ KyRT @ np.linalg.inv(RKyRT)
    else:
        M = Omega
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    _, first = np.unique(Y, axis=0, return_index=True)
    first = np.sort(first)
    Yc = Y[first]
    right = KyRT[first].T if sketch_out else rbf(Y, Yc, gy)
    left = scale * rbf(Xte, X[idx], gx) if sketch_in else rbf(Xte, X, gx)
    P = Yc[np.argmax(left @ M @ right, axis=1)]
    predict_s = time.perf_counter() - t
    return {"fit_s": fit_s, "predict_s": predict_s, "f1": f1_samples(Yte, P)}


def run_distsketch(spec: dict, X, Y, Xte, Yte, *, seed: int) -> dict:
    import distsketch as ds
    from distsketch.metrics import f1_samples

    model = ds.SISOKR(ds.Gaussian(1.0 / (2.0 * spec["sx2"])), ds.Gaussian(1.0 / (2.0 * spec["sy2"])),
                      input_sketch=spec["inp"](), output_sketch=spec["out"](), lam=spec["lam"],
                      random_state=seed)
    t = time.perf_counter()
    model.fit(X, Y)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    P = model.predict(Xte)
    predict_s = time.perf_counter() - t
    return {"fit_s": fit_s, "predict_s": predict_s, "f1": f1_samples(Yte, P),
            "n_candidates": len(model.candidates_)}


# --------------------------------------------------------------------------- driver routes


def driver_crossover(sizes=(250, 500, 1000, 2000, 3000), r_y: int = 200) -> None:
    """Measure the path length from which one generalized eigendecomposition beats a Cholesky
    factorisation per λ (``distsketch.Tuning.eigen_crossover``; docs/design/math.md, "Driver
    routes"), one BLAS thread, best of a few runs: the eigen route costs ``eigh(G, B)`` and
    ``VᵀR`` (then O(r·r_Y) per λ); the Cholesky route one safety factorisation of
    ``G + τnλB``, then per λ a factorisation of ``G + nλB`` and its solve with ``r_Y``
    right-hand sides (and with one, as KRR)."""
    import scipy.linalg as sl
    from threadpoolctl import threadpool_limits

    def best(f, k):
        out = []
        for _ in range(k):
            t = time.perf_counter()
            f()
            out.append(time.perf_counter() - t)
        return min(out)

    rng = np.random.default_rng(0)
    with threadpool_limits(1, "blas"):
        for r in sizes:
            C = rng.standard_normal((4 * r, r)) * np.geomspace(1, 1e-3, r)
            G, B = C.T @ C, C[:r].T @ C[:r] + 1e-3 * np.eye(r)
            rhs, nl, k = rng.standard_normal((r, r_y)), 1e-3, (5 if r <= 1000 else 3)

            def chol(width):
                L = sl.cholesky(G + nl * B, lower=True, check_finite=False)
                return sl.cho_solve((L, True), rhs[:, :width], check_finite=False)

            t_chol, t_chol1 = best(lambda: chol(r_y), k), best(lambda: chol(1), k)
            t_safe = best(lambda: sl.cholesky(G + 0.01 * nl * B, lower=True, check_finite=False), k)
            t_eig = best(lambda: sl.eigh(G, B, check_finite=False)[1].T @ rhs, max(2, k - 2))
            print(f"r = {r}: Cholesky + solve per λ {t_chol:.4f} s ({r_y} rhs), {t_chol1:.4f} s "
                  f"(1 rhs); safety factorisation {t_safe:.4f} s; eigh(G, B) + VᵀR {t_eig:.4f} s; "
                  f"crossover path length {(t_eig - t_safe) / t_chol:.1f} ({r_y} rhs), "
                  f"{(t_eig - t_safe) / t_chol1:.1f} (1 rhs)", flush=True)


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = _common.parser(__doc__, quick="1 000 training rows, m_in = 500, m_out = 100, 1 round "
                        "(< 30 s)", repeats=3, repeats_help="rounds (≥ 3; sketch seed = round)")
    ap.add_argument("--m-in", type=int, default=2250, help="input sub-sampling size")
    ap.add_argument("--m-out", type=int, default=200, help="rows of the output p-sparsified sketch")
    ap.add_argument("--dense", action="store_true",
                    help="distsketch's models on the dense standardised rows instead of CSR rows scaled "
                         "by 1/std (the same Gaussian kernel); baselines always get the dense rows")
    ap.add_argument("--driver-crossover", action="store_true",
                    help="only measure the driver routes' crossover path length (nothing written)")
    args = ap.parse_args()
    if args.driver_crossover:
        driver_crossover()
        return

    _common.require(_common.bibtex_dir() / "bibtex-train.arff", "Bibtex data")
    if args.quick:
        args.repeats, args.m_in, args.m_out = 1, 500, 100
    t_start = time.perf_counter()
    load_start = _common.load_average()
    X, Y, Xte, Yte = _common.load_bibtex()
    Xs, _, Xtes, _ = (X, Y, Xte, Yte) if args.dense else _common.load_bibtex(sparse=True)
    if args.quick:
        rows = np.sort(np.random.default_rng(0).choice(len(X), 1000, replace=False))
        X, Y, Xs = X[rows], Y[rows], Xs[rows]
    n = len(X)
    n_cand = len(np.unique(Y, axis=0))
    gemm = _common.gemm_gflops()
    print(f"Bibtex: train {n} × {X.shape[1]} → {Y.shape[1]} labels, test {len(Xte)}; {n_cand} unique "
          f"training label vectors (candidates); numpy GEMM {gemm:.1f} GFLOP/s; distsketch inputs "
          f"{'dense, standardised' if args.dense else 'sparse, scaled by 1/std'}", flush=True)

    models = {s["name"]: s for s in specs(n, args.m_in, args.m_out)}
    authors = {f"{name} (authors' code)": models[name] for name in ("SIOKR", "ISOKR", "SISOKR")}
    names = [REFERENCE, *models, *authors]
    runs = {name: [] for name in names}
    for r in range(args.repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            res = (run_reference(X, Y, Xte, Yte) if name == REFERENCE
                   else run_authors(authors[name], X, Y, Xte, Yte, seed=r, m_in=args.m_in,
                                    m_out=args.m_out) if name in authors
                   else run_distsketch(models[name], Xs, Y, Xtes, Yte, seed=r))
            runs[name].append(res)
            print(f"round {r} {name:32s} train {res['fit_s']:6.2f} s  inference {res['predict_s']:6.2f} s  "
                  f"F1 {100 * res['f1']:.2f}", flush=True)

    ref = {k: float(np.median([x[k] for x in runs[REFERENCE]])) for k in ("fit_s", "predict_s")}
    summary = {}
    for name in names:
        rs = runs[name]
        s = {k: float(np.median([x[k] for x in rs])) for k in ("fit_s", "predict_s")}
        f1 = np.array([x["f1"] for x in rs])
        s.update(f1_mean=float(f1.mean()), f1_std=float(f1.std()),
                 fit_vs_ref=s["fit_s"] / ref["fit_s"], predict_vs_ref=s["predict_s"] / ref["predict_s"])
        paper = PAPER.get(name) or (PAPER["IOKR"] if name == REFERENCE else {})
        if name in models and f"{name} (authors' code)" in runs:
            own = runs[f"{name} (authors' code)"]
            s.update(fit_vs_authors=s["fit_s"] / float(np.median([x["fit_s"] for x in own])),
                     predict_vs_authors=s["predict_s"] / float(np.median([x["predict_s"] for x in own])))
        elif name == "IOKR":
            s.update(fit_vs_authors=s["fit_vs_ref"], predict_vs_authors=s["predict_vs_ref"])
        if paper:
            s.update(fit_vs_paper=s["fit_s"] / paper["fit_s"], predict_vs_paper=s["predict_s"] / paper["predict_s"])
        summary[name] = s
    print()
    for name, s in summary.items():
        vs_paper = (f"; vs paper ×{s['fit_vs_paper']:.2f} / ×{s['predict_vs_paper']:.2f}"
                    if "fit_vs_paper" in s else "")
        vs_authors = (f"; vs authors' code ×{s['fit_vs_authors']:.2f} / ×{s['predict_vs_authors']:.2f}"
                      if "fit_vs_authors" in s else "")
        print(f"{name:32s} train {s['fit_s']:6.2f} s, inference {s['predict_s']:6.2f} s "
              f"(vs NumPy IOKR ×{s['fit_vs_ref']:.2f} / ×{s['predict_vs_ref']:.2f}{vs_paper}{vs_authors}); "
              f"F1 {100 * s['f1_mean']:.2f} ± {100 * s['f1_std']:.2f}")
    print("paper (AISTATS 2024, Table 3, other hardware): IOKR 2.54 s / 1.18 s, F1 44.9; "
          "SISOKR 1.41 s / 0.46 s, F1 44.1; SIOKR / ISOKR: not available here")
    total = time.perf_counter() - t_start
    load_end = _common.load_average()
    print(f"total {total:.0f} s; 1-minute load average {load_start:.1f} at the start, "
          f"{load_end:.1f} at the end")

    def paper_cell(name, key, fmt):
        v = (PAPER.get(name) or {}).get(key)
        return "" if v is None else format(v, fmt)

    label = {REFERENCE: "NumPy IOKR, authors' closed form (`inv(K + nλI)`)",
             "IOKR": "IOKR (exact / exact)",
             "SIOKR": f"SIOKR (SubSampling({args.m_in}) / exact)",
             "ISOKR": f"ISOKR (exact / PSparsified({args.m_out}, p=20/n))",
             "SISOKR": f"SISOKR (SubSampling({args.m_in}) / PSparsified({args.m_out}, p=20/n))"}
    label.update({name: f"authors' code (transcribed): {name.split()[0]}" for name in authors})
    rows = []
    for name, s in summary.items():
        ratio_p = (f"{s['fit_vs_paper']:.2f} | {s['predict_vs_paper']:.2f}" if "fit_vs_paper" in s else " | ")
        paper_name = "IOKR" if name == REFERENCE else name.split()[0]
        vs_a = (f"{s['fit_vs_authors']:.2f} | {s['predict_vs_authors']:.2f}" if "fit_vs_authors" in s
                else " | ")
        rows.append(f"| {label[name]} | {s['fit_s']:.2f} | {s['predict_s']:.2f} | {s['fit_vs_ref']:.2f} | "
                    f"{s['predict_vs_ref']:.2f} | {vs_a} | {paper_cell(paper_name, 'fit_s', '.2f')} | "
                    f"{paper_cell(paper_name, 'predict_s', '.2f')} | {ratio_p} | "
                    f"{100 * s['f1_mean']:.2f}" + (f" ± {100 * s['f1_std']:.2f}" if s["f1_std"] > 0 else "")
                    + f" | {paper_cell(paper_name, 'f1', '.1f')} |")
    hw = summary[REFERENCE]
    md = (
        f"Bibtex (Mulan split): {n} training rows × {X.shape[1]} standardised features, {Y.shape[1]} labels, "
        f"{len(Xte)} test rows; candidates = the {n_cand} unique training label vectors. Hyper-parameters "
        "of the SISOKR authors' `run_bibtex.py` (Gaussian kernels, γ = 1/(2σ²)): IOKR σ²_x = 1e4, σ²_y = 1, "
        "λ = 1e-5; SIOKR σ²_x = 1e4, σ²_y = 1e7, λ = 1e-6; ISOKR σ²_x = 1e4, σ²_y = 1e6, λ = 1e-5; SISOKR "
        f"σ²_x = σ²_y = 1e4, λ = 1e-5. distsketch's inputs: "
        + ("the dense standardised rows (`--dense`), as the baselines. " if args.dense else
           "CSR rows scaled by 1/std (the same Gaussian kernel as the standardised rows, docs/design/engine.md, "
           "\"Sparse inputs\"); baselines on the dense standardised rows. ")
        + "Train = `fit` (numpy input, `store=None`: no pass blocks "
        "written); inference = first `predict(X_test)` after the fit (includes the candidates' "
        "output features and, where the cost rule folds the candidates into the model, the fold "
        "itself: docs/design/decoding.md, \"Folded decoding\"; a second `predict` reuses it). "
        f"Medians over {args.repeats} rounds with a rotated order (round r: sketch seed r); "
        f"F1 = example-based F1 in %, mean ± std over the rounds' seeds (the paper: 30 draws). distsketch: "
        f"BLAS 1 thread in the pass + dask threaded scheduler, the driver's solve on the cores found idle "
        f"(docs/design/math.md, \"Driver routes\"); NumPy reference and authors' code: BLAS default threads (2). numpy GEMM "
        f"{gemm:.1f} GFLOP/s in the same run. Total run {total:.0f} s; 1-minute load average "
        f"{load_start:.1f} at its start, {load_end:.1f} at its end (other work on the machine slows "
        "every contender; the ratios within the run are the comparison).\n\n"
        "| model (input / output sketch) | train (s) | inference (s) | train / NumPy IOKR | "
        "inference / NumPy IOKR | train / authors' code | inference / authors' code | "
        "paper train (s) | paper inference (s) | train / paper | "
        "inference / paper | F1 | paper F1 |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) +
        "\n\nPaper = El Ahmad et al., *Sketch In, Sketch Out* (AISTATS 2024), Bibtex, Table 3 for times and "
        "the reported F1; SIOKR / ISOKR paper figures are not in the project's notes (only IOKR and SISOKR) and are left blank. "
        "`/ authors' code`: distsketch's model against the same model as the authors' code computes it, "
        "in the same run (their IOKR is the NumPy IOKR row); \"authors' code\" is a NumPy transcription "
        "of their algorithm (`Methods/SketchedIOKR.py`, `Methods/Sketch.py`), not their own classes. "
        "The paper's hardware differs: the NumPy reference row measures this machine against the paper's "
        f"IOKR (×{hw['fit_vs_paper']:.2f} train, ×{hw['predict_vs_paper']:.2f} inference), so the columns "
        "`/ NumPy IOKR` are the hardware-independent comparison."
    )
    data = {"protocol": {"n_train": n, "n_test": len(Xte), "n_candidates": n_cand, "m_in": args.m_in,
                         "m_out": args.m_out, "repeats": args.repeats, "sparse_inputs": not args.dense},
            "runs": runs, "summary": summary, "paper": PAPER, "gemm_gflops": gemm, "total_s": total,
            "load_average": [load_start, load_end]}
    _common.record("bibtex", md, data, args=args)


if __name__ == "__main__":
    main()
