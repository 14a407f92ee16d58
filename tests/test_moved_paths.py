"""The flat layout's module paths keep working for one release: importing one finds the module
at its new place and warns, pickles that name an old path load, and the finder never shadows
a module that exists."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import distsketch as ds
from distsketch.compat import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_is_the_new_module_with_a_warning(old):
    new = importlib.import_module(f"distsketch.{MOVED[old]}")
    sys.modules.pop(f"distsketch.{old}", None)
    with pytest.warns(DeprecationWarning, match=rf"distsketch\.{old} moved to "
                                                rf"distsketch\.{MOVED[old]}"):
        assert importlib.import_module(f"distsketch.{old}") is new


@pytest.mark.slow
def test_an_old_attribute_path_warns_and_resolves():
    code = ("import warnings, distsketch\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    cv = distsketch.cv\n"
            "assert cv.SISOKRCV is distsketch.SISOKRCV, cv\n"
            "assert [x.category.__name__ for x in w] == ['DeprecationWarning'], w\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_pickle_naming_an_old_path_loads():
    """An estimator pickled by the flat layout named its class ``distsketch.regressors``."""
    model = ds.SketchedRegressor(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(5), lam=1e-2)
    data = pickle.dumps(model, protocol=0)  # text opcodes: the module path can be edited
    old = data.replace(b"distsketch.models.regressors", b"distsketch.regressors")
    assert old != data
    sys.modules.pop("distsketch.regressors", None)
    with pytest.warns(DeprecationWarning, match="distsketch.regressors moved"):
        again = pickle.loads(old)
    assert type(again) is type(model) and again.get_params()["lam"] == 1e-2


def test_the_finder_knows_only_old_paths():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("distsketch.no_such_module")
    assert not set(MOVED) & {p.split(".")[0] for p in MOVED.values()}
    root = Path(ds.__file__).parent
    for old in MOVED:  # no old name is also a module or package that exists today
        assert not (root / f"{old}.py").exists() and not (root / old).exists(), old


def test_a_module_reached_by_its_old_path_keeps_its_own_spec():
    """Relative imports inside functions of the module still resolve (Python checks
    ``__package__`` against ``__spec__.parent``)."""
    sys.modules.pop("distsketch.regressors", None)
    with pytest.warns(DeprecationWarning):
        module = importlib.import_module("distsketch.regressors")
    assert module.__spec__.name == "distsketch.models.regressors"
    assert module.__spec__.parent == module.__package__
