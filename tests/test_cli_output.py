"""The command line's output: results alone on stdout (``--json`` parses, with or without
``-q``), progress bars on stderr and silenced by ``-q``, verbosity flags after the command, plain
floats in the results, a closed pipe ended quietly, and a ``--local`` cluster's own log kept out
of the default output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from confighelpers import run_cli, toy_data
from distsketch.cli.commands import main


def _toy(tmp_path: Path) -> Path:
    return toy_data(tmp_path)


@pytest.mark.slow
def test_json_output_parses_with_and_without_quiet(cli_fit):
    """``--json`` is the only thing on stdout; progress bars go to stderr (and -q hides them)."""
    for args in (["-q", "evaluate", "fit.zarr", "--json"], ["evaluate", "fit.zarr", "--json"],
                 ["evaluate", "fit.zarr", "--json", "-q"]):
        out = run_cli(*args, cwd=cli_fit)
        assert out.returncode == 0, out.stderr
        results = json.loads(out.stdout)
        assert {"f1_samples", "surrogate_mse"} <= set(results)
        quiet = "-q" in args
        assert ("Completed" in out.stderr) is not quiet, (args, out.stderr)


@pytest.mark.slow
def test_predict_progress_goes_to_stderr_and_q_silences_it(cli_fit):
    out = run_cli("predict", "fit.zarr", "--input", "test.npz", "--output", "p.npy", cwd=cli_fit)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("predictions of shape (40, 6) written to") and "Completed" not in out.stdout
    assert "Completed" in out.stderr
    out = run_cli("predict", "fit.zarr", "--input", "test.npz", "--output", "p.npy", "-q", cwd=cli_fit)
    assert out.returncode == 0 and out.stderr == "", out.stderr


@pytest.mark.slow
def test_verbosity_flags_after_the_command(cli_fit, tmp_path):
    work = _toy(tmp_path)
    out = run_cli("fit", "fit.toml", "-v", "-q", cwd=work)
    assert out.returncode == 0, out.stderr
    assert "X: 4 features, Y: 6 targets" in out.stderr  # -v after the command: info logging
    assert "Completed" not in out.stderr  # -q after the command: no progress bar
    assert out.stdout.startswith("fitted SISOKR on 200 rows")
    out = run_cli("info", "fit.zarr", "-vv", cwd=work)
    assert out.returncode == 0 and out.stdout.startswith("store:")


def test_evaluate_results_are_plain_floats(cli_fit, capsys):
    assert main(["-q", "evaluate", str(cli_fit / "fit.zarr"), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert all(type(v) is float for v in results.values())


@pytest.mark.slow
def test_broken_pipe_is_quiet_and_exits_0(cli_fit):
    """``distsketch info STORE | head -1``: the reader went away; no traceback, status 0."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written: the first write fails
    try:
        out = run_cli("info", "fit.zarr", cwd=cli_fit, stdout=w)
    finally:
        os.close(w)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


@pytest.mark.slow
def test_a_local_cluster_fit_keeps_distributeds_chatter_out_of_the_default_output(cli_fit,
                                                                                  tmp_path):
    """``fit --local N`` used to print distributed's INFO lines (workers and nannies starting,
    comms closing, at times a shutdown traceback) on every run; by default it prints the
    cluster line and the result, ``-vv`` shows distributed's log."""
    out = run_cli("-q", "fit", cli_fit / "fit.toml", "--store", tmp_path / "a.zarr",
                  "--local", "1", cwd=cli_fit)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("fitted ")
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("distsketch: dask: 1 workers at"), lines
    out = run_cli("-q", "-vv", "fit", cli_fit / "fit.toml", "--store", tmp_path / "b.zarr",
                  "--local", "1", cwd=cli_fit)
    assert out.returncode == 0 and "Start Nanny" in out.stderr
