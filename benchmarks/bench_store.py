"""What the store's guarantees cost: fingerprints, checksums, reusing a complete pass.

The fit of ``bench_pass.py`` (``SketchedKRR(Gaussian, SubSampling(1000))``, d = 20,
n = 200 000 rows in memory, store written): a fresh fit (each block's input rows fingerprinted
with BLAKE2b, its C block checksummed with CRC-32, both recorded); fitting again on the complete
store (the data read once and every block's fingerprint checked, the sums' checksums checked, no
kernel evaluation); and the same fit with ``store=None`` (nothing hashed). Each a fresh process,
interleaved, medians of 3. The hashing rates of this machine are measured in the same run.

Writes the ``store`` section of ENGINE.md and results/store.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_store.py [--n 200000] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

D, M = 20, 1000


def child(mode: str, n: int, store: str) -> None:
    import distsketch as ds
    from bench_pass import GAMMA, LAM, data

    X, y = data(n)
    times = _common.watch_pass()
    est = ds.SketchedKRR(ds.Gaussian(GAMMA), sketch=ds.SubSampling(M), lam=LAM,
                         random_state=0, store=None if mode == "memory" else store)
    os.sync()
    t = time.perf_counter()
    est.fit(X, y)
    fit = time.perf_counter() - t
    print(json.dumps({"fit": fit, "pass": times.seconds[-1] if times.seconds else None}))


def rates(repeats: int = 5) -> dict:
    """Single-thread BLAKE2b-64 and CRC-32 rates on a 16 MiB buffer (GB/s)."""
    buf = memoryview(np.random.default_rng(0).standard_normal(2 * 2**20)).cast("B")
    out = {}
    for name, f in (("blake2b", lambda: hashlib.blake2b(buf, digest_size=8).digest()),
                    ("crc32", lambda: zlib.crc32(buf))):
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        out[name] = len(buf) / np.median(times) / 1e9
    return out


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 20 000, 1 repeat", repeats=3,
                        repeats_help="fresh processes per kind of fit (medians reported)")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return
    if args.quick:
        args.n, args.repeats = 20_000, 1
    root = Path(__file__).resolve().parent.parent / ".benchmarks-tmp"
    root.mkdir(exist_ok=True)
    hashing = rates()
    gemm = _common.gemm_gflops()
    runs: dict = {"fresh": [], "reuse": [], "memory": []}
    for r in range(args.repeats):
        work = Path(tempfile.mkdtemp(dir=root))
        store = str(work / "fit.zarr")
        try:
            order = ["memory", "fresh"] if r % 2 == 0 else ["fresh", "memory"]
            for mode in order:
                runs[mode].append(_common.run_child([__file__, "--child", mode, str(args.n), store]))
            runs["reuse"].append(_common.run_child([__file__, "--child", "reuse", str(args.n),
                                                    store]))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"repeat {r + 1}: " + ", ".join(f"{k} {v[-1]['fit']:.2f} s" for k, v in runs.items()),
              flush=True)
    med = {k: float(np.median([o["fit"] for o in v])) for k, v in runs.items()}
    med_pass = {k: float(np.median([o["pass"] for o in v])) for k in ("fresh", "memory")
                for v in [runs[k]]}
    x_bytes = args.n * (D + 1) * 8  # the input rows and targets fingerprinted
    c_bytes = args.n * M * 4  # the float32 C blocks checksummed
    hash_s = x_bytes / (hashing["blake2b"] * 1e9) + c_bytes / (hashing["crc32"] * 1e9)
    md = f"""
`SketchedKRR(Gaussian, SubSampling({M}))`, d = {D}, n = {args.n:,} rows in memory, default options;
each fit in a fresh process, medians of {args.repeats} (fresh and `store=None` interleaved).
numpy GEMM {gemm:.1f} GFLOP/s; single-thread hashing rates in this run: BLAKE2b-64
{hashing['blake2b']:.2f} GB/s, CRC-32 {hashing['crc32']:.2f} GB/s.

| fit | time (s) | what it does |
|---|---:|---|
| fresh, store written | {med['fresh']:.2f} (pass {med_pass['fresh']:.2f}) | every block computed and written; its {D + 1} input columns fingerprinted, its C block (float32) checksummed, both recorded |
| again on the complete store | {med['reuse']:.2f} | the data read once, each block's fingerprint checked, the sums' checksums checked; no kernel evaluated |
| `store=None` | {med['memory']:.2f} (pass {med_pass['memory']:.2f}) | nothing written, nothing hashed |

Hashing in a fresh fit: {x_bytes / 2**20:.0f} MiB of input rows (BLAKE2b) and {c_bytes / 2**20:.0f} MiB
of C (CRC-32, in the I/O thread beside the sums) = {hash_s:.2f} s of one core at the rates above,
spread over the pass's tasks. Reusing a complete pass costs {med['reuse'] / med['fresh']:.2f}× a fresh
fit here.
"""
    _common.record("store", md, {"n": args.n, "median_fit": med, "median_pass": med_pass,
                                 "hashing_gbs": hashing, "gemm_gflops": gemm,
                                 "runs": runs}, args=args)


if __name__ == "__main__":
    main()
