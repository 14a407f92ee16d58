"""cluster/'s scripts without a batch system: the PBS worker counting and the mpirun placement
of cluster/start-dask.sh (its functions, sourced by bash in a fake PBS environment: no PBS
server exists here), and the deployment guide's conversion recipe run as written.

The live launches (pbs-fit.pbs across two fake nodes, start-dask.sh under the real Open MPI
with a PBS node file) are in tests/test_hpc.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
START_DASK = ROOT / "cluster" / "start-dask.sh"
PBS_VARS = ("PBS_NODEFILE", "NCPUS", "PBS_NUM_PPN", "MPIRUN_ARGS")

if shutil.which("bash") is None:  # pragma: no cover - every supported system has it
    pytest.skip("bash not found", allow_module_level=True)


def source(code: str, tmp_path: Path, nodes: list[str] | None = None, **environ) -> str:
    """Run ``code`` in bash after sourcing start-dask.sh; ``nodes``: the lines of a PBS node
    file. Returns stdout; fails the test on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if k not in PBS_VARS}
    if nodes is not None:
        (tmp_path / "nodefile").write_text("".join(f"{n}\n" for n in nodes))
        env["PBS_NODEFILE"] = str(tmp_path / "nodefile")
    env.update({k: str(v) for k, v in environ.items()})
    out = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{START_DASK}"; {code}'], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def slots(tmp_path, nodes, threads, workers="", **environ) -> list[tuple[str, int]]:
    out = source(f"pbs_slots {threads} {workers}", tmp_path, nodes, **environ)
    return [(line.split()[0], int(line.split()[1])) for line in out.splitlines()]


# --------------------------------------------------------------------------- worker counting


COUNTS = [
    # pbs-fit.pbs's own `select=1:ncpus=2`: one node-file line, 2 CPUs -> 2 workers (was 1)
    ("pbs-pro own default", ["n1"], {"NCPUS": 2}, 1, "", [("n1", 2)]),
    # the deployment guide's `select=4:ncpus=4 ... THREADS=4`: one worker on each node (was 1 in all)
    ("pbs-pro select=4:ncpus=4, T=4", ["n1", "n2", "n3", "n4"], {"NCPUS": 4}, 4, "",
     [("n1", 1), ("n2", 1), ("n3", 1), ("n4", 1)]),
    ("pbs-pro select=4:ncpus=4, T=1", ["n1", "n2", "n3", "n4"], {"NCPUS": 4}, 1, "",
     [("n1", 4), ("n2", 4), ("n3", 4), ("n4", 4)]),
    # mpiprocs=4: four lines per node, still 4 CPUs per node
    ("pbs-pro mpiprocs=4", ["n1"] * 4 + ["n2"] * 4, {"NCPUS": 4}, 2, "", [("n1", 2), ("n2", 2)]),
    ("torque nodes=2:ppn=4", ["a"] * 4 + ["b"] * 4, {"PBS_NUM_PPN": 4}, 2, "", [("a", 2), ("b", 2)]),
    # no NCPUS / PBS_NUM_PPN: the node's lines (Torque lists a node once per CPU)
    ("node-file lines", ["a", "a", "a", "b"], {}, 1, "", [("a", 3), ("b", 1)]),
    ("more threads than CPUs", ["a", "b"], {"NCPUS": 2}, 8, "", [("a", 1), ("b", 1)]),
    # WORKERS given: spread evenly, the remainder on the first nodes
    ("workers=5 on 2 nodes", ["a", "b"], {"NCPUS": 8}, 1, 5, [("a", 3), ("b", 2)]),
    ("workers=1 on 2 nodes", ["a", "b"], {"NCPUS": 8}, 1, 1, [("a", 1)]),
]


@pytest.mark.parametrize(("case", "nodes", "environ", "threads", "workers", "want"),
                         [pytest.param(*c, id=c[0]) for c in COUNTS])
def test_pbs_workers_per_node(tmp_path, case, nodes, environ, threads, workers, want):
    assert slots(tmp_path, nodes, threads, workers, **environ) == want, case


# --------------------------------------------------------------------------- placement


def fake_mpirun(tmp_path: Path, version: str) -> dict:
    """PATH with an `mpirun` whose --version prints ``version``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "mpirun").write_text(f"#!/bin/sh\ncat <<'EOF'\n{version}\nEOF\n")
    (bin_dir / "mpirun").chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


VERSIONS = {
    "openmpi": "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/",
    "hydra": "HYDRA build details:\n    Version:                                 4.0.2",
    "intel": "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619",
    "unknown": "some-other-launcher 1.0",
}


@pytest.mark.parametrize("which", sorted(VERSIONS))
def test_mpi_flavour_from_mpirun_version(tmp_path, which):
    got = source("mpi_flavour", tmp_path, **fake_mpirun(tmp_path, VERSIONS[which])).strip()
    assert got == {"intel": "hydra"}.get(which, which)


@pytest.mark.parametrize(("flavour", "hosts", "flags"), [
    ("openmpi", "n1 slots=4\nn2 slots=4\nn3 slots=4\n",
     ["--hostfile", "HOSTS", "--map-by", "ppr:4:node", "--bind-to", "none"]),
    ("hydra", "n1:4\nn2:4\nn3:4\n", ["-f", "HOSTS", "-ppn", "4"]),
])
def test_host_file_places_workers_per_node(tmp_path, flavour, hosts, flags):
    """Three nodes of 4 CPUs: a host file with each node once and its slots, K per node."""
    out = source('pbs_slots 1 | mpirun_flags "$FLAVOUR" "$PWD/sched.json.hosts"', tmp_path,
                 ["n1", "n2", "n3"], NCPUS=4, FLAVOUR=flavour)
    hostfile = tmp_path / "sched.json.hosts"
    assert hostfile.read_text() == hosts
    assert out.split() == [str(hostfile) if f == "HOSTS" else f for f in flags]


def test_uneven_slots_map_by_slot(tmp_path):
    """Nodes with different CPU counts (Torque lines): slots per node, no uniform ppr mapping."""
    out = source('pbs_slots 1 | mpirun_flags openmpi "$PWD/h"', tmp_path, ["a", "a", "a", "b"])
    assert (tmp_path / "h").read_text() == "a slots=3\nb slots=1\n"
    assert out.split() == ["--hostfile", str(tmp_path / "h"), "--bind-to", "none"]


@pytest.mark.parametrize(("args", "flags"), [
    ("--allow-run-as-root --oversubscribe", ["--hostfile", "H", "--map-by", "ppr:2:node", "--bind-to", "none"]),
    ("--hostfile mine", ["--bind-to", "none"]),             # the user's own host file wins
    ("--map-by node --bind-to core", []),                   # the user's mapping and binding
    ("--bind-to=socket", ["--hostfile", "H", "--map-by", "ppr:2:node"]),
])
def test_mpirun_args_keep_working(tmp_path, args, flags):
    out = source('pbs_slots 1 | mpirun_flags openmpi "$PWD/h"', tmp_path, ["a", "b"], NCPUS=2, MPIRUN_ARGS=args)
    assert out.split() == [str(tmp_path / "h") if f == "H" else f for f in flags]
    assert (tmp_path / "h").exists() == ("H" in flags)


def test_no_pbs_no_host_file(tmp_path):
    """Outside PBS (no node file) mpirun gets no host file: the launcher as before."""
    assert source('mpirun_flags openmpi "$PWD/h" </dev/null', tmp_path).split() == ["--bind-to", "none"]
    assert not (tmp_path / "h").exists()


def test_pbs_script_header_states_the_rule():
    header = (ROOT / "cluster" / "pbs-fit.pbs").read_text().split("set -euo pipefail")[0]
    for word in ("NCPUS", "PBS_NUM_PPN", "distinct nodes", "host file", "THREADS"):
        assert word in header, word
    assert "lines of $PBS_NODEFILE / THREADS" not in header


# --------------------------------------------------------------------------- guide recipes


def readme_section(title: str) -> str:
    """The body of the numbered section ``title`` of docs/guide/deployment.md."""
    text = (ROOT / "docs" / "guide" / "deployment.md").read_text()
    m = re.search(rf"^## [\d.]* *{re.escape(title)}[^\n]*\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert m, f"docs/guide/deployment.md has no section '{title}'"
    return m.group(1)


def test_readme_sections_on_workers_one_machine_and_versions():
    workers = readme_section("How many workers help")
    assert "block_rows" in workers and "client" in workers
    one = readme_section("One machine")
    assert "threaded scheduler" in one and "--local" in one
    versions = readme_section("The same versions everywhere")
    assert "client.get_versions(check=True" in versions


@pytest.mark.slow
def test_readme_zarr_conversion_recipe_runs(tmp_path):
    """The recipe of "Training data beyond the client's memory", run as written on a tiny CSV
    (file names replaced): the zarr group it writes loads back lazily, rows in order, chunked
    by whole rows."""
    import zarr

    from distsketch.io.loaders import load_dataset

    section = readme_section("Training data beyond the client's memory")
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    recipe = next((b for b in blocks if "create_array" in b), None)
    assert recipe, "no conversion recipe (```python ... create_array ...```) in the section"
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=300)
    parts = [tmp_path / "part-1.csv", tmp_path / "part-2.csv"]
    for p, rows in zip(parts, (slice(0, 170), slice(170, 300))):
        np.savetxt(p, np.column_stack([X[rows], y[rows]]), delimiter=",", header="a,b,c,target", comments="")
    code = (recipe.replace('"train-*.csv"', repr(str(tmp_path / "part-*.csv")))
                  .replace('"/scratch/me/train.zarr"', repr(str(tmp_path / "train.zarr"))))
    assert code != recipe, "the recipe's file names changed: update this test"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=60)
    Xz, Yz = load_dataset(tmp_path / "train.zarr")
    assert isinstance(Xz, zarr.Array) and Xz.shape == (300, 3)
    np.testing.assert_array_equal(Xz[:], X)
    np.testing.assert_array_equal(np.asarray(Yz[:]).reshape(300, -1), y.reshape(300, 1))
    assert Xz.chunks[1] == 3 and Yz.chunks[1] == 1  # chunks of whole rows


@pytest.mark.slow
@pytest.mark.cluster
def test_readme_version_check_runs(tmp_path):
    """§15's check, run as written against a scheduler and a worker started here."""
    from clusterhelpers import dask_processes

    code = next(b for b in re.findall(r"```python\n(.*?)```", readme_section("The same versions everywhere"),
                                      re.DOTALL) if "get_versions" in b)
    with dask_processes(tmp_path, 1) as (sched, _, _):
        code = code.replace('"sched.json"', repr(str(sched)))
        out = subprocess.run([sys.executable, "-c", code + "\nprint('versions ok')"], capture_output=True,
                             text=True, timeout=60, check=False)
    assert out.returncode == 0 and "versions ok" in out.stdout, out.stderr
