"""The ``distsketch`` command line: fit, predict, evaluate, update, info, demo.

::

    distsketch fit CONFIG.toml [--store PATH] [--scheduler ADDR | --scheduler-file F | --local N]
    distsketch predict STORE --input FILE [--output OUT] [--candidates FILE] [--k K]
    distsketch evaluate STORE [--test FILE] [--metrics NAME ...] [--json]
    distsketch update STORE (--input FILE [--repeat] | --forget BATCH)
    distsketch info STORE
    distsketch demo [--output DIR]

``-v`` (more logging, ``-vv`` debug and tracebacks) and ``-q`` (no progress bars) go before or
after the command. Standard output holds the command's result only (a report line, the
metrics, ``--json``'s one JSON object); progress bars and logging go to standard error.

The scheduler defaults to dask's threaded scheduler on this machine; ``--scheduler`` takes a
``tcp://host:port`` address, ``--scheduler-file`` the file written by ``dask scheduler
--scheduler-file`` (HPC batch jobs, dask-mpi), ``--local N`` starts N local worker processes.
User errors (bad arguments, configs or data, missing files or optional dependencies) exit with
status 2 and one line on stderr; any other exception is a failure (a bug, a disk error) and
exits with status 1, one line and a hint to rerun with ``-v``, which prints the traceback.
Only this module configures logging handlers.

Start-up: this module imports only the standard library at import time (``--help`` and
``--version`` must not wait for numpy, dask or zarr); each command imports what it needs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from pathlib import Path

from .._version import __version__
from .stores import (
    input_file,
    load_model,
    open_store,
    refuse_foreign_store_path,
    store_size_estimate,
    stored_cli_config,
    with_progress,
)

logger = logging.getLogger("distsketch.cli")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

#: Names of distsketch.metrics.METRICS, listed by ``evaluate --help`` without importing it
#: (tests/test_cli_messages.py checks that the two agree).
_METRIC_NAMES = ("f1_samples", "hamming_loss", "kernel_loss", "surrogate_mse", "rmse", "mae", "r2",
                 "pinball", "crossing")

#: Where the command's result goes: the real standard output. While a command runs,
#: ``sys.stdout`` is redirected to standard error, so that progress bars (dask's and
#: distributed's write to ``sys.stdout``) never mix with the result.
_result_stream = sys.stdout


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def scheduler(args):
    """The dask scheduler chosen on the command line (threaded by default)."""
    if getattr(args, "scheduler", None) or getattr(args, "scheduler_file", None) or getattr(args, "local", None):
        from distributed import Client, LocalCluster

        if args.verbose < 2:  # distributed's INFO (workers starting, comms closing): -vv shows it
            logging.getLogger("distributed").setLevel(logging.WARNING)
        cluster = None
        if args.scheduler:
            client = Client(args.scheduler)
        elif args.scheduler_file:
            if not os.path.exists(args.scheduler_file):
                raise FileNotFoundError(f"--scheduler-file: {args.scheduler_file} does not exist")
            client = Client(scheduler_file=args.scheduler_file)
        else:
            cluster = LocalCluster(n_workers=args.local, threads_per_worker=1)
            client = Client(cluster)
        logger.warning("dask: %d workers at %s; dashboard %s", len(client.scheduler_info()["workers"]),
                       client.scheduler.address, client.dashboard_link)
        try:
            yield client
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    else:
        logger.info("dask: threaded scheduler on this machine")
        yield None


def _positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1 (``--local 0`` would silently mean "no cluster")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (a number of workers), got {value}")
    return value


def _add_scheduler(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", metavar="ADDR", help="dask scheduler address, e.g. tcp://host:8786")
    g.add_argument("--scheduler-file", metavar="FILE", help="scheduler file written by `dask scheduler`")
    g.add_argument("--local", metavar="N", type=_positive_int,
                   help="start a local cluster of N worker processes (N >= 1)")


def _out(text: str = "") -> None:
    """One line of the command's result, on standard output."""
    print(text, file=_result_stream, flush=True)


def _jsonable(value):
    """Config values as JSON (paths as strings, lists of paths as lists)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- commands


def cmd_fit(args) -> int:
    import zarr

    from ..engine.rows import as_row_source
    from .config import load_config, read_data

    cfg = load_config(args.config)
    if args.store:
        cfg.store = Path(args.store)
    refuse_foreign_store_path(Path(cfg.store))
    data = read_data(cfg.data["train"], cfg.data)
    X, Y = data.X, data.Y
    if Y is None:
        raise ValueError("data.train: the file holds no targets (Y); give y_key / n_targets / target_columns")
    n = as_row_source(X, argument="X").n
    model = cfg.estimator(n=n, X=X)
    model.set_params(options=with_progress(model.options, not args.quiet))
    estimate = store_size_estimate(model, n, X.shape[1])
    if estimate:
        logger.info("store %s: expected size about %s", cfg.store, estimate)
    selection = None
    with scheduler(args):
        t = time.perf_counter()
        if cfg.select:
            from ..model_selection.select import select

            selection = select(model, X, Y, **cfg.select)
            model = selection.model
        else:
            model.fit(X, Y)
        seconds = time.perf_counter() - t
    group = zarr.open_group(os.fspath(cfg.store), mode="r+")
    group.attrs["distsketch_cli"] = {
        "config": str(Path(cfg.path).resolve()),
        "data": _jsonable(cfg.data),
        "metrics": cfg.metrics, "fit_seconds": seconds,
        "n_features": int(X.shape[1]),
        "feature_names": data.feature_names, "target_names": data.target_names,
        "impute_means": None if data.impute_means is None else [float(v) for v in data.impute_means],
        "selection": None if selection is None else {
            "route": selection.route, "metric": selection.metric, "best": selection.best,
            "greater_is_better": selection.greater_is_better, "table": selection.table},
    }
    summary = {"model": type(model).__name__, "n": n, "fit_seconds": seconds,
               "lam": float(model.lam_), "store": str(cfg.store)}
    if selection is not None:
        summary["selection"] = group.attrs["distsketch_cli"]["selection"]
    if getattr(args, "json", False):
        import json

        _out(json.dumps(summary))
        return EXIT_OK
    if selection is not None:
        _print_selection(selection)
    _out(f"fitted {type(model).__name__} on {n:,} rows in {seconds:.2f} s; λ = {model.lam_:g}"
         f" (path {list(model.lams_)}); model saved in {cfg.store}")
    return EXIT_OK


def _print_selection(sel) -> None:
    """The table of every candidate's score (best marked) and the chosen values."""
    keys = [k for k in ("kernel", "gamma", "lam", "rank") if k in sel.table[0]]
    # the kernel column (a description) left-aligned at its widest; a kernel without a width
    # has no gamma ("-"), a full rank is "full"
    kw = max([len("kernel")] + [len(str(r["kernel"])) for r in sel.table]) if "kernel" in keys else 0

    def cell(k, v):
        if k == "kernel":
            return f"{v:<{kw}}"
        if v is None:
            return f"{'-' if k == 'gamma' else 'full':>10}"
        return f"{v:>10g}"

    better = "greater" if sel.greater_is_better else "smaller"
    what = (f"{sel.metric} (mean over folds, {better} is better)" if sel.route == "cv" else
            f"{sel.metric} on the held-out rows ({better} is better)")
    _out(f"model selection by {sel.route}: {what}")
    _out("  ".join(f"{k:<{kw}}" if k == "kernel" else f"{k:>10}" for k in keys)
         + f"  {'score':>12}" + (f"  {'std':>10}" if sel.route == "cv" else ""))
    for row in sel.table:
        mark = "  *" if all(row.get(k) == sel.best.get(k) for k in keys) else ""
        _out("  ".join(cell(k, row[k]) for k in keys)
             + f"  {row['score']:>12.6g}" + (f"  {row['std']:>10.3g}" if sel.route == "cv" else "")
             + mark)
    _out("chosen: " + ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                                for k, v in sel.best.items() if v is not None))


def cmd_predict(args) -> int:
    import numpy as np

    if args.k < 1:
        raise ValueError(f"--k: must be a positive integer, got {args.k}")
    group = open_store(args.store, solved=True)
    stored = stored_cli_config(group)
    model = load_model(args)
    X = input_file(args.input, stored, key="--input", targets=False,
                    n_features=getattr(model, "n_features_in_", None)).X
    candidates = None
    if args.candidates:
        from .config import load_data

        candidates = load_data(Path(args.candidates), {"x_key": args.candidates_key}, key="--candidates",
                               targets=False)[0]
    topk = args.k > 1 or args.topk
    out = None if args.output is None else Path(args.output)
    if out is not None:
        allowed = (".npz", ".csv") if topk else (".npy", ".csv")
        if out.suffix.lower() not in allowed:
            raise ValueError(f"--output: {out} has no {' or '.join(allowed)} extension (the "
                             f"format is chosen by it); omit --output to print CSV to standard "
                             f"output")
    with scheduler(args):
        if topk:
            idx, scores = model.predict_topk(X, candidates, k=args.k)
            if out is not None and out.suffix.lower() == ".npz":
                np.savez(out, indices=idx, scores=scores)
            else:  # one row per query: the k indices, then their k scores
                names = ([f"index_{j + 1}" for j in range(idx.shape[1])]
                         + [f"score_{j + 1}" for j in range(idx.shape[1])])
                _write_csv(out, np.column_stack([idx, scores]), names,
                           fmt=["%d"] * idx.shape[1] + ["%.17g"] * idx.shape[1])
            what = f"top-{args.k} indices and scores of {len(idx):,} queries"
        else:
            pred = model.predict(X, candidates) if candidates is not None else model.predict(X)
            pred = np.asarray(pred)
            if out is not None and out.suffix.lower() == ".npy":
                np.save(out, pred)
            else:  # CSV with a header of the training target names
                P = pred.reshape(len(pred), -1)
                names = stored.get("target_names")
                if not names or len(names) != P.shape[1]:
                    names = [f"y{j}" for j in range(P.shape[1])]
                _write_csv(out, P, names, fmt="%.17g")
            what = f"predictions of shape {np.shape(pred)}"
    if out is not None:
        _out(f"{what} written to {out}")
    return EXIT_OK


def _write_csv(out: Path | None, values, names: list[str], *, fmt) -> None:
    """Rows as CSV with a header line, to ``out`` or (None) to standard output."""
    import numpy as np

    if out is None:
        np.savetxt(_result_stream, values, delimiter=",", header=",".join(names), comments="",
                   fmt=fmt)
        _result_stream.flush()
    else:
        np.savetxt(out, values, delimiter=",", header=",".join(names), comments="", fmt=fmt)


def _check_metric_names(names, where: str) -> None:
    from ..metrics import METRICS

    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"{where}: unknown metric {unknown[0]!r}; known metrics are {list(METRICS)}")


def cmd_evaluate(args) -> int:
    import json

    import numpy as np

    from ..backends.base import dense
    from ..metrics import METRICS

    if args.metrics:  # before anything is read
        _check_metric_names(args.metrics, "--metrics")
    group = open_store(args.store, solved=True)
    stored = stored_cli_config(group)
    test = args.test or stored.get("data", {}).get("test")
    if not test:
        raise ValueError("--test: no test data given, and the store's fit recorded no [data] "
                         "test: give --test FILE")
    model = load_model(args)
    data = input_file(test, stored, key="--test", targets=True,
                       n_features=getattr(model, "n_features_in_", None))
    X, Y = data.X, data.Y
    if Y is None:
        raise ValueError(f"--test: {test} holds no targets")
    names = args.metrics or stored.get("metrics") or model._default_metrics(Y)
    _check_metric_names(names, "--metrics")
    from ..metrics import check_metrics

    # does each metric apply to this model (e.g. no kernel_loss without an output kernel)?
    check_metrics(names, model=model, argument="--metrics")
    _switch(model, args)
    with scheduler(args):
        t = time.perf_counter()
        needs_pred = any(METRICS[m].needs_prediction for m in names)
        pred = model.predict(X) if needs_pred else None
        seconds = time.perf_counter() - t
        Yd = np.asarray(dense(Y), dtype=np.float64)
        results = {name: METRICS[name].func(model, X, Yd, pred) for name in names}
    results = {k: float(v) for k, v in results.items()}
    results["predict_seconds"] = seconds
    if args.json:
        _out(json.dumps(results))
    else:
        for name, value in results.items():
            _out(f"{name:>16}: {value:.6g}")
    return EXIT_OK


def _switch(model, args) -> None:
    """``--lam`` / ``--rank``: evaluate the saved model at another λ of its path (any λ > 0:
    the fit's sums serve every λ) or rank, without refitting."""
    lam, rank = getattr(args, "lam", None), getattr(args, "rank", None)
    if lam is not None:
        if not hasattr(model, "set_lam"):
            raise ValueError(f"--lam: a {type(model).__name__} has no λ path to switch")
        if not lam > 0:
            raise ValueError(f"--lam: expected a positive number, got {lam}")
        model.set_lam(lam)
    if rank is not None:
        if not hasattr(model, "set_rank"):
            raise ValueError(f"--rank: a {type(model).__name__} has no rank to switch")
        if rank < 1:
            raise ValueError(f"--rank: expected a positive integer, got {rank}")
        model.set_rank(rank)


def cmd_update(args) -> int:
    """Append the rows of ``--input`` to a stored model as a batch, or ``--forget`` a batch;
    the model is solved again and saved in its store (its ``partial_fit`` / ``forget``)."""
    if (args.input is None) == (args.forget is None):
        raise ValueError("update: give --input FILE (rows to append) or --forget BATCH (a batch "
                         "number of `distsketch info`), one of them")
    group = open_store(args.store, solved=True)
    stored = stored_cli_config(group)
    model = load_model(args)
    if not hasattr(model, "partial_fit"):
        raise ValueError(f"{args.store}: the stored {type(model).__name__} takes no appended rows "
                         f"(an exact side, or a model without partial_fit); refit it on all the rows "
                         f"with `distsketch fit`")
    if "store" in model.get_params(deep=False):  # the store as named here (fit may have run elsewhere)
        model.set_params(store=os.fspath(args.store))
    with scheduler(args):
        t = time.perf_counter()
        if args.input is not None:
            data = input_file(args.input, stored, key="--input", targets=True,
                              n_features=getattr(model, "n_features_in_", None))
            if data.Y is None:
                raise ValueError("--input: the file holds no targets (Y); it is read with the "
                                 "fit's [data] options (y_key / n_targets / target_columns)")
            try:
                model.partial_fit(data.X, data.Y, repeat=args.repeat)
            except ValueError as exc:  # the Python argument's name is not the option's
                if "repeat=True" not in str(exc):
                    raise
                raise ValueError(str(exc).replace("repeat=True", "--repeat")) from None
            done = f"appended batch {model.batches_[-1]['batch']} ({model.batches_[-1]['rows']:,} rows)"
        else:
            model.forget(args.forget)
            done = f"forgot batch {args.forget}"
        seconds = time.perf_counter() - t
    batches = model.batches_
    rows = sum(b["rows"] for b in batches)
    if getattr(args, "json", False):
        import json

        _out(json.dumps({"model": type(model).__name__, "seconds": seconds, "rows": rows,
                         "lam": float(model.lam_), "batches": batches, "store": str(args.store)}))
        return EXIT_OK
    _out(f"{done} in {seconds:.2f} s; {type(model).__name__} on {rows:,} rows in {len(batches)} "
         f"batches, λ = {model.lam_:g}; model saved in {args.store}")
    return EXIT_OK


def cmd_info(args) -> int:
    import numpy as np

    group = open_store(args.store, solved=False)
    meta = dict(group.attrs.get("distsketch", {}))
    _out(f"store:          {args.store}")
    _out(f"status:         {meta.get('status')}  (format {meta.get('format_version')}, "
         f"written by distsketch {meta.get('version')})")
    pass_cfg = meta.get("pass")
    if pass_cfg:
        done = (np.asarray(group["pass/blocks"][:, 0]) != 0 if "pass/blocks" in group
                else np.zeros(0, bool))
        _out(f"pass:           {pass_cfg['model']} on n = {pass_cfg['n']:,} rows, "
             f"{int(done.sum())}/{done.size} row blocks of {pass_cfg['block_rows']} done, "
             f"blocks {pass_cfg['block_dtype']}")
        for side in ("input", "output"):
            s = pass_cfg.get(side, {})
            if "sketch" in s:
                sk = s["sketch"]
                _out(f"{side + ' side:':16}kernel {_describe(s['kernel'])}, sketch "
                     f"{_describe(sk['spec'])} (seed {sk['seed']}), data {tuple(s['shape'])}")
    if meta.get("status") == "solved" and "model" in group:
        m = dict(group["model"].attrs.get("distsketch_model", {}))
        st = m.get("state", {})
        _out(f"model:          {m.get('class')}, λ path {st.get('lams')}, active λ {st.get('lam')}")
        if not meta.get("batches"):
            for b in (st.get("growth") or {}).get("batches", []):  # rows appended by partial_fit
                _out(f"batch {b['batch']:<8} {b['rows']:,} rows, added {b['added']}, "
                     f"digest {b['digest']}")
    for b in meta.get("batches") or []:  # the store's batches: complete, pending, forgotten
        _out(f"batch {b['batch']:<8} {b['rows']:,} rows, added {b['added']}, "
             f"digest {b['digest']}, {b.get('status')}")
    size = sum(f.stat().st_size for f in Path(args.store).rglob("*") if f.is_file())
    _out(f"size on disk:   {size / 2**20:.1f} MiB")
    return EXIT_OK


def _describe(cfg: dict) -> str:
    """``name(param=value, ...)`` of a kernel / sketch config (standardisation summarised)."""
    cfg = dict(cfg)
    name = cfg.pop("name", "callable")
    if name == "standardized":
        return f"standardized {_describe(cfg['kernel'])} (d = {len(cfg['mean'])})"
    return f"{name}(" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in cfg.items()) + ")"


def cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(args.output, progress=not args.quiet, stream=_result_stream)  # the report is the result
    return EXIT_OK


# --------------------------------------------------------------------------- entry point


def _verbosity(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``-v``/``-q`` on the main parser and again on every command (``fit x.toml -v``).

    The command's copies have their own names, added to the main ones in :func:`main`.
    """
    prefix = "" if top else "sub_"
    parser.add_argument("-v", "--verbose", action="count", default=0, dest=prefix + "verbose",
                        help="log more: -v info (data shapes, store size), -vv debug, tracebacks and dask.distributed's own log")
    parser.add_argument("-q", "--quiet", action="store_true", dest=prefix + "quiet",
                        help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="distsketch", description=__doc__.splitlines()[0],
        epilog="-v/-q may also follow the command. Output: results on stdout, progress bars and "
               "logging on stderr. Exit status: 0 success, 2 a user error (one line naming the "
               "argument or key), 1 a failure (rerun with -v for the traceback).")
    p.add_argument("--version", action="version", version=f"distsketch {__version__}")
    _verbosity(p, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _verbosity(common, top=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser("fit", parents=[common], help="fit the model described by a TOML config",
                       description="Fit the model described by a TOML config (schema: the "
                                   "docstring of distsketch.cli.config) and save it in its store.")
    f.add_argument("config", help="TOML configuration (see distsketch.cli.config)")
    f.add_argument("--store", help="override [store] path (a new or empty directory, or a "
                                   "distsketch store)")
    f.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (the fit and, with [select], every "
                        "candidate's score and the chosen values)")
    _add_scheduler(f)
    f.set_defaults(func=cmd_fit)

    pr = sub.add_parser("predict", parents=[common], help="predict with a saved model",
                        description="Predict with a saved model. The input may hold the features "
                                    "only, or the training layout (its targets are ignored).")
    pr.add_argument("store", help="store of a fitted model")
    pr.add_argument("--input", required=True,
                    help="input rows (.npy, .npz/.h5/.zarr with X, .arff, .csv), read with the "
                         "fit's [data] options")
    pr.add_argument("--output", default=None,
                    help="output file, its format by its extension: .npy, or .csv (a header of "
                         "the training target names); top-k: .npz (indices and scores arrays) "
                         "or .csv (index_1..k, score_1..k); default: CSV on standard output")
    pr.add_argument("--candidates", help="candidate outputs file (default: the training outputs)")
    pr.add_argument("--candidates-key", default="X", help="array name of the candidates in .npz/.h5/.zarr")
    pr.add_argument("--k", type=int, default=1, help="return the top-k candidates (indices, scores)")
    pr.add_argument("--topk", action="store_true", help="write indices/scores even for k = 1")
    pr.add_argument("--trusted", action="store_true",
                    help="allow loading a model whose kernel is a user function (imports it)")
    _add_scheduler(pr)
    pr.set_defaults(func=cmd_predict)

    ev = sub.add_parser("evaluate", parents=[common], help="metrics of a saved model on test data",
                        description="Metrics of a saved model on test data. Metric names: "
                                    + ", ".join(_METRIC_NAMES) + ".")
    ev.add_argument("store")
    ev.add_argument("--test", help="test data (default: [data] test of the fit's config)")
    ev.add_argument("--metrics", nargs="+", metavar="NAME",
                    help="metric names (default: by task): " + ", ".join(_METRIC_NAMES))
    ev.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ev.add_argument("--lam", type=float, metavar="λ",
                    help="evaluate at this λ (one of the fit's path, or any λ > 0 for ridge "
                         "models: no refit)")
    ev.add_argument("--rank", type=int, metavar="P", help="evaluate SISOKR at this rank")
    ev.add_argument("--trusted", action="store_true",
                    help="allow loading a model whose kernel is a user function (imports it)")
    _add_scheduler(ev)
    ev.set_defaults(func=cmd_evaluate)

    up = sub.add_parser("update", parents=[common], help="append rows to a stored model, or forget a batch",
                        description="Append the rows of a file to a stored model as a new batch (read "
                                    "with the fit's [data] options; the model is solved again from "
                                    "every batch's sums, without reading earlier batches' data), or "
                                    "forget a batch. `distsketch info` lists the batches.")
    up.add_argument("store", help="store of a fitted model")
    what = up.add_mutually_exclusive_group()
    what.add_argument("--input", help="rows to append (.npy, .npz/.h5/.zarr with X and Y, .arff, .csv), "
                                      "with their targets")
    what.add_argument("--forget", type=int, metavar="BATCH", help="the batch to drop (0: the fit's)")
    up.add_argument("--repeat", action="store_true",
                    help="append rows even if a batch holds the same rows (their weight doubles)")
    up.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    up.add_argument("--trusted", action="store_true",
                    help="allow loading a model whose kernel is a user function (imports it)")
    _add_scheduler(up)
    up.set_defaults(func=cmd_update)

    info = sub.add_parser("info", parents=[common], help="describe a store (complete or not)")
    info.add_argument("store")
    info.set_defaults(func=cmd_info)

    demo = sub.add_parser("demo", parents=[common],
                          help="digit completion on scikit-learn's digits (SISOKR vs IOKR)")
    demo.add_argument("--output", default="demo-output", help="directory for the stores and the PNG")
    demo.set_defaults(func=cmd_demo)
    return p


def _user_errors() -> tuple[type[BaseException], ...]:
    """What a user can fix: bad arguments, configs or data (ValueError, ConfigError), a missing
    file, a missing optional dependency. Anything else is a failure of distsketch or of the
    machine (a bug, a disk error) and exits 1."""
    from .._base import MissingExtra

    return (ValueError, FileNotFoundError, MissingExtra)


def _stdout_closed() -> int:
    """The reader of our standard output went away (``distsketch info S | head -1``): stop
    quietly, as ``head`` asked. Python's own recipe: point stdout at devnull, so that the
    interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, _result_stream.fileno())
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    global _result_stream

    args = build_parser().parse_args(argv)
    args.verbose = args.verbose + args.sub_verbose
    args.quiet = args.quiet or args.sub_quiet
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="distsketch: %(message)s", stream=sys.stderr)
    logging.getLogger("distsketch").setLevel(level)
    _result_stream = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return args.func(args)
    except BrokenPipeError:
        return _stdout_closed()
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        import traceback

        user = isinstance(exc, _user_errors())
        if args.verbose:
            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        if user:
            print(f"distsketch: error: {first or type(exc).__name__}", file=sys.stderr)
            return EXIT_USAGE
        hint = "" if args.verbose else " (rerun with -v for the traceback)"
        print(f"distsketch: failed: {type(exc).__name__}: {first}{hint}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
