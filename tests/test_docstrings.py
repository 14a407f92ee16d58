"""The examples of the API reference (numpydoc ``Examples`` sections) run and show what they
print, so that the reference built by ``make docs`` stays true."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: Modules whose docstrings hold examples (the public objects of docs/api/).
MODULES = [
    "distsketch.backends.base", "distsketch.decoding.candidates", "distsketch.engine.mapreduce",
    "distsketch.engine.rows", "distsketch.engine.schedulers", "distsketch.engine.transform",
    "distsketch.io.arff", "distsketch.io.arrays", "distsketch.io.delimited",
    "distsketch.io.loaders", "distsketch.io.persist", "distsketch.io.tables",
    "distsketch.kernels.base", "distsketch.kernels.sparse", "distsketch.kernels.standardized",
    "distsketch.losses.base", "distsketch.metrics", "distsketch.model_selection.krr_cv",
    "distsketch.model_selection.select", "distsketch.model_selection.sisokr_cv",
    "distsketch.models.krr", "distsketch.models.regressors", "distsketch.models.sisokr",
    "distsketch.models.transformers", "distsketch.options", "distsketch.sketches.base",
    "distsketch.sketches.leverage", "distsketch.solvers.routes", "distsketch.testing.contracts",
    "distsketch.tuning",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    examples = 0
    for test in finder.find(module, name):
        examples += len(test.examples)
        runner.run(test)
    assert examples > 0, f"{name}: no examples found"
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{name}: {failed} of {attempted} examples failed (output above)"
