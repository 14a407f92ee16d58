"""Decoding at scale: 1 000 queries against 2 000 000 binary fingerprint candidates.

Synthetic chemoinformatics-like task: inputs x ∈ R^64, outputs 1024-bit fingerprints generated
from x through a random linear map and a threshold (≈ 10 % of bits set), GaussianTanimoto
output kernel, SISOKR with SubSampling(500) in / SubSampling(256) out, n = 5 000 training pairs.
The true fingerprints of the 1 000 test queries are hidden among 2 000 000 candidates (the
rest drawn from the same distribution) in a zarr CandidateStore on disk.

Each measurement runs in a fresh process (peak RSS is that process's own):

- ``zarr``: candidates read from a zarr array, features computed on the fly (one decode);
- ``store``: a CandidateStore — first decode computes and caches the candidate features,
  the second reads them (scoring only).

Reported: wall time, scores per second, the GEMM-equivalent rate ``2 r_Y`` flops per score
next to numpy's float64 GEMM rate measured in the same run, peak RSS (target < 2 GiB), and
top-1 / top-10 accuracy of recovering the hidden true fingerprint.

Writes the ``decode`` section of RESULTS.md and results/decode.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_decode.py [--candidates 2000000] [--queries 1000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

D_X, D_Y, N_TRAIN, M_IN, M_OUT = 64, 1024, 5_000, 500, 256
CHUNK = 16_384


def _fingerprints(rng: np.random.Generator, X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Bits set where a noisy random projection of x exceeds the 90th percentile level."""
    Z = X @ W + 0.5 * rng.standard_normal((len(X), D_Y))
    return Z > 1.2816 * np.sqrt(1.0 + 0.25)  # P(N(0, 1.25) > t) = 10 %


def make_problem(root: Path, n_candidates: int, n_queries: int) -> None:
    """Training pairs, test queries, and a CandidateStore with the true answers hidden inside."""
    import zarr

    import distsketch as ds

    rng = np.random.default_rng(0)
    W = rng.standard_normal((D_X, D_Y)) / np.sqrt(D_X)
    Xtr = rng.standard_normal((N_TRAIN, D_X))
    Ytr = _fingerprints(rng, Xtr, W)
    Xte = rng.standard_normal((n_queries, D_X))
    Yte = _fingerprints(rng, Xte, W)
    where = np.sort(rng.choice(n_candidates, size=n_queries, replace=False))
    perm = rng.permutation(n_queries)  # query i's true fingerprint sits at where[perm[i]]
    np.savez(root / "problem.npz", Xtr=Xtr, Ytr=Ytr, Xte=Xte, true_index=where[perm])
    raw = zarr.open_array(str(root / "raw.zarr"), mode="w", shape=(n_candidates, D_Y),
                          chunks=(CHUNK, D_Y), dtype=bool)
    for i, s in enumerate(range(0, n_candidates, CHUNK)):
        block_rng = np.random.default_rng([1, i])
        b = min(CHUNK, n_candidates - s)
        block = _fingerprints(block_rng, block_rng.standard_normal((b, D_X)), W)
        inside = (where >= s) & (where < s + b)
        block[where[inside] - s] = Yte[np.argsort(perm)][inside]
        raw[s : s + b] = block
    ds.CandidateStore.create(root / "store", raw, chunk_rows=CHUNK)


def child(root: str, mode: str, k: int) -> None:
    import zarr

    import distsketch as ds

    root = Path(root)
    p = np.load(root / "problem.npz")
    t = time.perf_counter()
    model = ds.SISOKR(ds.Gaussian(gamma=1.0 / (2 * D_X)), ds.GaussianTanimoto(gamma=1.0),
                      input_sketch=ds.SubSampling(M_IN), output_sketch=ds.SubSampling(M_OUT),
                      lam=1e-4, random_state=0).fit(p["Xtr"], p["Ytr"])
    fit_s = time.perf_counter() - t
    r_y = model.output_projection_.shape[1]
    out = {"mode": mode, "fit_s": fit_s, "r_y": r_y}
    if mode == "zarr":
        cands = zarr.open_array(str(root / "raw.zarr"), mode="r")
        t = time.perf_counter()
        idx, _ = model.predict_topk(p["Xte"], cands, k=k)
        out["decode_s"] = time.perf_counter() - t
    else:
        store = ds.CandidateStore.open(root / "store")
        t = time.perf_counter()
        model.predict_topk(p["Xte"], store, k=k)
        out["features_and_decode_s"] = time.perf_counter() - t
        t = time.perf_counter()
        idx, _ = model.predict_topk(p["Xte"], store, k=k)
        out["decode_s"] = time.perf_counter() - t
    truth = p["true_index"]
    out["top1"] = float(np.mean(idx[:, 0] == truth))
    out["top10"] = float(np.mean((idx == truth[:, None]).any(axis=1)))
    out["peak_rss_mib"] = _common.peak_rss_mib()
    print(json.dumps(out))


def main() -> None:
    ap = _common.parser(__doc__, quick="20 000 candidates, 50 queries")
    ap.add_argument("--candidates", type=int, default=2_000_000)
    ap.add_argument("--queries", type=int, default=1_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], args.k)
    if args.quick:
        args.candidates, args.queries = 20_000, 50
    root = Path(tempfile.mkdtemp(prefix="distsketch-decode-"))
    try:
        t = time.perf_counter()
        make_problem(root, args.candidates, args.queries)
        print(f"data: {args.candidates:,} candidates × {D_Y} bits written in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
        gemm_before = _common.gemm_gflops()
        runs = {mode: _common.run_child([__file__, "--child", str(root), mode, "--k", str(args.k)])
                for mode in ("zarr", "store")}
        gemm = float(np.median([gemm_before, _common.gemm_gflops()]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n_scores = args.candidates * args.queries
    rows = []
    for mode, r in runs.items():
        rate = n_scores / r["decode_s"]
        flops = 2 * r["r_y"] * rate / 1e9
        rows.append({**r, "scores_per_s": rate, "gemm_equiv_gflops": flops, "ratio_to_gemm": flops / gemm})
        print(f"{mode:>5}: decode {r['decode_s']:6.1f} s, {rate / 1e6:7.1f} M scores/s = "
              f"{flops:5.1f} GFLOP/s ({flops / gemm:.0%} of GEMM {gemm:.1f}), peak RSS "
              f"{r['peak_rss_mib']:.0f} MiB, top-1 {r['top1']:.3f}, top-10 {r['top10']:.3f}"
              + (f", first call with features {r['features_and_decode_s']:.1f} s"
                 if "features_and_decode_s" in r else ""), flush=True)
    worst = max(r["peak_rss_mib"] for r in rows)
    verdict = "PASS" if worst < 2048 else "FAIL"
    table = "\n".join(
        f"| {r['mode']} | {r.get('features_and_decode_s', float('nan')):.1f} | {r['decode_s']:.1f} | "
        f"{r['scores_per_s'] / 1e6:.1f} | {r['gemm_equiv_gflops']:.1f} | {r['ratio_to_gemm']:.0%} | "
        f"{r['peak_rss_mib']:.0f} | {r['top1']:.3f} | {r['top10']:.3f} |" for r in rows)
    md = (f"SISOKR (GaussianTanimoto output kernel, SubSampling({M_IN}) in / SubSampling({M_OUT}) out, "
          f"r_Y = {rows[0]['r_y']}, n = {N_TRAIN:,} training pairs), {args.queries:,} queries × "
          f"{args.candidates:,} candidate fingerprints of {D_Y} bits stored in zarr; top-{args.k}; "
          f"threaded scheduler; each row a fresh process. numpy float64 GEMM in the same run: "
          f"{gemm:.1f} GFLOP/s (median of before/after). `zarr`: features computed on the fly; "
          f"`store`: CandidateStore, first call computes and caches features, second reads them.\n\n"
          "| candidates from | first call incl. features (s) | decode (s) | M scores/s | "
          "GFLOP/s (2 r_Y per score) | of GEMM | peak RSS (MiB) | top-1 | top-10 |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" + table +
          f"\n\nPeak RSS target < 2 GiB: **{verdict}** (max {worst:.0f} MiB). Top-k: fraction of "
          f"queries whose hidden true fingerprint is ranked first / in the top 10.")
    _common.record("decode", md, {"rows": rows, "gemm_gflops": gemm, "n_scores": n_scores},
                   args=args)


if __name__ == "__main__":
    main()
