"""The distsketch command line: configs, errors, fit/predict/evaluate/info, a real dask cluster."""

import os
import subprocess
import sys

import numpy as np
import pytest

import distsketch as ds
from clusterhelpers import dask_processes
from confighelpers import CONFIG, toy_data
from distsketch.cli.commands import main
from distsketch.cli.config import ConfigError, load_config


@pytest.fixture
def workdir(tmp_path):
    return toy_data(tmp_path)


def run_cli(*args, cwd):
    """The CLI in a subprocess (its exit code and streams are what users see)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "distsketch", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=300)


def variant(workdir, old, new, name="bad.toml"):
    text = CONFIG.replace(old, new, 1)
    assert text != CONFIG
    (workdir / name).write_text(text)
    return workdir / name


@pytest.mark.slow
@pytest.mark.parametrize(("old", "new", "message"), [
    ('name = "gaussian"\ngamma = 0.5\n\n[model.output_kernel]', 'name = "gaussain"\ngamma = 0.5\n\n[model.output_kernel]',
     "model.input_kernel.name: unknown kernel name 'gaussain'"),
    ('train = "train.npz"', 'train = "missing.npz"', "data.train: file not found:"),
    ("lam = [1e-3, 1e-2]", "lam = -0.5", "model.lam: the ridge parameter must be a positive number"),
    ("lam = [1e-3, 1e-2]", "lam = [1e-3, 0.0]", "model.lam:"),
    ('p = "20/n"', 'p = "20/m"', 'model.output_sketch.p: expected a number or "c/n"'),
    ("m = 60", "m = 60\nq = 3", "model.input_sketch.q: unknown key"),
    ("block_rows = 64", "block_rows = 0", "engine.block_rows: must be a positive integer"),
    ("[store]", "[stores]", "stores: unknown key"),
    ('type = "SISOKR"', 'type = "SVM"', "model.type: unknown model type 'SVM'"),
    ("standardize = true", "standardize = 1", "data.standardize: expected true or false"),
    ("random_state = 0", "random_state = 0\nrank = 0", "model.rank: the rank of the reduced-rank"),
])
def test_bad_config_exits_nonzero_with_one_line(workdir, old, new, message):
    bad = variant(workdir, old, new)
    out = run_cli("fit", bad, cwd=workdir)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("distsketch: error: ") and message in lines[0], lines[0]
    assert "Traceback" not in out.stderr
    assert not (workdir / "fit.zarr").exists()  # nothing written


@pytest.mark.slow
def test_verbose_shows_traceback(workdir):
    bad = variant(workdir, "lam = [1e-3, 1e-2]", "lam = -1")
    out = run_cli("-v", "fit", bad, cwd=workdir)
    assert out.returncode == 2 and "Traceback" in out.stderr


@pytest.mark.parametrize(("error", "code"), [
    (ValueError("bad value"), 2), (FileNotFoundError("no such file"), 2),
    (ds._base.MissingExtra("needs scikit-learn"), 2),
    (KeyError("internal"), 1), (OSError(28, "No space left on device"), 1),
    (RuntimeError("boom"), 1), (ImportError("cannot import name x"), 1),
])
def test_exit_codes_user_errors_2_failures_1(monkeypatch, capsys, error, code):
    """Exit 2 for what a user can fix (a bad value, a missing file or extra); anything else is a
    failure of distsketch or the machine: exit 1, one line, and a hint to rerun with -v."""
    import distsketch.cli.commands as cli

    def command(args):
        raise error

    monkeypatch.setattr(cli, "cmd_info", command)
    assert main(["info", "anything"]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    if code == 2:
        assert err[0].startswith("distsketch: error: ")
    else:
        assert err[0].startswith(f"distsketch: failed: {type(error).__name__}: ")
        assert err[0].endswith("(rerun with -v for the traceback)")
        assert main(["-v", "info", "anything"]) == 1
        assert "Traceback" in capsys.readouterr().err


def test_unknown_metric_is_refused_before_predicting(workdir, capsys):
    assert main(["-q", "fit", str(workdir / "fit.toml")]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(workdir / "fit.zarr"), "--metrics", "f1_samples", "acc"]) == 2
    err = capsys.readouterr().err
    assert "--metrics: unknown metric 'acc'; known metrics are" in err and "'rmse'" in err


@pytest.mark.slow
def test_sketch_too_large_for_data_is_caught_before_writing(workdir):
    bad = variant(workdir, "m = 60", "m = 500")
    out = run_cli("fit", bad, cwd=workdir)
    assert out.returncode == 2
    assert "model.input_sketch: SubSampling(m=500) needs m <= n_samples = 200" in out.stderr
    assert not (workdir / "fit.zarr").exists()


def test_fit_info_predict_evaluate(workdir, capsys):
    assert main(["-q", "fit", str(workdir / "fit.toml")]) == 0
    assert "model saved in" in capsys.readouterr().out
    model = ds.load(workdir / "fit.zarr")
    assert isinstance(model.input_kernel_, ds.Standardized) and model.lams_ == (1e-3, 1e-2)
    X = np.load(workdir / "test.npz")["X"]
    # the config's p = "20/n" was resolved with n = 200
    assert model.output_sketch_.spec.p == pytest.approx(0.1)

    assert main(["info", str(workdir / "fit.zarr")]) == 0
    info = capsys.readouterr().out
    assert "status:         solved" in info and "4/4 row blocks" in info and "subsampling(m=60)" in info

    assert main(["predict", str(workdir / "fit.zarr"), "--input", str(workdir / "test.npz"),
                 "--output", str(workdir / "p.npy")]) == 0
    np.testing.assert_array_equal(np.load(workdir / "p.npy"), model.predict(X))
    assert main(["predict", str(workdir / "fit.zarr"), "--input", str(workdir / "test.npz"),
                 "--k", "3", "--output", str(workdir / "p.npz")]) == 0
    top = np.load(workdir / "p.npz")
    idx, scores = model.predict_topk(X, k=3)
    np.testing.assert_array_equal(top["indices"], idx)
    np.testing.assert_array_equal(top["scores"], scores)
    capsys.readouterr()

    assert main(["evaluate", str(workdir / "fit.zarr"), "--json"]) == 0
    import json

    results = json.loads(capsys.readouterr().out)
    Y = np.load(workdir / "test.npz")["Y"]
    assert results["f1_samples"] == pytest.approx(ds.metrics.f1_samples(Y, model.predict(X)))
    assert results["surrogate_mse"] == pytest.approx(ds.metrics.surrogate_mse(model, X, Y))
    assert set(results) >= {"f1_samples", "hamming_loss", "kernel_loss", "surrogate_mse"}


def test_info_on_an_incomplete_store(workdir, capsys):
    import dask.array as da

    X = np.load(workdir / "train.npz")["X"].copy()
    X[150, 2] = np.nan
    # row 150 is a landmark: pre-whitened (the default), the fit would refuse it before
    # writing anything (tests/test_prewhiten.py); without, the pass stops at its block
    with pytest.raises(ValueError):
        ds.SISOKR(input_sketch=ds.SubSampling(20), random_state=0, store=str(workdir / "broken.zarr"),
                  options=ds.EngineOptions(block_rows=50, prewhiten=False)).fit(
            da.from_array(X, chunks=(50, 4)), np.load(workdir / "train.npz")["Y"])
    assert main(["info", str(workdir / "broken.zarr")]) == 0
    out = capsys.readouterr().out
    assert "status:         pass " in out and "/4 row blocks" in out
    assert main(["predict", str(workdir / "broken.zarr"), "--input", str(workdir / "test.npz")]) == 2
    assert "incomplete fit" in capsys.readouterr().err


def test_reduced_rank_from_the_config(workdir):
    cfg = variant(workdir, "random_state = 0", "random_state = 0\nrank = [3, 8]", "rr.toml")
    assert main(["-q", "fit", str(cfg)]) == 0
    model = ds.load(workdir / "fit.zarr")
    assert model.ranks_ == (3, 8) and model.rank_ == 3 and model.coef_.shape[0] == 3


def test_load_config_resolves_paths_and_defaults(workdir):
    cfg = load_config(workdir / "fit.toml")
    assert cfg.store == workdir / "fit.zarr" and cfg.data["train"] == workdir / "train.npz"
    assert cfg.options.block_rows == 64
    (workdir / "minimal.toml").write_text(
        '[model.input_kernel]\nname = "linear"\n[model.output_kernel]\nname = "linear"\n'
        '[data]\ntrain = "train.npz"\n')
    minimal = load_config(workdir / "minimal.toml")
    assert minimal.store == workdir / "minimal.zarr" and minimal.model_params["lam"] == 1e-6
    with pytest.raises(ConfigError, match=r"^model.output_kernel: missing kernel table"):
        (workdir / "m2.toml").write_text('[model.input_kernel]\nname = "linear"\n[data]\ntrain = "train.npz"\n')
        load_config(workdir / "m2.toml")


@pytest.mark.slow
def test_version_and_missing_config():
    out = subprocess.run([sys.executable, "-m", "distsketch", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"distsketch {ds.__version__}"
    out = subprocess.run([sys.executable, "-m", "distsketch", "fit", "/nonexistent/x.toml"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.strip() == "distsketch: error: config file not found: /nonexistent/x.toml"


@pytest.mark.slow
@pytest.mark.cluster
def test_fit_against_a_real_scheduler_and_two_workers_equals_threaded(workdir):
    with dask_processes(workdir, 2) as (sched_file, address, _):
        assert address.startswith("tcp://127.0.0.1:")
        out = run_cli("-q", "fit", "fit.toml", "--store", "cluster.zarr", "--scheduler", address, cwd=workdir)
        assert out.returncode == 0, out.stderr
        assert "2 workers" in out.stderr
        out_file = run_cli("-q", "fit", "fit.toml", "--store", "file.zarr", "--scheduler-file", sched_file,
                           cwd=workdir)
        assert out_file.returncode == 0, out_file.stderr
    out = run_cli("-q", "fit", "fit.toml", "--store", "threads.zarr", cwd=workdir)
    assert out.returncode == 0, out.stderr
    ref = ds.load(workdir / "threads.zarr")
    X = np.load(workdir / "test.npz")["X"]
    for name in ("cluster.zarr", "file.zarr"):
        got = ds.load(workdir / name)
        np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.predict_topk(X, k=5)[1], ref.predict_topk(X, k=5)[1], rtol=1e-12)
        np.testing.assert_array_equal(got.predict(X), ref.predict(X))


CV_CONFIG = """
[model]
type = "SketchedKRRCV"
lams = [1e-6, 1e-4, 1e-2]
cv = 4
random_state = 0

[model.kernel]
name = "gaussian"
gamma = 0.5

[model.sketch]
name = "subsampling"
m = 40

[data]
train = "train.npz"
test = "test.npz"

[store]
path = "cv.zarr"
"""


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_cross_validated_model_from_the_config(workdir, capsys):
    (workdir / "cv.toml").write_text(CV_CONFIG)
    assert main(["fit", str(workdir / "cv.toml")]) == 0
    model = ds.load(workdir / "cv.zarr")
    assert isinstance(model, ds.SketchedKRRCV) and model.n_splits_ == 4
    assert model.lam_ == model.best_params_["lam"] and f"λ = {model.lam_:g}" in capsys.readouterr().out


def test_evaluate_a_quantile_model_with_its_own_metrics(tmp_path, capsys):
    """A quantile model fitted by the CLI is evaluated by pinball and crossing by default; a
    point metric (one value per target) is refused naming the metrics that apply."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(140, 3))
    y = X[:, 0] + 0.3 * rng.normal(size=140)
    np.savez(tmp_path / "train.npz", X=X[:100], Y=y[:100])
    np.savez(tmp_path / "test.npz", X=X[100:], Y=y[100:])
    (tmp_path / "q.toml").write_text(
        '[model]\ntype = "quantile"\nlam = 1e-3\nquantiles = [0.1, 0.5, 0.9]\n'
        '[model.kernel]\nname = "gaussian"\ngamma = 0.5\n'
        '[model.sketch]\nname = "subsampling"\nm = 30\n'
        '[data]\ntrain = "train.npz"\ntest = "test.npz"\n')
    assert main(["-q", "fit", str(tmp_path / "q.toml")]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "q.zarr"), "--json"]) == 0
    import json

    results = json.loads(capsys.readouterr().out)
    model = ds.load(tmp_path / "q.zarr")
    Q = model.predict(X[100:])
    assert set(results) == {"pinball", "crossing", "predict_seconds"}
    assert results["pinball"] == pytest.approx(ds.metrics.pinball_loss(y[100:], Q, model.quantiles_))
    assert results["crossing"] == pytest.approx(ds.metrics.crossing_loss(Q))
    assert main(["evaluate", str(tmp_path / "q.zarr"), "--metrics", "mae"]) == 2
    err = capsys.readouterr().err
    assert "metric 'mae'" in err and "3 quantile levels" in err and "pinball" in err


@pytest.mark.slow
def test_predict_output_formats_and_standard_output(workdir, capsys):
    """Without --output the predictions are CSV on standard output (nothing is written to the
    working directory); an extension that chooses no format is refused before any work; top-k
    goes to .npz or CSV."""
    assert main(["-q", "fit", str(workdir / "fit.toml")]) == 0
    model = ds.load(workdir / "fit.zarr")
    X = np.load(workdir / "test.npz")["X"]
    capsys.readouterr()
    before = set(os.listdir(workdir))
    assert main(["-q", "predict", str(workdir / "fit.zarr"), "--input", str(workdir / "test.npz")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ",".join(f"y{j}" for j in range(6))
    np.testing.assert_array_equal(np.loadtxt(lines[1:], delimiter=","), model.predict(X))
    assert set(os.listdir(workdir)) == before
    for bad, k in (("out.txt", []), ("out.npy", ["--k", "3"]), ("out", [])):
        assert main(["predict", str(workdir / "fit.zarr"), "--input", str(workdir / "test.npz"),
                     "--output", str(workdir / bad), *k]) == 2
        err = capsys.readouterr().err
        assert f"--output: {workdir / bad} has no" in err and "extension" in err, err
        assert set(os.listdir(workdir)) == before
    assert main(["-q", "predict", str(workdir / "fit.zarr"), "--input", str(workdir / "test.npz"),
                 "--k", "3", "--output", str(workdir / "top.csv")]) == 0
    idx, scores = model.predict_topk(X, k=3)
    table = np.loadtxt(workdir / "top.csv", delimiter=",", skiprows=1)
    assert (workdir / "top.csv").read_text().splitlines()[0] == \
        "index_1,index_2,index_3,score_1,score_2,score_3"
    np.testing.assert_array_equal(table[:, :3], idx)
    np.testing.assert_array_equal(table[:, 3:], scores)


def test_predict_names_a_missing_feature_column(tmp_path, capsys):
    rng = np.random.default_rng(0)
    A = np.column_stack([rng.normal(size=(80, 3)), rng.normal(size=80)])
    np.savetxt(tmp_path / "train.csv", A, delimiter=",", header="a,b,c,target", comments="")
    np.savetxt(tmp_path / "new.csv", A[:5, [0, 1, 3]], delimiter=",", header="a,b,target",
               comments="")
    (tmp_path / "k.toml").write_text(
        '[model]\ntype = "SketchedKRR"\nlam = 1e-3\n[model.kernel]\nname = "gaussian"\n'
        'gamma = 0.5\n[model.sketch]\nname = "subsampling"\nm = 20\n'
        '[data]\ntrain = "train.csv"\ntarget_columns = ["target"]\n')
    assert main(["-q", "fit", str(tmp_path / "k.toml")]) == 0
    assert main(["predict", str(tmp_path / "k.zarr"), "--input", str(tmp_path / "new.csv")]) == 2
    err = capsys.readouterr().err
    assert "lacks the training feature column(s) ['c']" in err, err


def test_info_refuses_a_store_holding_a_link(workdir, tmp_path, capsys):
    """`distsketch info` (and predict, evaluate) read nothing through a symbolic link either."""
    assert main(["-q", "fit", str(workdir / "fit.toml")]) == 0
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (workdir / "fit.zarr" / "sums").rename(outside / "sums")
    os.symlink(outside / "sums", workdir / "fit.zarr" / "sums")
    capsys.readouterr()
    for cmd in (["info"], ["predict", "--input", str(workdir / "test.npz")]):
        assert main([cmd[0], str(workdir / "fit.zarr"), *cmd[1:]]) == 2
        err = capsys.readouterr().err
        assert "contains a symbolic link 'sums'" in err and str(workdir / "fit.zarr") in err, err
