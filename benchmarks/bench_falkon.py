"""Falkon side by side: ``SketchedKRR(solver="pcg")`` against Falkon, float32 and float64.

Falkon (Meanti, Carratino, Rosasco & Rudi, NeurIPS 2020; FalkonML/falkon 0.9.0) is the library
users pick for large-m kernel ridge regression. Both solve the same system,
``(K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ (y − ȳ)``, by conjugate gradient with the same
preconditioner (``P = T⁻¹A⁻¹``, ``TᵀT = K_mm + εmI``, ``AᵀA = TTᵀ/m + λI``), and predict
``f(x) = k(x, X_J) α + ȳ``.

Protocol
--------
- Data: Friedman #1, ``d = 10``, ``X ~ U[0, 1]^10``,
  ``y = 10 sin(π x₁x₂) + 20 (x₃ − ½)² + 10 x₄ + 5 x₅ + N(0, 1)`` (noise σ = 1, the test RMSE's
  floor), generated in chunks of 100 000 rows from ``[seed, chunk]`` (the same rows whatever
  n): ``--n`` training rows (seed 0), 20 000 test rows (seed 1).
- Model: Gaussian kernel σ = 1 (distsketch ``Gaussian(gamma=0.5)``, Falkon
  ``GaussianKernel(sigma=1)``), λ = 1e-6 (Falkon's ``penalty``), ``m`` uniform landmarks
  (distsketch ``SubSampling(m)``, Falkon ``UniformSelector``; each tool's own draw, seed 0;
  ``--centres same``: Falkon gets distsketch's ``landmarks_`` through its ``FixedSelector``).
  Falkon has no intercept: it fits ``y − ȳ`` and ``ȳ`` is added back, which is
  ``SketchedKRR(fit_intercept=True)``'s PCG route (it centres the targets, the intercept is ȳ).
- Variants (``--variants``): ``distsketch`` (``max_iter=20, tol=1e-12``: 20 iterations, like
  Falkon's ``maxiter=20``, which stops earlier where its absolute residual test, 1e-7, is met:
  the iterations are reported),
  ``distsketch-tol`` (its default ``tol``, ``max_iter``), ``falkon32`` / ``falkon64``
  (float32 / float64 tensors: Falkon computes in the input dtype; default
  ``max_cpu_mem = inf``: one n × m kernel block per product) and ``falkon32-block`` /
  ``falkon64-block`` (``max_cpu_mem = --max-cpu-mem`` MiB: blocked products). distsketch
  runs its engine's defaults (float32 kernel blocks, float64 sums, ``store=None``).
- Threads: ``--threads`` (2) each: dask's ``num_workers`` (one BLAS thread per task, the
  driver's factorisations at most that many), ``torch.set_num_threads`` and a threadpoolctl
  limit for Falkon.
- Each fit runs in a fresh process (its peak RSS, ``VmHWM``: :func:`_common.peak_rss_mib`,
  is its own: the data in float64, the imports — torch's included — and the fit; the RSS
  before the fit is reported too), in alternating order (each variant once, then again, ``--repeats`` times): medians.
  Reported: fit and predict time (wall), CG iterations, kernel passes over the training rows
  (distsketch ``n_passes_``; Falkon: calls of its kernel's ``mmv`` / ``dmmv`` during ``fit``,
  which recomputes the residual every 10 iterations: 23 passes for 20), test RMSE, peak RSS.
- Parts (``--parts``): ``m``: n = 2·10⁵, m over ``--ms`` (2 000, 5 000, 10 000); ``big``:
  n = 10⁶ (``--n-big``), m = 5 000 (``--m-big``).
- ``--check``: the same-model check at n = 20 000, m = 1 000 (``--check-n``, ``--check-m``),
  same landmarks, λ and 20 iterations, in this process: the predictions of distsketch (float32
  and float64 blocks) and Falkon (float32, float64) against each other and against dense
  float64 references (20 PCG iterations on ``H`` with the unjittered ``K_mm``, distsketch's
  system; on ``K_nmᵀK_nm + nλ(K_mm + εmI)``, Falkon's; the exact solution), as
  ``max |f₁ − f₂| / max |f₂|`` on the test rows.

Falkon is not on PyPI and torch stays out of distsketch's extras: build it (CPU only, about
11 minutes on 2 cores) into a virtualenv of its own and run this script with that Python:

1. ``pip install "torch==2.13.0+cpu" ninja wheel scikit-learn threadpoolctl`` (a CPU torch,
   no CUDA libraries; Falkon imports scikit-learn) and ``pip install -e <distsketch clone>``;
2. the source of FalkonML/falkon (version 0.9.0, commit 387d456), then in it
   ``FORCE_ONLY_CPU=1 MAX_JOBS=2 pip install --no-build-isolation --no-deps -e .``
   (``--no-deps`` skips pykeops, which ``keops_active="no"`` does not need);
3. check: ``python -c "import falkon"``.

The project's notes on it are ``FALKON.md`` in the shared folder beside the clone. Without
Falkon the script says why and ends (status 0).

Writes the ``falkon`` section of RESULTS.md and results/falkon.jsonl (not with ``--quick`` or
``--no-record``); a run of some parts, m or variants keeps the newest recorded rows of the
others in the section.

    python benchmarks/bench_falkon.py [--parts m big] [--ms 2000 5000 10000] [--repeats 3]
                                      [--variants ...] [--max-cpu-mem 64] [--check] [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

logger = logging.getLogger("bench_falkon")

D = 10
SIGMA = 1.0
GAMMA = 1.0 / (2 * SIGMA**2)
LAM = 1e-6
ITERATIONS = 20
N_TEST = 20_000
CHUNK = 100_000
#: Falkon's preconditioner jitter in float64 (``pc_epsilon_64``, times m), distsketch's
#: ``JITTER · m · mean diag K_mm`` for a Gaussian kernel: the same ε.
EPS64 = 1e-13
#: Falkon's jitter in float32 (``pc_epsilon_32``), in its preconditioner and its operator.
EPS32 = 1e-5
#: Iterations of the check's converged fits (distsketch ``tol=1e-10``; Falkon's own stopping
#: test, an absolute residual below 1e-7).
CONVERGED = 300
VARIANTS = ("distsketch", "distsketch-tol", "falkon32", "falkon64", "falkon32-block",
            "falkon64-block")
LABELS = {"distsketch": "distsketch PCG, 20 it.", "distsketch-tol": "distsketch PCG, default tol",
          "falkon32": "Falkon float32", "falkon64": "Falkon float64",
          "falkon32-block": "Falkon float32, {mib} MiB blocks",
          "falkon64-block": "Falkon float64, {mib} MiB blocks"}


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Friedman #1 rows (float64), generated in chunks of ``CHUNK`` from ``[seed, chunk]``."""
    Xs, ys = [], []
    for i, s in enumerate(range(0, n, CHUNK)):
        rng = np.random.default_rng([seed, i])
        x = rng.random((min(CHUNK, n - s), D))
        Xs.append(x)
        ys.append(10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2
                  + 10 * x[:, 3] + 5 * x[:, 4] + rng.standard_normal(len(x)))
    return np.concatenate(Xs), np.concatenate(ys)


def falkon_missing() -> str | None:
    """Why Falkon cannot be imported here, or None when it can."""
    try:
        import falkon  # noqa: F401
    except Exception as exc:  # an ImportError, or a build that fails at import
        return f"{type(exc).__name__}: {exc}"
    return None


def rmse(pred, y) -> float:
    return float(np.sqrt(np.mean((np.asarray(pred, dtype=np.float64).ravel() - y) ** 2)))


# --------------------------------------------------------------------------- one fit each


def fit_distsketch(X, y, Xt, *, m: int, tol: float | None, threads: int,
                   block_dtype: str | None = None, max_iter: int = ITERATIONS):
    """``(model, predictions, figures)`` of ``SketchedKRR(solver="pcg")``; ``tol=None``: its
    default ``tol`` and ``max_iter``, else ``max_iter``."""
    import dask

    import distsketch as ds

    kw = {} if tol is None else {"tol": tol, "max_iter": max_iter}
    if block_dtype is not None:
        kw["options"] = ds.EngineOptions(block_dtype=block_dtype)
    config = {"num_workers": threads}
    if threads < (os.cpu_count() or 1):
        config["distsketch.driver-threads"] = threads
    with dask.config.set(config), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(m), lam=LAM,
                             solver="pcg", random_state=0, **kw)
        est, fit_s = _common.timed(lambda: est.fit(X, y))
        pred, predict_s = _common.timed(lambda: np.asarray(est.predict(Xt)))
    return est, pred, {"fit_s": fit_s, "predict_s": predict_s, "iterations": int(est.n_iter_),
                       "passes": int(est.n_passes_),
                       "warnings": sorted({str(w.message)[:120] for w in caught})}


def fit_falkon(X, y, Xt, *, m: int, dtype: str, max_cpu_mem: float, threads: int,
               centres: np.ndarray | None = None, maxiter: int = ITERATIONS):
    """``(model, predictions, figures)`` of Falkon on ``y − ȳ`` (ȳ added back), ``maxiter``,
    in ``dtype``; ``centres``: its ``FixedSelector`` (else its uniform draw, seed 0).
    ``max_cpu_mem`` in bytes (``inf``: Falkon's default)."""
    import falkon
    import torch
    from falkon.center_selection import FixedSelector
    from falkon.optim import conjgrad
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    np_dtype = np.dtype(dtype)
    ybar = float(np.mean(y))
    Xf = torch.from_numpy(np.ascontiguousarray(X, dtype=np_dtype))
    Yf = torch.from_numpy(np.ascontiguousarray((y - ybar)[:, None], dtype=np_dtype))
    Xtf = torch.from_numpy(np.ascontiguousarray(Xt, dtype=np_dtype))
    opts = falkon.FalkonOptions(use_cpu=True, keops_active="no", max_cpu_mem=max_cpu_mem)
    selector = "uniform" if centres is None else FixedSelector(
        torch.from_numpy(np.ascontiguousarray(centres, dtype=np_dtype)))
    kernel = falkon.kernels.GaussianKernel(sigma=SIGMA, opt=opts)
    passes = [0]
    for name in ("mmv", "dmmv"):  # count the kernel's products over the training rows
        method = getattr(kernel, name)

        def counted(*a, _method=method, **k):
            passes[0] += 1
            return _method(*a, **k)

        setattr(kernel, name, counted)
    iterations = [0]
    solve = conjgrad.ConjugateGradient.solve

    def counted_solve(self, *a, **k):
        out = solve(self, *a, **k)
        iterations[0] = int(self.num_iter) + 1
        return out

    model = falkon.Falkon(kernel=kernel, penalty=LAM, M=m if centres is None else len(centres),
                          center_selection=selector, maxiter=maxiter, seed=0, options=opts)
    conjgrad.ConjugateGradient.solve = counted_solve
    try:
        with threadpool_limits(threads):
            model, fit_s = _common.timed(lambda: model.fit(Xf, Yf))
            n_passes = passes[0]
            pred, predict_s = _common.timed(lambda: model.predict(Xtf))
    finally:
        conjgrad.ConjugateGradient.solve = solve
    pred = pred.numpy().astype(np.float64).ravel() + ybar
    return model, pred, {"fit_s": fit_s, "predict_s": predict_s, "iterations": iterations[0],
                         "passes": n_passes}


#: Rows and centres of the warm-up fit before the timed one (:func:`warm_up`).
WARMUP_N, WARMUP_M = 2000, 50


def warm_up(variant: str, *, threads: int) -> float:
    """One small fit (``WARMUP_N`` rows, ``WARMUP_M`` centres, 3 iterations) of the variant's
    tool before the timed fit, so that neither tool's fit time counts its one-time imports
    and set-up: Falkon's (torch) are loaded by ``import falkon`` already, distsketch's
    (dask, zarr, scipy.linalg, scikit-learn's warning class) by its first fit. Its seconds."""
    X, y = data(WARMUP_N, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if variant.startswith("distsketch"):
            _, seconds = _common.timed(lambda: fit_distsketch(
                X, y, X[:10], m=WARMUP_M, tol=1e-12, threads=threads, max_iter=3))
        else:
            _, seconds = _common.timed(lambda: fit_falkon(
                X, y, X[:10], m=WARMUP_M, threads=threads, maxiter=3,
                dtype="float32" if variant.startswith("falkon32") else "float64",
                max_cpu_mem=np.inf))
    return seconds


def child(args) -> None:
    """One fit of ``args.child`` in this fresh process; prints one JSON line."""
    variant = args.child
    if variant.startswith("distsketch"):  # the tool's imports count before the fit
        import distsketch  # noqa: F401
    else:
        import falkon  # noqa: F401
    warmup_s = warm_up(variant, threads=args.threads)
    X, y = data(args.n, 0)
    Xt, yt = data(args.n_test, 1)
    before = _common.peak_rss_mib()
    if variant.startswith("distsketch"):
        est, pred, out = fit_distsketch(X, y, Xt, m=args.m, threads=args.threads,
                                        tol=None if variant == "distsketch-tol" else 1e-12)
        if args.landmarks and not Path(args.landmarks).exists() and variant == "distsketch":
            np.save(args.landmarks, np.asarray(est.landmarks_, dtype=np.float64))
    else:
        centres = np.load(args.landmarks) if args.landmarks else None
        mem = args.max_cpu_mem * 2**20 if variant.endswith("-block") else np.inf
        _, pred, out = fit_falkon(X, y, Xt, m=args.m, threads=args.threads, centres=centres,
                                  dtype="float32" if variant.startswith("falkon32") else "float64",
                                  max_cpu_mem=mem)
    out.update(rmse=rmse(pred, yt), peak_rss_mib=_common.peak_rss_mib(),
               rss_before_fit_mib=before, warmup_s=warmup_s)
    print(json.dumps(out))


# --------------------------------------------------------------------------- the timings


def run_fit(variant: str, *, n: int, m: int, args, landmarks: Path | None) -> dict:
    """One fit in a fresh process: its figures, or ``{"failed": why}``."""
    cmd = [sys.executable, __file__, "--child", variant, "--n", str(n), "--m", str(m),
           "--n-test", str(args.n_test), "--threads", str(args.threads),
           "--max-cpu-mem", str(args.max_cpu_mem)]
    if landmarks is not None:
        cmd += ["--landmarks", str(landmarks)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        why = (f"exit status {out.returncode}: "
               + (lines[-1][:200] if lines else "no message").replace("|", "/"))
        logger.warning("%s n=%d m=%d failed (%s)\n%s", variant, n, m, why,
                       "\n".join(lines[-15:]))
        return {"failed": why}
    return json.loads(out.stdout.strip().splitlines()[-1])


def grid(part: str, n: int, ms: list[int], args, report) -> dict:
    """Every variant at each m, alternated, ``args.repeats`` times: medians per variant."""
    rows = []
    meta = {"n": n, "ms": ms, "n_test": args.n_test, "repeats": args.repeats,
            "centres": args.centres, "threads": args.threads,
            "max_cpu_mem_mib": args.max_cpu_mem, "load_start": _common.load_average()}
    tmp = Path(tempfile.mkdtemp(prefix="bench-falkon-"))
    for m in ms:
        landmarks = tmp / f"landmarks-{n}-{m}.npy" if args.centres == "same" else None
        runs: dict[str, list[dict]] = {v: [] for v in args.variants}
        for rep in range(args.repeats):
            for v in args.variants:
                r = run_fit(v, n=n, m=m, args=args, landmarks=landmarks)
                runs[v].append(r)
                if "failed" not in r:
                    logger.info("%s n=%d m=%d run %d: fit %.1f s, predict %.2f s, %d it, %d "
                                "passes, RMSE %.4f, peak RSS %.0f MiB", v, n, m, rep + 1,
                                r["fit_s"], r["predict_s"], r["iterations"], r["passes"],
                                r["rmse"], r["peak_rss_mib"])
        for v, rs in runs.items():
            ok = [r for r in rs if "failed" not in r]
            row = {"n": n, "m": m, "variant": v, "runs": len(ok),
                   "failed": [r["failed"] for r in rs if "failed" in r]}
            if ok:
                for k in ("fit_s", "predict_s", "iterations", "passes", "rmse", "peak_rss_mib",
                          "rss_before_fit_mib", "warmup_s"):
                    if all(k in r for r in ok):
                        row[k] = float(np.median([r[k] for r in ok]))
                row["fit_s_all"] = [r["fit_s"] for r in ok]
                row["warnings"] = sorted({w for r in ok for w in r.get("warnings", [])})
            rows.append(row)
        report({**meta, "rows": rows})
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return {**meta, "rows": rows}


# --------------------------------------------------------------------------- the same-model check


def gaussian(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``exp(−γ‖a − b‖²)`` in float64, the dense reference kernel."""
    d2 = (A**2).sum(1)[:, None] + (B**2).sum(1)[None, :] - 2.0 * A @ B.T
    return np.exp(-GAMMA * np.maximum(d2, 0.0))


def dense_pcg(Knm, Kmm, z, *, n: int, eps: float, jittered: bool, iterations: int | None):
    """Falkon's PCG in dense float64: ``α = P u`` with ``u`` after ``iterations`` CG steps from
    0 on ``W u = Pᵀ z`` (``None``: its exact solution), ``P = T⁻¹A⁻¹``, ``TᵀT = K_mm + εmI``,
    ``AᵀA = TTᵀ/m + λI``, ``W = PᵀHP = BᵀB + nλ PᵀK_mmP`` with ``B = K_nm P`` formed (not
    ``H = K_nmᵀK_nm + nλK_mm``, whose condition number squares ``B``'s). ``jittered``:
    ``K_mm + εmI`` in ``H`` too, as Falkon's operator has it (``λI`` in the preconditioned
    space, ``PᵀTᵀTP = A⁻ᵀA⁻¹``)."""
    from scipy.linalg import cholesky, solve, solve_triangular

    m = len(Kmm)
    Kj = Kmm + eps * m * np.eye(m)
    T = cholesky(Kj)
    A = cholesky(T @ T.T / m + LAM * np.eye(m))
    P = solve_triangular(T, solve_triangular(A, np.eye(m)))
    B = Knm @ P
    W = B.T @ B + n * LAM * (P.T @ (Kj if jittered else Kmm) @ P)
    b = P.T @ z
    if iterations is None:
        return P @ solve(W, b, assume_a="pos")
    u, r = np.zeros_like(b), b.copy()
    p, rr = r.copy(), r @ r
    for _ in range(iterations):
        Wp = W @ p
        step = rr / (p @ Wp)
        u += step * p
        r -= step * Wp
        rr, rr_old = r @ r, rr
        p = r + (rr / rr_old) * p
    return P @ u


def check(args) -> dict:
    """The same-model check (module docstring): relative prediction differences."""
    from threadpoolctl import threadpool_limits

    n, m = args.check_n, args.check_m
    X, y = data(n, 0)
    Xt, yt = data(args.check_n_test, 1)
    preds, figs = {}, {}
    est, preds["distsketch float32 blocks"], figs["distsketch float32 blocks"] = fit_distsketch(
        X, y, Xt, m=m, tol=1e-12, threads=args.threads)
    C = np.asarray(est.landmarks_, dtype=np.float64)
    _, preds["distsketch float64 blocks"], figs["distsketch float64 blocks"] = fit_distsketch(
        X, y, Xt, m=m, tol=1e-12, threads=args.threads, block_dtype="float64")
    for dtype in ("float64", "float32"):
        _, preds[f"Falkon {dtype}"], figs[f"Falkon {dtype}"] = fit_falkon(
            X, y, Xt, m=m, dtype=dtype, max_cpu_mem=np.inf, threads=args.threads, centres=C)
    conv = f"converged ({CONVERGED} it. at most)"
    _, preds[f"distsketch float64 blocks, {conv}"], figs[f"distsketch float64 blocks, {conv}"] = (
        fit_distsketch(X, y, Xt, m=m, tol=1e-10, threads=args.threads, block_dtype="float64",
                       max_iter=CONVERGED))
    _, preds[f"Falkon float64, {conv}"], figs[f"Falkon float64, {conv}"] = fit_falkon(
        X, y, Xt, m=m, dtype="float64", max_cpu_mem=np.inf, threads=args.threads, centres=C,
        maxiter=CONVERGED)
    with threadpool_limits(args.threads):
        ybar = float(np.mean(y))
        Knm, Kmm, Ktm = gaussian(X, C), gaussian(C, C), gaussian(Xt, C)
        z = Knm.T @ (y - ybar)
        for name, eps, jit, it in (("dense PCG, 20 it.", EPS64, False, ITERATIONS),
                                   ("dense PCG, 20 it., jittered H", EPS64, True, ITERATIONS),
                                   ("dense PCG, 20 it., jittered H, ε = 1e-5", EPS32, True,
                                    ITERATIONS),
                                   ("dense exact", EPS64, False, None)):
            preds[name] = Ktm @ dense_pcg(Knm, Kmm, z, n=n, eps=eps, jittered=jit,
                                          iterations=it) + ybar
    pairs = [("distsketch float64 blocks", "dense PCG, 20 it."),
             ("Falkon float64", "dense PCG, 20 it., jittered H"),
             ("dense PCG, 20 it., jittered H", "dense PCG, 20 it."),
             ("distsketch float64 blocks", "Falkon float64"),
             ("distsketch float32 blocks", "distsketch float64 blocks"),
             ("distsketch float32 blocks", "Falkon float64"),
             ("Falkon float32", "Falkon float64"),
             ("distsketch float32 blocks", "Falkon float32"),
             ("Falkon float32", "dense PCG, 20 it., jittered H, ε = 1e-5"),
             ("dense PCG, 20 it., jittered H, ε = 1e-5", "dense PCG, 20 it., jittered H"),
             ("dense PCG, 20 it.", "dense exact"),
             (f"distsketch float64 blocks, {conv}", "dense exact"),
             (f"Falkon float64, {conv}", "dense exact"),
             (f"distsketch float64 blocks, {conv}", f"Falkon float64, {conv}")]
    rows = []
    for a, b in pairs:
        diff = float(np.max(np.abs(preds[a] - preds[b])))
        rel = diff / float(np.max(np.abs(preds[b])))
        rows.append({"a": a, "b": b, "max_abs": diff, "rel": rel})
        logger.info("check: %s vs %s: max |Δf| = %.3g (%.3g of max |f|)", a, b, diff, rel)
    tools = [{"name": k, "rmse": rmse(v, yt), **{f: figs[k][f] for f in
                                                 ("iterations", "passes", "fit_s")
                                                 if k in figs}} for k, v in preds.items()]
    return {"n": n, "m": m, "n_test": args.check_n_test, "pairs": rows, "tools": tools}


# --------------------------------------------------------------------------- the section


def latest(part: str) -> tuple[str | None, dict | None]:
    """The newest finished record of ``part`` in results/falkon.jsonl: (date, part)."""
    recs = _records(part)
    return (recs[-1]["date"], recs[-1]["parts"][part]) if recs else (None, None)


def _records(part: str) -> list[dict]:
    path = _common.RESULTS_DIR / "falkon.jsonl"
    if not path.exists():
        return []
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in recs if part in r.get("parts", {}) and not r.get("partial")]


def merged(part: str, current: dict | None) -> dict | None:
    """The rows of ``part`` to show: for each (n, m, variant) the newest measured one, from
    this run (``current``) or the recorded runs (a run of some m or variants keeps the others'
    rows); each row names its run's date and load average."""
    rows: dict = {}
    meta = None
    for rec in _records(part):
        g = rec["parts"][part]
        for row in g["rows"]:
            rows[(row["n"], row["m"], row["variant"])] = {
                **row, "date": rec["date"][:10], "load": g["load_start"]}
        meta = g
    if current is not None:
        for row in current["rows"]:
            rows[(row["n"], row["m"], row["variant"])] = {
                **row, "date": "this run", "load": current["load_start"]}
        meta = current
    if meta is None:
        return None
    order = sorted(rows, key=lambda k: (k[0], k[1], VARIANTS.index(k[2])))
    return {**meta, "rows": [rows[k] for k in order]}


def grid_table(g: dict, mib: float) -> list[str]:
    md = ["| n | m | tool | fit (s), median (all) | predict (s) | iterations | kernel passes | "
          "test RMSE | peak RSS (MiB) | RSS before fit (MiB) | warm-up (s) | run (load) |",
          "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in g["rows"]:
        label = LABELS[r["variant"]].format(mib=f"{mib:g}")
        if not r["runs"]:
            md.append(f"| {r['n']:,} | {r['m']:,} | {label} | failed: {r['failed'][0][:80]} "
                      f"| | | | | | | | {r.get('date', '')} |")
            continue
        every = ", ".join(f"{s:.1f}" for s in r["fit_s_all"])
        md.append(f"| {r['n']:,} | {r['m']:,} | {label} | {r['fit_s']:.1f} ({every}) | "
                  f"{r['predict_s']:.2f} | {r['iterations']:.0f} | {r['passes']:.0f} | "
                  f"{r['rmse']:.4f} | {r['peak_rss_mib']:.0f} | {r['rss_before_fit_mib']:.0f} | "
                  + (f"{r['warmup_s']:.1f}" if "warmup_s" in r else "none") + " | "
                  f"{r.get('date', '')} ({r.get('load', float('nan')):.1f}) |"
                  + (f" ({len(r['failed'])} failed)" if r["failed"] else ""))
    return md


def write(out: dict, args) -> None:
    """Replace the ``falkon`` section (and append the record) with ``out``, the last recorded
    parts where this run has none."""
    import falkon
    import torch

    md = [f"Friedman #1 (d = {D}, noise σ = 1: test RMSE ≥ 1); Gaussian kernel σ = {SIGMA:g} "
          f"(γ = {GAMMA:g}), λ = {LAM:g}; Falkon {falkon.__version__} on torch {torch.__version__} "
          "(CPU build, `keops_active=\"no\"`), fitting y − ȳ (distsketch's intercept). "
          "distsketch: `SketchedKRR(solver=\"pcg\")`, engine defaults (float32 kernel blocks, "
          "float64 sums); \"20 it.\" is `max_iter=20, tol=1e-12`, Falkon `maxiter=20`. Each fit "
          "in a fresh process, variants alternated; medians (each run's fit time in brackets). "
          "Before the timed fit each process makes one warm-up fit of its tool (2 000 rows, "
          "50 centres, 3 iterations), so that neither fit time counts one-time imports and "
          "set-up (Falkon's torch is imported by `import falkon` before it; distsketch's "
          "first fit imports dask, zarr and scikit-learn's warning class): "
          "the warm-up's time is in the record (`warmup_s`). Peak RSS: the process's "
          "high-water mark, `VmHWM` (data in float64 and imports — torch's — included; before fit: after the "
          "imports and the data, just before `fit`). Kernel passes: products over the training rows (Falkon "
          "recomputes its residual every 10 iterations)."]
    for part, title in (("m", "m grid"), ("big", "large n")):
        g = merged(part, out["parts"].get(part))
        if g is not None:
            md.append(f"\n({title}"
                      + (", written after each m: the run had not finished" if out.get("partial")
                         and part in out["parts"] else "")
                      + f"; {g['n_test']:,} test rows, uniform landmarks: "
                      + ("the same, Falkon gets distsketch's" if g["centres"] == "same"
                         else "each tool's own draw")
                      + f"; {g['threads']} threads each; each row: the median of its runs (all "
                      "fit times in brackets), the date of its run and the load average at "
                      "that run's start)\n")
            md += grid_table(g, g["max_cpu_mem_mib"])
    date, c = (None, out["parts"]["check"]) if "check" in out["parts"] else latest("check")
    if c is not None:
        md.append("\n(same-model check, `--check`" + (f", from the run of {date}" if date else "")
                  + f": n = {c['n']:,}, m = {c['m']:,}, {c['n_test']:,} test rows, the same "
                  "landmarks, λ and 20 iterations; dense: float64 references of the same PCG. "
                  "Relative difference: max |f_a − f_b| / max |f_b| over the test rows)\n")
        md += ["| a | b | max abs diff | relative |", "|---|---|---:|---:|"]
        md += [f"| {r['a']} | {r['b']} | {r['max_abs']:.2e} | {r['rel']:.2e} |"
               for r in c["pairs"]]
        rel = {(r["a"], r["b"]): r["rel"] for r in c["pairs"]}
        conv = next(r["a"] for r in c["pairs"] if r["a"].startswith("distsketch float64 blocks, "))
        fconv = conv.replace("distsketch float64 blocks", "Falkon float64")
        md.append(
            "\nReading: after 20 iterations distsketch (float64 blocks) is "
            f"{rel['distsketch float64 blocks', 'dense PCG, 20 it.']:.1e} from the dense PCG on "
            "``H`` and Falkon float64 "
            f"{rel['Falkon float64', 'dense PCG, 20 it., jittered H']:.1e} from the dense PCG on "
            "its ``H`` (``K_mm + εmI``, ε = 1e-13, in the operator too, which alone moves the "
            f"iterate by {rel['dense PCG, 20 it., jittered H', 'dense PCG, 20 it.']:.1e}); "
            "converged, they are "
            f"{rel[conv, 'dense exact']:.1e} and {rel[fconv, 'dense exact']:.1e} from the exact "
            f"solution and {rel[conv, fconv]:.1e} apart. 20 iterations are "
            f"{rel['dense PCG, 20 it.', 'dense exact']:.1e} from the exact solution (Falkon's "
            "converged fit stops at its absolute residual test, 1e-7). distsketch's float32 "
            "kernel blocks move its "
            f"predictions by {rel['distsketch float32 blocks', 'distsketch float64 blocks']:.1e}. "
            f"Falkon float32 differs from float64 by {rel['Falkon float32', 'Falkon float64']:.1e}:"
            " its float32 jitter ε = 1e-5 (``pc_epsilon_32``; εm is added to ``K_mm`` in the "
            "preconditioner and the operator) changes the model — the same PCG in float64 with "
            "that jitter is "
            f"{rel['dense PCG, 20 it., jittered H, ε = 1e-5', 'dense PCG, 20 it., jittered H']:.1e}"
            " from the ε = 1e-13 one and "
            f"{rel['Falkon float32', 'dense PCG, 20 it., jittered H, ε = 1e-5']:.1e} from Falkon "
            "float32 (float32 rounding).")
        md += ["", "| fit | test RMSE | iterations | kernel passes |", "|---|---:|---:|---:|"]
        md += [f"| {t['name']} | {t['rmse']:.6f} | {t.get('iterations', '')} | "
               f"{t.get('passes', '')} |" for t in c["tools"]]
    _common.record("falkon", "\n".join(md), out, args=args)


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 5 000, m = 200 and 400, 1 run, 2 000 test rows",
                        repeats=3, repeats_help="alternated runs of every variant (medians)")
    ap.add_argument("--parts", nargs="+", choices=["m", "big"], default=None,
                    help="m: the m grid at n = --n; big: n = --n-big, m = --m-big (default "
                         "both, none with --check alone)")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--ms", type=int, nargs="+", default=[2000, 5000, 10_000])
    ap.add_argument("--n-big", type=int, default=1_000_000)
    ap.add_argument("--m-big", type=int, default=5000)
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--centres", choices=["own", "same"], default="own",
                    help="each tool's own uniform draw, or distsketch's landmarks for Falkon")
    ap.add_argument("--max-cpu-mem", type=float, default=64.0,
                    help="Falkon's max_cpu_mem of the -block variants (MiB)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="the same-model check")
    ap.add_argument("--check-n", type=int, default=20_000)
    ap.add_argument("--check-m", type=int, default=1000)
    ap.add_argument("--check-n-test", type=int, default=2000)
    ap.add_argument("--n-test", type=int, default=N_TEST, help=argparse.SUPPRESS)
    ap.add_argument("--m", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--landmarks", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if args.child is not None:
        logging.getLogger().setLevel(logging.WARNING)  # stdout's last line is the JSON
        return child(args)
    why = falkon_missing()
    if why is not None:
        logger.warning("skipped: Falkon is not importable (%s); build it into a virtualenv "
                       "as this script's docstring says and run the script with its Python",
                       why)
        raise SystemExit(0)
    if args.centres == "same" and "distsketch" not in args.variants:
        ap.error("--centres same takes the landmarks of the 'distsketch' variant")
    if args.variants and args.centres == "same":  # distsketch first: its landmarks
        args.variants = ["distsketch"] + [v for v in args.variants if v != "distsketch"]
    if args.parts is None:
        args.parts = [] if args.check else ["m", "big"]
    if args.quick:
        args.n, args.ms, args.repeats, args.parts, args.n_test = 5000, [200, 400], 1, ["m"], 2000
        args.check_n, args.check_m = 5000, 300
    out = {"parts": {}, "load_start": _common.load_average()}

    def partial(part):
        def report(g):  # written after each m: a run cut short keeps what it measured
            if _common.recording(args):
                write({**out, "parts": {**out["parts"], part: g}, "partial": True}, args)
        return report

    if "m" in args.parts:
        out["parts"]["m"] = grid("m", args.n, args.ms, args, partial("m"))
    if "big" in args.parts:
        out["parts"]["big"] = grid("big", args.n_big, [args.m_big], args, partial("big"))
    if args.check:
        out["parts"]["check"] = check(args)
    out["load_end"] = _common.load_average()
    write(out, args)


if __name__ == "__main__":
    main()
