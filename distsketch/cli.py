"""The ``distsketch`` command line: fit, predict, evaluate, info, demo.

::

    distsketch fit CONFIG.toml [--store PATH] [--scheduler ADDR | --scheduler-file F | --local N]
    distsketch predict STORE --input FILE [--output OUT] [--candidates FILE] [--k K]
    distsketch evaluate STORE [--test FILE] [--json]
    distsketch info STORE
    distsketch demo [--output DIR]

The scheduler defaults to dask's threaded scheduler on this machine; ``--scheduler`` takes a
``tcp://host:port`` address, ``--scheduler-file`` the file written by ``dask scheduler
--scheduler-file`` (HPC batch jobs, dask-mpi), ``--local N`` starts N local worker processes.
User errors (bad arguments, configs or data, missing files or optional dependencies) exit with
status 2 and one line on stderr; any other exception is a failure (a bug, a disk error) and
exits with status 1, one line and a hint to rerun with ``-v``, which prints the traceback.
Only this module configures logging handlers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ._base import MissingExtra
from ._version import __version__

logger = logging.getLogger("distsketch.cli")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

#: Names of distsketch.metrics.METRICS, listed by ``evaluate --help`` without importing it.
_METRIC_NAMES = ("f1_samples", "hamming_loss", "kernel_loss", "surrogate_mse", "rmse", "r2")


# --------------------------------------------------------------------------- helpers


@contextmanager
def scheduler(args):
    """The dask scheduler chosen on the command line (threaded by default)."""
    if getattr(args, "scheduler", None) or getattr(args, "scheduler_file", None) or getattr(args, "local", None):
        from distributed import Client, LocalCluster

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


def _add_scheduler(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", metavar="ADDR", help="dask scheduler address, e.g. tcp://host:8786")
    g.add_argument("--scheduler-file", metavar="FILE", help="scheduler file written by `dask scheduler`")
    g.add_argument("--local", metavar="N", type=int, help="start a local cluster of N worker processes")


def _stored_cli_config(store: str) -> dict:
    import zarr

    return dict(zarr.open_group(store, mode="r").attrs.get("distsketch_cli", {}))


def _out(text: str = "") -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------- commands


def cmd_fit(args) -> int:
    import zarr

    from .config import load_config, load_data
    from .rows import as_row_source

    cfg = load_config(args.config)
    if args.store:
        cfg.store = Path(args.store)
    X, Y = load_data(cfg.data["train"], cfg.data)
    if Y is None:
        raise ValueError("data.train: the file holds no targets (Y); give y_key / n_targets / target_columns")
    n = as_row_source(X, argument="X").n
    model = cfg.estimator(n=n, X=X)
    model.set_params(options=_with_progress(model.options, not args.quiet))
    with scheduler(args):
        t = time.perf_counter()
        model.fit(X, Y)
        seconds = time.perf_counter() - t
    group = zarr.open_group(os.fspath(cfg.store), mode="r+")
    group.attrs["distsketch_cli"] = {"config": str(Path(cfg.path).resolve()),
                                     "data": {k: str(v) if isinstance(v, Path) else v
                                              for k, v in cfg.data.items()},
                                     "metrics": cfg.metrics, "fit_seconds": seconds}
    _out(f"fitted {type(model).__name__} on {n:,} rows in {seconds:.2f} s; λ = {model.lam_:g}"
         f" (path {list(model.lams_)}); model saved in {cfg.store}")
    return EXIT_OK


def _with_progress(options, progress: bool):
    import dataclasses

    from .options import EngineOptions

    return dataclasses.replace(options or EngineOptions(), progress=progress)


def _load_model(args):
    from .persist import load

    return load(args.store, trusted=args.trusted)


def _input_file(path: str, store: str, *, key: str, targets: bool):
    from .config import load_data

    data = _stored_cli_config(store).get("data", {})
    for k in ("train", "test"):
        data.pop(k, None)
    return load_data(Path(path), data, key=key, targets=targets)


def cmd_predict(args) -> int:
    model = _load_model(args)
    X, _ = _input_file(args.input, args.store, key="--input", targets=False)
    candidates = None
    if args.candidates:
        from .config import load_data

        candidates = load_data(Path(args.candidates), {"x_key": args.candidates_key}, key="--candidates",
                               targets=False)[0]
    out = Path(args.output)
    with scheduler(args):
        if args.k < 1:
            raise ValueError(f"--k: must be a positive integer, got {args.k}")
        if args.k > 1 or args.topk:
            idx, scores = model.predict_topk(X, candidates, k=args.k)
            np.savez(out, indices=idx, scores=scores)
            _out(f"top-{args.k} indices and scores of {len(idx):,} queries written to {out}")
        else:
            pred = model.predict(X, candidates) if candidates is not None else model.predict(X)
            np.save(out, np.asarray(pred))
            _out(f"predictions of shape {np.shape(pred)} written to {out}")
    return EXIT_OK


def cmd_evaluate(args) -> int:
    from .backends import dense
    from .metrics import METRICS

    stored = _stored_cli_config(args.store)
    test = args.test or stored.get("data", {}).get("test")
    if not test:
        raise ValueError("--test: no test data given and none recorded in the store's config")
    model = _load_model(args)
    X, Y = _input_file(test, args.store, key="--test", targets=True)
    if Y is None:
        raise ValueError(f"--test: {test} holds no targets")
    names = args.metrics or stored.get("metrics") or model._default_metrics(Y)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"--metrics: unknown metric {unknown[0]!r}; known metrics are "
                         f"{list(METRICS)}")
    with scheduler(args):
        t = time.perf_counter()
        needs_pred = any(METRICS[m].needs_prediction for m in names if m in METRICS)
        pred = model.predict(X) if needs_pred else None
        seconds = time.perf_counter() - t
        Yd = np.asarray(dense(Y), dtype=np.float64)
        results = {name: METRICS[name].func(model, X, Yd, pred) for name in names}
    results["predict_seconds"] = seconds
    if args.json:
        _out(json.dumps(results))
    else:
        for name, value in results.items():
            _out(f"{name:>16}: {value:.6g}")
    return EXIT_OK


def cmd_info(args) -> int:
    import zarr

    if not os.path.isdir(args.store):
        raise FileNotFoundError(f"store {args.store} does not exist")
    group = zarr.open_group(args.store, mode="r")
    meta = dict(group.attrs.get("distsketch", {}))
    if not meta:
        raise ValueError(f"store {args.store} is not a distsketch store")
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

    run_demo(args.output, progress=not args.quiet)
    return EXIT_OK


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="distsketch", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"distsketch {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser("fit", help="fit the model described by a TOML config")
    f.add_argument("config", help="TOML configuration (see distsketch.config)")
    f.add_argument("--store", help="override [store] path")
    _add_scheduler(f)
    f.set_defaults(func=cmd_fit)

    pr = sub.add_parser("predict", help="predict with a saved model")
    pr.add_argument("store", help="store of a fitted model")
    pr.add_argument("--input", required=True, help="input rows (.npy, .npz/.h5/.zarr with X, .arff, .csv)")
    pr.add_argument("--output", default="predictions.npy", help="output file (.npy, or .npz for top-k)")
    pr.add_argument("--candidates", help="candidate outputs file (default: the training outputs)")
    pr.add_argument("--candidates-key", default="X", help="array name of the candidates in .npz/.h5/.zarr")
    pr.add_argument("--k", type=int, default=1, help="return the top-k candidates (indices, scores)")
    pr.add_argument("--topk", action="store_true", help="write indices/scores even for k = 1")
    pr.add_argument("--trusted", action="store_true",
                    help="allow loading a model whose kernel is a user function (imports it)")
    _add_scheduler(pr)
    pr.set_defaults(func=cmd_predict)

    ev = sub.add_parser("evaluate", help="metrics of a saved model on test data")
    ev.add_argument("store")
    ev.add_argument("--test", help="test data (default: [data] test of the fit's config)")
    ev.add_argument("--metrics", nargs="+", metavar="NAME",
                    help="metric names (default: by task): " + ", ".join(_METRIC_NAMES))
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--trusted", action="store_true",
                    help="allow loading a model whose kernel is a user function (imports it)")
    _add_scheduler(ev)
    ev.set_defaults(func=cmd_evaluate)

    info = sub.add_parser("info", help="describe a store (complete or not)")
    info.add_argument("store")
    info.set_defaults(func=cmd_info)

    demo = sub.add_parser("demo", help="digit completion on scikit-learn's digits (SISOKR vs IOKR)")
    demo.add_argument("--output", default="demo-output", help="directory for the stores and the PNG")
    demo.set_defaults(func=cmd_demo)
    return p


#: What a user can fix: bad arguments, configs or data (ValueError, ConfigError), a missing
#: file, a missing optional dependency. Anything else is a failure of distsketch or of the
#: machine (a bug, a disk error) and exits 1.
USER_ERRORS = (ValueError, FileNotFoundError, MissingExtra)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="distsketch: %(message)s", stream=sys.stderr)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        if args.verbose:
            traceback.print_exc()
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"distsketch: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        if args.verbose:
            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        hint = "" if args.verbose else " (rerun with -v for the traceback)"
        print(f"distsketch: failed: {type(exc).__name__}: {first}{hint}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
