"""USPS image completion: test RBF loss of IOKR and SISOKR (reduced-rank IOKR paper, Table 3).

Predict the bottom 8 rows of a 16 × 16 USPS digit from its top 8 rows, decoding over a
candidate set of training bottom halves. The reduced-rank IOKR paper reports, for n = 1000
training images, a test RBF loss of 0.751 for IOKR; its kernel widths are not available
to us, so this script fixes its own protocol (below) and its figures are indicative only.

Protocol
--------
- Data: ``usps/usps.h5`` of the data folder (``_common.load_usps``): 7291 training
  and 2007 test images, row-major 16 × 16 in [0, 1]. ``x`` = first 128 pixels (top 8 rows),
  ``y`` = last 128 pixels (bottom 8 rows).
- Splits, from one seeded permutation of the 7291 training images (``--split-seed``):
  n = 1000 training images, 1000 other training images for validation; the test set is
  the 2007 test images, used only for the final figures.
- Output kernel = loss kernel: Gaussian, ``γ_y = 1 / median ‖y_i − y_j‖²`` over pairs of
  the n training bottom halves, fixed once before any fit (never tuned, never on test data).
  RBF loss ``‖ψ(y) − ψ(ŷ)‖² = 2 − 2 exp(−γ_y ‖y − ŷ‖²)`` (:func:`distsketch.metrics.kernel_loss`).
- Input kernel: Gaussian, ``γ_x = 1 / (c · median ‖x_i − x_j‖²)``, c ∈ {0.25, 0.5, 1, 2, 4}.
- Models: IOKR (no sketches) and SISOKR (``SubSampling(m_in)`` on inputs,
  ``SubSampling(m_out)`` on outputs; defaults m_in = 500, m_out = 200) over 5 sketch seeds.
- Selection: c and λ ∈ {1e-6, 1e-5, 1e-4, 1e-3, 1e-2} minimise the validation RBF loss after
  decoding with candidates = the n training bottom halves; one fit per c serves every λ
  (``lam=[...]`` + ``set_lam``). SISOKR is selected on its validation loss averaged over the
  seeds, then refitted per seed with the selected pair.
- Test: candidates = the n training bottom halves (the paper's setting) and, as a second
  column, all 7291 training bottom halves. References in the same run: 1-NN (copy the bottom
  of the training image whose top half is nearest) and the oracle (best candidate in the set).

Writes the ``usps`` section of RESULTS.md, results/usps.jsonl and results/usps_completion.png
(not with ``--quick`` or ``--no-record``).

    python benchmarks/bench_usps.py [--n 1000] [--seeds 5] [--m-in 500] [--m-out 200] [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import cdist, pdist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

PAPER_IOKR_LOSS = 0.751  # reduced-rank IOKR paper, Table 3, USPS completion, n = 1000
C_GRID = (0.25, 0.5, 1.0, 2.0, 4.0)
LAM_GRID = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
N_FIGURE = 10  # test digits shown in the PNG


def median_sq_dist(Z: np.ndarray) -> float:
    return float(np.median(pdist(Z, "sqeuclidean")))


def sq_err(Y: np.ndarray, P: np.ndarray) -> float:
    """Mean ‖y − ŷ‖² per image (pixels in [0, 1]): a loss that does not depend on γ_y."""
    return float(np.mean(np.sum((Y - P) ** 2, axis=1)))


def validation_losses(make_model, X, Y, Xv, Yv, ky, seeds) -> np.ndarray:
    """Validation RBF loss over the (c, λ) grid, mean over ``seeds``: shape (len(C_GRID), len(LAM_GRID))."""
    from distsketch.metrics import kernel_loss

    out = np.zeros((len(C_GRID), len(LAM_GRID)))
    for i, c in enumerate(C_GRID):
        for seed in seeds:
            model = make_model(c, list(LAM_GRID), seed).fit(X, Y)
            for j, lam in enumerate(LAM_GRID):
                out[i, j] += kernel_loss(ky, Yv, model.set_lam(lam).predict(Xv, candidates=Y))
    return out / len(seeds)


def evaluate(model, X, Y, Xt, Yt, Y_all, ky) -> dict:
    """Fit on (X, Y), decode the test set over both candidate sets; losses and wall times."""
    from distsketch.metrics import kernel_loss

    t = time.perf_counter()
    model.fit(X, Y)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    P = model.predict(Xt, candidates=Y)
    predict_s = time.perf_counter() - t
    t = time.perf_counter()
    P_all = model.predict(Xt, candidates=Y_all)
    predict_all_s = time.perf_counter() - t
    return {"loss": kernel_loss(ky, Yt, P), "loss_all": kernel_loss(ky, Yt, P_all),
            "sq_err": sq_err(Yt, P), "sq_err_all": sq_err(Yt, P_all), "fit_s": fit_s,
            "predict_s": predict_s, "predict_all_s": predict_all_s, "pred": P}


def reference_losses(X, Y, Xt, Yt, Y_all, X_all, gamma_y) -> dict:
    """1-NN on the top half, and the oracle (best candidate), for both candidate sets."""
    out = {}
    for tag, Xc, Yc in (("", X, Y), ("_all", X_all, Y_all)):
        nn = Yc[np.argmin(cdist(Xt, Xc, "sqeuclidean"), axis=1)]
        out["nn_loss" + tag] = float(np.mean(2 - 2 * np.exp(-gamma_y * np.sum((Yt - nn) ** 2, axis=1))))
        out["nn_sq_err" + tag] = sq_err(Yt, nn)
        d_best = cdist(Yt, Yc, "sqeuclidean").min(axis=1)
        out["oracle_loss" + tag] = float(np.mean(2 - 2 * np.exp(-gamma_y * d_best)))
        out["oracle_sq_err" + tag] = float(np.mean(d_best))
    return out


def figure(path: Path, Xt, Yt, P_iokr, P_sisokr, index, labels) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blank = np.full_like(Yt[:1], np.nan)
    rows = [("top half given", lambda i: np.concatenate([Xt[i], blank[0]])),
            ("true digit", lambda i: np.concatenate([Xt[i], Yt[i]])),
            ("IOKR", lambda i: np.concatenate([Xt[i], P_iokr[i]])),
            ("SISOKR (seed 0)", lambda i: np.concatenate([Xt[i], P_sisokr[i]]))]
    cmap = matplotlib.colormaps["gray_r"].copy()
    cmap.set_bad("#d9e6f2")  # the hidden bottom half
    fig, axes = plt.subplots(len(rows), len(index), figsize=(1.3 * len(index), 1.45 * len(rows)))
    for r, (name, image) in enumerate(rows):
        for c, i in enumerate(index):
            ax = axes[r, c]
            ax.imshow(np.ma.masked_invalid(image(i).reshape(16, 16)), cmap=cmap, vmin=0, vmax=1,
                      interpolation="nearest")
            ax.axhline(7.5, color="tab:red", lw=0.8)
            ax.set_xticks([]), ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, fontsize=8)
            if r == 0:
                ax.set_title(f"test #{i} ({labels[i]})", fontsize=7)
    fig.suptitle("USPS completion: bottom 8 rows (below the red line) decoded from the top 8", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = _common.parser(__doc__, quick="n = 300 training and 300 validation images, m_in = 100, "
                        "m_out = 50, 1 SISOKR seed")
    ap.add_argument("--n", type=int, default=1000, help="training images")
    ap.add_argument("--n-val", type=int, default=1000, help="validation images (other training images)")
    ap.add_argument("--seeds", type=int, default=5, help="sketch seeds of SISOKR")
    ap.add_argument("--m-in", type=int, default=500)
    ap.add_argument("--m-out", type=int, default=200)
    ap.add_argument("--split-seed", type=int, default=0)
    args = ap.parse_args()

    _common.require(_common.usps_path(), "USPS data")
    if args.quick:
        args.n, args.n_val, args.seeds, args.m_in, args.m_out = 300, 300, 1, 100, 50
    t_start = time.perf_counter()
    import distsketch as ds

    train, test, test_labels = _common.load_usps()
    perm = np.random.default_rng(args.split_seed).permutation(len(train))
    tr, va = perm[: args.n], perm[args.n : args.n + args.n_val]
    X, Y = train[tr, :128], train[tr, 128:]
    Xv, Yv = train[va, :128], train[va, 128:]
    Xt, Yt = test[:, :128], test[:, 128:]
    X_all, Y_all = train[:, :128], train[:, 128:]

    med_y, med_x = median_sq_dist(Y), median_sq_dist(X)
    gamma_y = 1.0 / med_y
    ky = ds.Gaussian(gamma_y)
    print(f"USPS: n = {len(X)} train, {len(Xv)} validation, {len(Xt)} test; "
          f"median sq. dist: outputs {med_y:.3f} (γ_y = {gamma_y:.5f}), inputs {med_x:.3f}", flush=True)
    gemm = _common.gemm_gflops()
    seeds = list(range(args.seeds))

    def iokr(c, lam, seed=None):
        return ds.SISOKR(ds.Gaussian(1.0 / (c * med_x)), ky, lam=lam)

    def sisokr(c, lam, seed):
        return ds.SISOKR(ds.Gaussian(1.0 / (c * med_x)), ky, lam=lam, random_state=seed,
                         input_sketch=ds.SubSampling(args.m_in), output_sketch=ds.SubSampling(args.m_out))

    results, selected = {}, {}
    for name, make, sel_seeds in (("IOKR", iokr, [None]), ("SISOKR", sisokr, seeds)):
        t = time.perf_counter()
        val = validation_losses(make, X, Y, Xv, Yv, ky, sel_seeds)
        i, j = np.unravel_index(np.argmin(val), val.shape)
        c, lam = C_GRID[i], LAM_GRID[j]
        selected[name] = {"c": c, "gamma_x": 1.0 / (c * med_x), "lam": lam,
                          "val_loss": float(val[i, j]), "val_grid": val.tolist(),
                          "selection_s": time.perf_counter() - t}
        print(f"{name:6s} selection ({time.perf_counter() - t:.1f} s): c = {c:g} (γ_x = {1 / (c * med_x):.5f}), "
              f"λ = {lam:g}, validation loss {val[i, j]:.4f}", flush=True)
        runs = [evaluate(make(c, lam, s), X, Y, Xt, Yt, Y_all, ky) for s in sel_seeds]
        results[name] = runs
        for s, r in zip(sel_seeds, runs):
            print(f"{name:6s} {'exact' if s is None else f'seed {s}'}: test loss {r['loss']:.4f} (all 7291 candidates {r['loss_all']:.4f}), "
                  f"‖y−ŷ‖² {r['sq_err']:.2f}; fit {r['fit_s']:.2f} s, predict {r['predict_s']:.2f} s "
                  f"/ {r['predict_all_s']:.2f} s", flush=True)

    ref = reference_losses(X, Y, Xt, Yt, Y_all, X_all, gamma_y)
    print(f"1-NN on top halves: test loss {ref['nn_loss']:.4f} (all {ref['nn_loss_all']:.4f}); "
          f"oracle candidate: {ref['oracle_loss']:.4f} (all {ref['oracle_loss_all']:.4f})")

    def summary(runs):
        keys = ("loss", "loss_all", "sq_err", "sq_err_all", "fit_s", "predict_s", "predict_all_s")
        return {k: {"mean": float(np.mean([r[k] for r in runs])),
                    "std": float(np.std([r[k] for r in runs])), "values": [r[k] for r in runs]}
                for k in keys}

    summ = {name: summary(runs) for name, runs in results.items()}
    for name, s in summ.items():
        print(f"{name:6s} test RBF loss {s['loss']['mean']:.4f} ± {s['loss']['std']:.4f} "
              f"(7291 candidates: {s['loss_all']['mean']:.4f} ± {s['loss_all']['std']:.4f}); "
              f"fit {s['fit_s']['mean']:.2f} s, predict {s['predict_s']['mean']:.2f} s")
    print(f"paper (reduced-rank IOKR, Table 3): IOKR {PAPER_IOKR_LOSS} (its loss-kernel width unknown here)")

    png = _common.RESULTS_DIR / "usps_completion.png"
    index = np.random.default_rng(args.split_seed).choice(len(Xt), N_FIGURE, replace=False)
    index = index[np.argsort(test_labels[index], kind="stable")]
    if _common.recording(args):
        figure(png, Xt, Yt, results["IOKR"][0]["pred"], results["SISOKR"][0]["pred"], index,
               test_labels)
        print(f"figure: {png}")
    total = time.perf_counter() - t_start
    print(f"total {total:.0f} s")

    def cell(s, k, digits=4):
        return f"{s[k]['mean']:.{digits}f} ± {s[k]['std']:.{digits}f}" if s[k]["std"] > 0 else f"{s[k]['mean']:.{digits}f}"

    sI, sS = selected["IOKR"], selected["SISOKR"]
    rows = []
    for name, label in (("IOKR", "IOKR (exact)"),
                        ("SISOKR", f"SISOKR, SubSampling({args.m_in}) in / SubSampling({args.m_out}) out, {args.seeds} seeds")):
        s, h = summ[name], selected[name]
        rows.append(f"| {label} | {h['c']:g} | {h['lam']:g} | {h['val_loss']:.4f} | {cell(s, 'loss')} | "
                    f"{cell(s, 'loss_all')} | {cell(s, 'sq_err', 2)} | {cell(s, 'fit_s', 2)} | "
                    f"{cell(s, 'predict_s', 2)} | {cell(s, 'predict_all_s', 2)} |")
    rows.append(f"| 1-NN on top halves (reference) | – | – | – | {ref['nn_loss']:.4f} | {ref['nn_loss_all']:.4f} | "
                f"{ref['nn_sq_err']:.2f} | – | – | – |")
    rows.append(f"| oracle: best candidate (lower bound of decoding) | – | – | – | {ref['oracle_loss']:.4f} | "
                f"{ref['oracle_loss_all']:.4f} | {ref['oracle_sq_err']:.2f} | – | – | – |")
    rows.append(f"| paper, reduced-rank IOKR Table 3: IOKR | – | – | – | {PAPER_IOKR_LOSS} | – | – | – | – | – |")
    md = (
        "USPS image completion: bottom 8 rows of a 16 × 16 digit decoded from the top 8 rows, Gaussian "
        f"kernels, pre-image over training bottom halves. n = {args.n} training images drawn at random "
        f"(seed {args.split_seed}) from the 7291, {args.n_val} other training images for validation, "
        f"{len(Xt)} test images. Loss kernel = output kernel, Gaussian with γ_y = 1 / median ‖y_i − y_j‖² "
        f"of the training bottom halves = 1 / {med_y:.3f} = {gamma_y:.5f}, fixed before any fit; RBF loss "
        "2 − 2 exp(−γ_y ‖y − ŷ‖²) (range [0, 2]). Input kernel γ_x = 1 / (c · median ‖x_i − x_j‖²), "
        f"median = {med_x:.3f}. c ∈ {{{', '.join(f'{c:g}' for c in C_GRID)}}} and "
        f"λ ∈ {{{', '.join(f'{v:g}' for v in LAM_GRID)}}} selected by validation RBF loss (candidates = the "
        "training bottom halves; SISOKR: mean over its seeds); the test set is used only for the figures "
        f"below. Times on this machine, one process, BLAS 1 thread (numpy GEMM {gemm:.1f} GFLOP/s in the "
        f"same run); predict = decoding the {len(Xt)} test images. Total run {total:.0f} s.\n\n"
        "| model | c | λ | val. loss | test RBF loss (1000 cand.) | test RBF loss (7291 cand.) | "
        "‖y − ŷ‖² (1000 cand.) | fit (s) | predict, 1000 cand. (s) | predict, 7291 cand. (s) |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) +
        f"\n\nIndicative only: the paper's loss-kernel (and input-kernel) widths are not available here, and "
        f"the RBF loss depends strongly on γ_y, so {PAPER_IOKR_LOSS} is not directly comparable with the "
        "figures above; the comparison that holds is IOKR vs SISOKR vs the references within this run "
        "(‖y − ŷ‖² is the width-free squared pixel error per image). "
        f"Selected γ_x: IOKR {sI['gamma_x']:.5f}, SISOKR {sS['gamma_x']:.5f}. "
        "Examples: `results/usps_completion.png` (rows: top half given, true digit, IOKR, SISOKR seed 0)."
    )
    data = {"protocol": {"n": args.n, "n_val": args.n_val, "n_test": len(Xt), "split_seed": args.split_seed,
                         "gamma_y": gamma_y, "median_sq_dist_y": med_y, "median_sq_dist_x": med_x,
                         "c_grid": C_GRID, "lam_grid": LAM_GRID, "m_in": args.m_in, "m_out": args.m_out,
                         "sketch": "SubSampling", "seeds": seeds},
            "selected": selected, "summary": summ, "references": ref,
            "paper_iokr_loss": PAPER_IOKR_LOSS, "gemm_gflops": gemm, "total_s": total,
            "figure": str(png.relative_to(_common.HERE))}
    _common.record("usps", md, data, args=args)


if __name__ == "__main__":
    main()
