"""Leverage-score sub-sampling against uniform sub-sampling at equal m.

Protocol
--------
- Two data sets: CASP (``_common.load_casp``: 80/20 split, standardised features; the first
  ``--n`` training rows, the whole test set; γ = 1/median distance²) and a synthetic set with a
  very non-uniform input density: 95 % of the rows in a tight cluster ``N(0, 0.3²)`` and 5 % in
  a wide one ``N(4, 2²)`` (2-D), target ``sin(2 x₁) + cos(x₂)`` plus noise 0.1, test rows drawn
  from the same mixture; γ = 0.5.
- ``SketchedKRR(Gaussian(γ), sketch=S, lam=λ)`` with ``S = SubSampling(m)`` or
  ``LeverageScores(m)`` (uniform dictionary of 4m rows, the scores' λ from
  ``d_eff log d_eff = m``, defensive mixture with uniform weights), for each m in ``--ms`` and
  ``--seeds`` seeds; the model's λ = ``--lam``. Reported: test RMSE (mean ± std over seeds) and the fit's
  wall time (median; the leverage-score walk is included).
- With matplotlib, the accuracy-vs-m plot goes to ``results/leverage_vs_m.png`` (not with
  ``--quick`` or ``--no-record``).

Writes the ``leverage`` section of RESULTS.md and results/leverage.jsonl (not with ``--quick``
or ``--no-record``).

    python benchmarks/bench_leverage.py [--n 20000] [--ms 25 50 100 200 400] [--quick]
"""

from __future__ import annotations

import time

import numpy as np

from _common import RESULTS_DIR, casp_path, load_casp, parser, record, recording
from bench_casp import median_gamma


def synthetic(n, n_test, seed):
    rng = np.random.default_rng(seed)

    def draw(k):
        wide = rng.random(k) < 0.05
        X = np.where(wide[:, None], rng.normal(4.0, 2.0, size=(k, 2)),
                     rng.normal(0.0, 0.3, size=(k, 2)))
        return X, np.sin(2 * X[:, 0]) + np.cos(X[:, 1]) + 0.1 * rng.normal(size=k)

    X, y = draw(n)
    Xt, yt = draw(n_test)
    return X, y, Xt, yt


def run(name, X, y, Xt, yt, gamma, ms, seeds, lam):
    import distsketch as ds

    rows = []
    for m in ms:
        for label, make in (("SubSampling", lambda: ds.SubSampling(m)),
                            ("LeverageScores", lambda: ds.LeverageScores(m))):
            errs, secs = [], []
            for seed in seeds:
                t = time.perf_counter()
                model = ds.SketchedKRR(ds.Gaussian(gamma=gamma), sketch=make(), lam=lam,
                                       random_state=seed).fit(X, y)
                secs.append(time.perf_counter() - t)
                errs.append(float(np.sqrt(np.mean((model.predict(Xt) - yt) ** 2))))
            row = {"data": name, "m": m, "sketch": label, "rmse": float(np.mean(errs)),
                   "rmse_std": float(np.std(errs)), "seconds": float(np.median(secs))}
            rows.append(row)
            print(row, flush=True)
    return rows


def plot(rows) -> list[str]:
    """The accuracy-vs-m plot to results/leverage_vs_m.png (with matplotlib): its link line."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datas = list(dict.fromkeys(r["data"] for r in rows))
    fig, axes = plt.subplots(1, len(datas), figsize=(5 * len(datas), 3.5))
    for ax, data in zip(np.atleast_1d(axes), datas):
        for label in ("SubSampling", "LeverageScores"):
            sel = [r for r in rows if r["data"] == data and r["sketch"] == label]
            ax.errorbar([r["m"] for r in sel], [r["rmse"] for r in sel],
                        yerr=[r["rmse_std"] for r in sel], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("m")
        ax.set_ylabel("test RMSE")
        ax.set_title(data)
        ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "leverage_vs_m.png", dpi=110)
    return ["Plot: [results/leverage_vs_m.png](results/leverage_vs_m.png)."]


def main() -> None:
    ap = parser(__doc__, quick="n = 1 000, m = 25, 1 seed (CASP: 3 000 rows)")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--ms", type=int, nargs="+", default=[25, 50, 100, 200, 400])
    ap.add_argument("--lam", type=float, default=1e-6)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    ms = [25] if args.quick else args.ms
    seeds = range(1 if args.quick else args.seeds)
    n = 1000 if args.quick else args.n
    rows = run("synthetic", *synthetic(n, 5000, 0), 0.5, ms, seeds, args.lam)
    if casp_path().exists():
        X, y, Xt, yt = load_casp(0, 3000 if args.quick else None)
        X, y = X[:n], y[:n]
        gamma, _ = median_gamma(X, 0)
        rows += run("CASP", X, y, Xt, yt, gamma, ms, seeds, args.lam)
    lines = []
    for data in dict.fromkeys(r["data"] for r in rows):
        lines += [f"**{data}**: test RMSE (fit seconds)", "",
                  "| sketch | " + " | ".join(f"m = {m}" for m in ms) + " |",
                  "|---|" + "---|" * len(ms)]
        for label in ("SubSampling", "LeverageScores"):
            cells = [next(f"{r['rmse']:.4f} ± {r['rmse_std']:.4f} ({r['seconds']:.2f} s)"
                          for r in rows if r["data"] == data and r["m"] == m
                          and r["sketch"] == label) for m in ms]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    if recording(args):
        lines += plot(rows)
    md = (f"SketchedKRR with uniform sub-sampling against approximate ridge-leverage-score "
          f"sub-sampling (`LeverageScores(m)`: uniform dictionary of 4m rows, the scores' λ "
          f"from d_eff log d_eff = m, half uniform weights) at equal m; the model's "
          f"λ = {args.lam:g}; n = {n} training rows; mean ± std over {len(seeds)} seeds, "
          f"median fit time (the score walk included). Synthetic: 95 % of the rows in a tight "
          f"cluster, 5 % in a wide one.\n\n" + "\n".join(lines))
    record("leverage", md, {"rows": rows, "lam": args.lam, "n": n}, args=args)


if __name__ == "__main__":
    main()
