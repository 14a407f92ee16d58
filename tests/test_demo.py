"""The demo job: digit completion, IOKR vs SISOKR, report, stores and figure."""

import io
import math
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

import distsketch as ds  # noqa: E402
from distsketch.cli.demo import N_TRAIN, run_demo  # noqa: E402
from distsketch.metrics import kernel_loss  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    stream = io.StringIO()
    result = run_demo(out, progress=False, stream=stream)
    return out, result, stream.getvalue()


def _constant_baseline_loss(seed: int, gamma_y: float) -> float:
    """RBF loss of predicting, for every test digit, the training bottom half nearest to
    the mean training bottom half (same split as the demo)."""
    from sklearn.datasets import load_digits

    images = load_digits().data / 16.0
    perm = np.random.default_rng(seed).permutation(len(images))
    n_val = len(images) - N_TRAIN - 397
    Y = images[perm[:N_TRAIN], 32:]
    Yt = images[perm[N_TRAIN + n_val:], 32:]
    nearest = Y[np.argmin(((Y - Y.mean(axis=0)) ** 2).sum(axis=1))]
    return kernel_loss(ds.Gaussian(gamma_y), Yt, np.tile(nearest, (len(Yt), 1)))


@pytest.mark.slow
def test_figure_is_a_png(demo):
    import matplotlib.image

    out, result, _ = demo
    png = out / "digits_completion.png"
    assert result["figure"] == str(png)
    assert png.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 300


@pytest.mark.slow
def test_stores_written(demo):
    out, result, _ = demo
    for name, store in (("IOKR", "iokr.zarr"), ("SISOKR", "sisokr.zarr")):
        assert (out / store).is_dir()
        assert (out / store / "zarr.json").is_file()
        assert result["models"][name]["store"] == str(out / store)
        assert result["models"][name]["pass_reused"] is False


@pytest.mark.slow
def test_losses_beat_constant_baseline(demo):
    _, result, _ = demo
    assert result["n_train"] + result["n_validation"] + result["n_test"] == 1797
    baseline = _constant_baseline_loss(0, result["gamma_y"])
    for name in ("IOKR", "SISOKR"):
        r = result["models"][name]
        for key in ("loss", "validation_loss", "pixel_mse", "fit_s", "predict_s"):
            assert math.isfinite(r[key]), (name, key)
        assert 0.0 <= r["loss"] <= 2.0
        assert 0.0 <= r["pixel_mse"] <= 1.0
        assert r["loss"] < 0.75 * baseline, (name, r["loss"], baseline)
        assert r["lam"] in (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


@pytest.mark.slow
def test_report_mentions_models_and_loss(demo):
    _, result, text = demo
    assert "IOKR" in text and "SISOKR" in text
    assert "loss" in text.lower()
    assert result["figure"] in text
    assert f"{result['models']['IOKR']['loss']:.4f}" in text


@pytest.mark.slow
def test_rerun_reuses_stores_and_reseeding_replaces_them(tmp_path):
    first = run_demo(tmp_path, progress=False, stream=io.StringIO())
    stream = io.StringIO()
    again = run_demo(tmp_path, progress=False, stream=stream)
    assert all(again["models"][m]["pass_reused"] for m in ("IOKR", "SISOKR"))
    assert "reused" in stream.getvalue()
    for m in ("IOKR", "SISOKR"):
        assert again["models"][m]["loss"] == first["models"][m]["loss"]
    other = run_demo(tmp_path, seed=1, progress=False, stream=io.StringIO())
    assert not any(other["models"][m]["pass_reused"] for m in ("IOKR", "SISOKR"))


@pytest.mark.slow
def test_progress_bar_drawn(tmp_path, capsys):
    stream = io.StringIO()
    run_demo(tmp_path, progress=True, stream=stream)
    captured = capsys.readouterr()
    assert "[####" in captured.out + captured.err
    assert "[####" not in stream.getvalue()  # the bar is dask's, the report is ours


@pytest.mark.parametrize("missing", ["matplotlib", "sklearn"])
def test_missing_extra_names_the_install_command(tmp_path, monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # makes `import missing` fail
    with pytest.raises(ImportError, match=r'pip install "distsketch\[demo\]"'):
        run_demo(tmp_path / "out", progress=False, stream=io.StringIO())
    assert not (tmp_path / "out").exists()  # failed before doing anything


def test_demo_figure_shows_each_digit_class_once():
    from distsketch.cli.demo import N_FIGURE, _figure_index

    labels = np.array([5, 0, 5, 1, 2, 5, 3, 4, 6, 7, 8, 9, 5, 0])
    shown = labels[_figure_index(labels, N_FIGURE)]
    assert list(shown) == list(range(10))
