"""docs/design.md's recipes followed in a test file, editing no package file: a new sketch and
a new kernel, defined here, pass the contract suites and fit, save and load like the shipped
ones. (The backend recipe is followed in tests/test_backends.py.)"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from naive import norm_rel_err, sisokr_scores

import distsketch as ds
from distsketch.kernels import KERNELS, Kernel, kernel_from_config
from distsketch.sketches import SKETCHES, TILE, Sketch, SparseSketch, sketch_from_config
from distsketch.testing import KernelContract, SketchContract

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)


# ---------------------------------------------------------------------------- a sketch


class SubSamplingWithReplacement(Sketch):
    """Nyström with replacement: row r of R picks a uniform training row, ``sqrt(n/m)``.

    The recipe: a ``name`` (registers it), ``__init__`` storing its arguments, ``check`` naming
    the argument, ``realize`` drawing a SparseSketch from ``(seed, n)``.
    """

    name = "test_subsampling_with_replacement"

    def __init__(self, m: int):
        self.m = m

    def check(self, n: int, *, argument: str) -> None:
        if isinstance(self.m, bool) or not isinstance(self.m, int) or self.m < 1:
            raise ValueError(f"{argument}: SubSamplingWithReplacement: m must be a positive "
                             f"integer, got {self.m!r}")

    def realize(self, n: int, *, seed: int, data=None):
        self.check(n, argument="sketch")
        rng = np.random.default_rng([int(seed), 0])
        cols = rng.integers(0, n, size=self.m)
        return SparseSketch.from_entries(self, n, seed, self.m, np.arange(self.m), cols,
                                         np.full(self.m, np.sqrt(n / self.m)))


class TestSketchRecipe(SketchContract):
    @pytest.fixture(params=[50, TILE + 123], ids=["n50", "big"])
    def case(self, request):
        return SubSamplingWithReplacement(12), request.param


def test_new_sketch_is_registered_and_configurable():
    assert SKETCHES["test_subsampling_with_replacement"] is SubSamplingWithReplacement
    cfg = json.loads(json.dumps(SubSamplingWithReplacement(7).to_config()))
    assert sketch_from_config(cfg) == SubSamplingWithReplacement(7)


@pytest.mark.parametrize("side", ["input", "output", "both"])
def test_new_sketch_fits_prop1_and_saves(tmp_path, small_problem, side):
    """SISOKR with the new sketch equals Prop. 1's dense closed form (float64 blocks), and a
    saved model reloads its realisation (never redrawn) with the same predictions."""
    X, Y, Xq, Yc = small_problem
    kx, ky = ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.2)
    sx = SubSamplingWithReplacement(15) if side in ("input", "both") else None
    sy = SubSamplingWithReplacement(12) if side in ("output", "both") else None
    model = ds.SISOKR(kx, ky, input_sketch=sx, output_sketch=sy, lam=1e-3, random_state=8,
                      store=tmp_path / "s",
                      options=ds.EngineOptions(block_dtype="float64", block_rows=9)).fit(X, Y)
    want = sisokr_scores(kx, ky, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                         X, Y, Xq, Yc, 1e-3)
    # relative to the largest score: repeated rows make R K Rᵀ singular, and both sides drop
    # its null space at the same relative threshold; entries near 0 carry absolute rounding
    assert norm_rel_err(model.score_candidates(Xq, Yc), want) <= 1e-8
    again = ds.load(tmp_path / "s")
    np.testing.assert_array_equal(again.score_candidates(Xq, Yc), model.score_candidates(Xq, Yc))


# ---------------------------------------------------------------------------- a kernel


class Cauchy(Kernel):
    """``k(x, x') = 1 / (1 + gamma ‖x − x'‖²)`` (positive definite: a scale mixture of
    Gaussians). The recipe: ``_name`` (registers it), validation in ``_validate``,
    ``_compute`` and ``_diag`` in the backend's namespace ``be.xp``."""

    _name = "test_cauchy"

    def __init__(self, gamma: float = 1.0):
        self.gamma = gamma
        self._validate()

    def _validate(self) -> None:
        if not (isinstance(self.gamma, (int, float)) and not isinstance(self.gamma, bool)
                and self.gamma > 0):
            raise ValueError(f"Cauchy: gamma must be a positive float, got {self.gamma!r}")

    def _compute(self, A, B, be):
        xp = be.xp
        A = A.toarray() if be.issparse(A) else A
        B = B.toarray() if be.issparse(B) else B
        D = xp.einsum("ij,ij->i", A, A)[:, None] + xp.einsum("ij,ij->i", B, B)[None, :]
        D -= 2.0 * (A @ B.T)
        xp.maximum(D, 0.0, out=D)
        D *= self.gamma
        D += 1.0
        return 1.0 / D


class TestKernelRecipe(KernelContract):
    @pytest.fixture(params=[Cauchy(), Cauchy(gamma=3.5)], ids=repr)
    def kernel(self, request):
        return request.param


def test_new_kernel_is_registered_matches_its_formula_and_fits(small_problem):
    assert KERNELS["test_cauchy"] is Cauchy
    assert kernel_from_config(json.loads(json.dumps(Cauchy(2.0).to_config()))) == Cauchy(2.0)
    X, Y, Xq, _ = small_problem
    want = np.array([[1.0 / (1.0 + 2.0 * np.sum((a - b) ** 2)) for b in X] for a in Xq])
    np.testing.assert_allclose(Cauchy(2.0)(Xq, X), want, rtol=1e-13)
    y = np.sin(X[:, 0]) + X[:, 1]
    krr = _KRR({"name": "test_cauchy", "gamma": 2.0}, sketch=None, lam=1e-3).fit(X, y)
    K = Cauchy(2.0)(X, X)
    dense = Cauchy(2.0)(Xq, X) @ np.linalg.solve(K + len(X) * 1e-3 * np.eye(len(X)), y)
    # the same normal equations solved two ways: rounding times cond(K + nλI) <= 1 + ‖K‖/(nλ)
    # = 1 + 40 / 0.04, relative to the largest prediction
    assert norm_rel_err(krr.predict(Xq), dense) <= 1e-16 * (1 + 40 / 0.04) * 100


def test_a_loss_defined_here_registers_itself_and_declares_its_capabilities():
    """A loss class that sets ``name`` is in ``LOSSES`` by being defined (strings and configs
    find it; an intermediate class without its own name is not registered); the routes ask
    its capabilities, not its class: ADMM needs ``has_prox`` and ``projects_dual``, PCG
    ``normal_equations``."""
    from distsketch import admm
    from distsketch.losses import LOSSES, Huber, Loss, Squared, check_loss, loss_from_config

    class _Base(Huber):
        pass

    class WideHuber(_Base):
        name = "test_wide_huber"

    class NoProx(Loss):
        name = "test_no_prox"

    try:
        assert LOSSES["test_wide_huber"] is WideHuber and "_Base" not in LOSSES
        assert isinstance(check_loss("test_wide_huber", 1), WideHuber)
        assert loss_from_config(WideHuber(kappa=2.0).to_config()) == WideHuber(kappa=2.0)
        assert admm.supports(WideHuber()) and not WideHuber().normal_equations
        assert not admm.supports(NoProx()) and not NoProx().has_prox
        assert Squared().normal_equations and admm.supports(Squared())
        alpha = np.array([[3.0, 4.0], [0.3, 0.4]])
        np.testing.assert_allclose(WideHuber(kappa=2.0).project_dual(alpha),
                                   [[1.2, 1.6], [0.3, 0.4]])
        with pytest.raises(NotImplementedError):
            NoProx().project_dual(alpha)
    finally:
        LOSSES.pop("test_wide_huber", None)
        LOSSES.pop("test_no_prox", None)
