"""The scripts of ``examples/`` run end to end in their ``--quick`` setting, and the README's
examples (Python and command line) run as written.

Each script is imported by path and its ``main(argv)`` called in-process; the test checks
the exit code, the printed results table, the figure where the script writes one, and
that the printed numbers are sane: finite and better than a trivial baseline computed
here, independently of the script. Real-data scripts skip when their data set is absent.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA, data_dir

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NUMBER = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"


def load_example(name: str):
    """Import ``examples/<name>.py`` as a module (the folder is not a package; ``name`` may
    name a sub-folder: ``"cli/make_data"``)."""
    spec = importlib.util.spec_from_file_location(f"_example_{name.replace('/', '_')}",
                                                  EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(name: str, argv: list[str], capsys) -> str:
    rc = load_example(name).main(argv)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "skipped:" not in out
    return out


def grab(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"pattern {pattern!r} not found in output:\n{text}"
    value = float(match.group(1))
    assert math.isfinite(value), f"{pattern!r}: {value}"
    return value


def check_png(path: Path) -> None:
    assert path.is_file(), f"{path} was not written"
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > 10_000  # a rendered figure, not an empty canvas


@pytest.mark.parametrize("name", ["bibtex_multilabel", "usps_completion", "casp_regression"])
def test_skips_cleanly_without_data(name, tmp_path, capsys):
    rc = load_example(name).main(["--quick", "--data", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith("skipped:"), out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_synthetic_least_squares(tmp_path, capsys):
    mod = load_example("synthetic_least_squares")
    out = run("synthetic_least_squares", ["--quick", "--output", str(tmp_path)], capsys)
    check_png(tmp_path / "synthetic_least_squares.png")

    # --quick: d = 50; the regression function f(x) = c x with c² = 0.18 and
    # Cov(x) = diag(k^-1.5), so predicting 0 (≈ the training mean) has excess risk E‖f‖².
    k = np.arange(1, 51)
    signal = 0.18 * np.sum(k**-1.5)
    noise = np.sum(0.2 * k**-0.1 - 0.18 * k**-1.5)
    assert mod.spectra(50)[1].sum() == pytest.approx(noise)

    rows = {}
    for line in out.splitlines():
        match = re.match(rf"^(IOKR|SIOKR|ISOKR|SISOKR)\s+(\S+)\s+(\d+)\s+({NUMBER})\s+({NUMBER})\s+"
                         rf"({NUMBER})\s+({NUMBER})\s*$", line)
        if match:
            name, m, _, lam, mse, excess, fit_s = match.groups()
            rows[(name, m)] = {"lam": float(lam), "mse": float(mse), "excess": float(excess),
                               "fit_s": float(fit_s)}
    expected = {("IOKR", "—")} | {(n, m) for n in ("SIOKR", "ISOKR", "SISOKR") for m in ("10", "25")}
    assert set(rows) == expected, out
    for key, r in rows.items():
        assert all(math.isfinite(v) for v in r.values()), key
        assert r["fit_s"] > 0
        assert r["excess"] < signal, (key, r, signal)  # better than predicting the mean
        # test MSE ≈ noise + excess (1000 test points: a few % of sampling error)
        assert r["mse"] == pytest.approx(noise + r["excess"], rel=0.05), key
    iokr = rows[("IOKR", "—")]["excess"]
    assert iokr < 0.5 * signal
    # the example's point: the fast-decaying input side tolerates a small sketch,
    # the slow-decaying output side does not
    for m in ("10", "25"):
        assert rows[("SIOKR", m)]["excess"] < rows[("ISOKR", m)]["excess"]
        assert rows[("SIOKR", m)]["excess"] < rows[("SISOKR", m)]["excess"]
        assert rows[("SIOKR", m)]["excess"] >= 0.99 * iokr
    for name in ("SIOKR", "ISOKR", "SISOKR"):  # larger sketches get closer to IOKR
        assert rows[(name, "25")]["excess"] < rows[(name, "10")]["excess"]


@pytest.mark.slow
def test_casp_regression(tmp_path, capsys):
    path = data_dir("casp") / "CASP.csv"
    out = run("casp_regression", ["--quick", "--data", str(DATA)], capsys)
    rmsd = np.loadtxt(path, delimiter=",", usecols=0)
    trivial = float(np.std(rmsd))  # RMSE of predicting the mean, over the whole data set
    printed_trivial = grab(rf"predict the training mean: test RMSE ({NUMBER})", out)
    assert printed_trivial == pytest.approx(trivial, rel=0.05)
    results = {}
    for key, label in [("sketched", r"SketchedKRR SubSampling\(200\)"),
                       ("exact", r"exact KRR \S+"),
                       ("nystroem", r"sklearn Nystroem\(200\) \+ Ridge\(nλ\)")]:
        match = re.search(rf"^{label}\s+(\d+)\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})"
                          rf"\s+({NUMBER})\s*$", out, flags=re.MULTILINE)
        assert match, f"{key} row missing:\n{out}"
        n_fit, lam, val, test, fit_s, path_s = (float(g) for g in match.groups())
        assert all(math.isfinite(v) for v in (lam, val, test, fit_s, path_s))
        assert 1e-9 <= lam <= 1e-2 and 0 < fit_s <= path_s
        assert test < 0.9 * trivial, (key, test, trivial)
        results[key] = (n_fit, test)
    assert results["exact"][0] == 2000 and results["sketched"][0] == 2400
    # SketchedKRR with a sub-sampling sketch and Nystroem + Ridge(alpha = n λ) are the same
    # estimator on different landmark draws: their errors must be close
    assert results["sketched"][1] == pytest.approx(results["nystroem"][1], rel=0.1)


@pytest.mark.slow
def test_bibtex_multilabel(capsys):
    folder = data_dir("bibtex")
    out = run("bibtex_multilabel", ["--quick", "--data", str(DATA)], capsys)
    from distsketch.io.arff import load_arff
    from distsketch.metrics import f1_samples

    _, Y = load_arff(folder / "bibtex-train.arff", n_targets=159)  # Y is always dense
    _, Yte = load_arff(folder / "bibtex-test.arff", n_targets=159)
    rows, counts = np.unique(Y, axis=0, return_counts=True)
    constant = np.broadcast_to(rows[np.argmax(counts)], Yte.shape)  # most frequent label set
    trivial = f1_samples(Yte, constant)
    for model in ("IOKR", "SISOKR"):
        f1 = grab(rf"(?m)^{model}: F1 ({NUMBER})", out)
        hamming = grab(rf"{model}: F1 {NUMBER}, Hamming loss ({NUMBER})", out)
        assert 0.0 <= hamming <= 1.0
        assert trivial < f1 <= 1.0, (model, f1, trivial)


@pytest.mark.slow
def test_usps_completion(tmp_path, capsys):
    path = data_dir("usps") / "usps.h5"
    out = run("usps_completion", ["--quick", "--output", str(tmp_path), "--data", str(DATA)], capsys)
    check_png(tmp_path / "usps_completion.png")
    from distsketch.io.arrays import load_hdf5

    train, _ = load_hdf5(path, x_key="train/data", y_key="train/target")
    test, _ = load_hdf5(path, x_key="test/data", y_key="test/target")
    Y, Yt = np.asarray(train)[:, 128:].astype(float), np.asarray(test)[:500, 128:].astype(float)
    # chance level of a decoder: a random training bottom half for each test digit
    rand = Y[np.random.default_rng(0).integers(len(Y), size=len(Yt))]
    chance = float(np.mean(np.sum((Yt - rand) ** 2, axis=1)))
    for model in ("IOKR", "SISOKR", "1-NN on top halves"):
        loss = grab(rf"{re.escape(model)}: test RBF loss ({NUMBER})", out)
        err = grab(rf"{re.escape(model)}: test RBF loss [^,]*, ‖y−ŷ‖² ({NUMBER})", out)
        assert 0.0 <= loss < 2.0
        assert err < 0.8 * chance, (model, err, chance)


# --------------------------------------------------------------------------- the README's examples


@pytest.mark.slow
def test_command_line_example(tmp_path, capsys):
    """examples/cli as the README runs it, in a copy of the folder: the data script, then
    ``fit`` (λ × γ by cross-validation), ``evaluate`` and ``predict``. The chosen model beats
    predicting the training mean on the test rows by far, and the predictions written are the
    ones ``evaluate`` scored."""
    from distsketch.cli.commands import main as cli

    config = tmp_path / "regression.toml"
    shutil.copy(EXAMPLES / "cli" / "regression.toml", config)
    assert load_example("cli/make_data").main(["--output", str(tmp_path)]) == 0
    train = np.loadtxt(tmp_path / "train.csv", delimiter=",", skiprows=1)
    test = np.loadtxt(tmp_path / "test.csv", delimiter=",", skiprows=1)
    assert train.shape == (2000, 6) and test.shape == (500, 6)
    capsys.readouterr()

    assert cli(["-q", "fit", str(config)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^chosen: gamma = \S+, lam = \S+$", out, flags=re.MULTILINE), out
    store = tmp_path / "regression.zarr"
    assert cli(["-q", "evaluate", str(store), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    trivial = float(np.sqrt(np.mean((test[:, -1] - train[:, -1].mean()) ** 2)))
    assert scores["rmse"] < 0.5 * trivial, (scores, trivial)

    assert cli(["-q", "predict", str(store), "--input", str(tmp_path / "test.csv"),
                "--output", str(tmp_path / "predictions.csv")]) == 0
    pred = np.loadtxt(tmp_path / "predictions.csv", delimiter=",", skiprows=1)
    assert pred.shape == (500,)
    rmse = float(np.sqrt(np.mean((pred - test[:, -1]) ** 2)))
    assert rmse == pytest.approx(scores["rmse"], rel=1e-6)


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path):
    """The README's Python example, run as written in a fresh interpreter with warnings as
    errors (its store lands in a temporary folder): R² near 1 on its smooth target, and
    decoded label sets of zeros and ones."""
    readme = (EXAMPLES.parent / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "ds.SketchedKRR" in b]
    assert len(blocks) == 1, "the README has no Python example fitting SketchedKRR"
    check = ("\nimport json\nprint(json.dumps({'r2': float(krr.score(X[:2000], y[:2000])), "
             "'labels': sorted(set(sisokr.predict(X[:50]).ravel().tolist()))}))\n")
    out = subprocess.run([sys.executable, "-W", "error", "-c", blocks[0] + check], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["r2"] > 0.9, result
    assert set(result["labels"]) <= {0.0, 1.0} and result["labels"], result
    assert (tmp_path / "krr.zarr").is_dir()
