"""docs/guide/extending.md's recipes followed in a test file, editing no package file: a new sketch and
a new kernel, defined here, pass the contract suites and fit, save and load like the shipped
ones. (The backend recipe is followed in tests/test_backends.py.)"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import distsketch as ds
from distsketch.kernels.base import KERNELS, Kernel, kernel_from_config
from distsketch.sketches.base import SKETCHES, Sketch, SparseSketch, sketch_from_config
from distsketch.sketches.tiled import TILE
from distsketch.testing.contracts import KernelContract, SketchContract
from reference.closed_forms import exact_krr_predict, sisokr_scores
from reference.errors import norm_rel_err

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


@pytest.mark.slow
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
    dense = exact_krr_predict(Cauchy(2.0), X, y, Xq, 1e-3)
    # the same normal equations solved two ways: rounding times cond(K + nλI) <= 1 + ‖K‖/(nλ)
    # = 1 + 40 / 0.04, relative to the largest prediction
    assert norm_rel_err(krr.predict(Xq), dense) <= 1e-16 * (1 + 40 / 0.04) * 100


def test_a_loss_defined_here_registers_itself_and_declares_its_capabilities():
    """A loss class that sets ``name`` is in ``LOSSES`` by being defined (strings and configs
    find it; an intermediate class without its own name is not registered); the routes ask
    its capabilities, not its class: ADMM needs ``has_prox`` and ``projects_dual``, PCG
    ``normal_equations``."""
    from distsketch.losses.base import LOSSES, Loss, check_loss, loss_from_config
    from distsketch.losses.radial import Huber, Squared
    from distsketch.solvers.lipschitz import admm

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


# ---------------------------------------------------------------------------- a loss
# docs/guide/extending.md, "How to add a loss", followed with a loss defined here (no package file
# edited): registered by its name, checked against its own derivatives and conjugate, fitted
# on both sweep routes against scipy on the same objective, saved, loaded and configured.

import numbers  # noqa: E402
import textwrap  # noqa: E402

from distsketch.cli.config import ConfigError, load_config  # noqa: E402
from distsketch.losses.base import LOSSES, Curvature, Loss, check_loss, loss_from_config  # noqa: E402
from distsketch.solvers.lipschitz import admm  # noqa: E402


class SquaredEpsilonInsensitive(Loss):
    """``h(r) = ½ max(‖r‖₂ − ε, 0)²``: the squared ε-insensitive loss (L2-SVR), radial for d
    outputs. Convex with a 1-Lipschitz gradient, so Newton needs no smoothing; its conjugate
    ``h*(β) = ½‖β‖² + ε‖β‖`` on all of R^d is of the form the certificate's block sums give
    exactly. (log-cosh and pseudo-Huber are not: their conjugates are no function of
    ``Σβ²`` and ``Σ‖β‖``, so their gaps could not be certified to a small tol.)

    The recipe: ``name`` (registers it), ``__init__`` storing ``epsilon``, ``check``; for
    Newton ``value``, ``gradient``, ``curvature``, ``curvature_kind``, ``curvature_levels``;
    for the certificate ``dual_scale``, ``conjugate_sum``; for ADMM ``prox`` and
    ``projects_dual`` with ``project_dual``.
    """

    name = "test_squared_epsilon_insensitive"
    projects_dual = True  # dom h* = R^d: the projection is the identity

    def __init__(self, epsilon: float = 0.1):
        self.epsilon = epsilon

    def check(self, d: int) -> None:
        eps = self.epsilon
        if (isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not np.isfinite(eps)
                or eps < 0):
            raise ValueError(f"loss: SquaredEpsilonInsensitive(epsilon={eps!r}): epsilon must "
                             f"be a non-negative finite number")

    def _parts(self, R):
        """``(t, over, g)``: ``t = ‖r‖``, ``over = max(t − ε, 0)`` (= p'(t)), ``g = over/t``."""
        t = np.sqrt(np.einsum("ij,ij->i", R, R))
        over = np.maximum(t - float(self.epsilon), 0.0)
        g = np.where(over > 0, over / np.where(t > 0, t, 1.0), 0.0)
        return t, over, g

    # -- Newton
    def value(self, R, mu=0.0):
        return 0.5 * np.square(self._parts(R)[1])

    def gradient(self, R, mu=0.0):
        return R * self._parts(R)[2][:, None]

    def curvature_kind(self, d, *, exact=True):
        return "scalar" if d == 1 or not exact else "full"

    def curvature_levels(self, d, mu=0.0, *, exact=True):
        # scalar curvature is 0 in the tube and 1 beyond: whichever most rows sit at is base
        return (0.0, 1.0) if self.curvature_kind(d, exact=exact) == "scalar" else (0.0,)

    def curvature(self, R, mu=0.0, *, exact=True, base=None):
        base = 0.0 if base is None else float(base)
        t, over, g = self._parts(R)
        out = over > 0
        d = R.shape[1]
        if d == 1 or not exact:  # h'' (d = 1), or the majorant λ_max = 1 beyond the tube
            w = out.astype(np.float64) - base
            rows = np.flatnonzero(w)
            return Curvature(base, "scalar", rows, w[rows])
        # beyond the tube g·I + (1 − g)·r̂r̂ᵀ, in it 0
        rows = np.flatnonzero(out) if base == 0.0 else np.arange(len(R))
        u = R[rows] / np.where(t[rows] > 0, t[rows], 1.0)[:, None]
        vals = ((g[rows] - base)[:, None, None] * np.eye(d)
                + (out[rows] - g[rows])[:, None, None] * (u[:, :, None] * u[:, None, :]))
        return Curvature(base, "full", rows, vals)

    # -- the certificate: h*(β) = ½‖β‖² + ε‖β‖ on R^d
    def dual_scale(self, c):
        return 1.0  # α_i − c is in dom h* = R^d as it is

    def conjugate_sum(self, stats, t, c, n, mu):
        t = float(t)
        quad = 0.5 * (1.0 + mu) * t * t * float(np.sum(stats["aa"]) - n * np.dot(c, c))
        # Σ‖α_i − c‖ ≤ Σ‖α_i‖ + n‖c‖ (exact for c = 0)
        lin = float(self.epsilon) * t * (float(stats["an"]) + n * float(np.linalg.norm(c)))
        return quad + lin

    # -- ADMM
    def prox(self, V, t):
        s = np.sqrt(np.einsum("ij,ij->i", V, V))
        eps = float(self.epsilon)  # the norm of the minimiser: kept in the tube, else shrunk
        q = np.where(s <= eps, s, (s + t * eps) / (1.0 + t))
        return V * np.where(s > 0, q / np.where(s > 0, s, 1.0), 0.0)[:, None]

    def project_dual(self, alpha):
        return alpha


SQ_EPS = SquaredEpsilonInsensitive.name


def test_new_loss_is_registered_configured_and_checked(tmp_path):
    """The name works wherever a loss is named (strings, config dicts, TOML) and ``check``
    refuses a bad parameter there; the routes read its capabilities."""
    assert LOSSES[SQ_EPS] is SquaredEpsilonInsensitive
    assert check_loss(SQ_EPS, 1) == SquaredEpsilonInsensitive()
    cfg = json.loads(json.dumps(SquaredEpsilonInsensitive(0.25).to_config()))
    assert cfg == {"type": SQ_EPS, "epsilon": 0.25}
    assert loss_from_config(cfg) == SquaredEpsilonInsensitive(0.25)
    assert SquaredEpsilonInsensitive(0.25) != SquaredEpsilonInsensitive(0.3)
    with pytest.raises(ValueError, match=r"^loss: SquaredEpsilonInsensitive\(epsilon=-1"):
        check_loss({"type": SQ_EPS, "epsilon": -1}, 1)
    assert admm.supports(SquaredEpsilonInsensitive()) and SquaredEpsilonInsensitive().has_prox
    assert not SquaredEpsilonInsensitive().normal_equations  # not KRR: no PCG route
    model = """
        [model]
        type = "regressor"
        lam = 1e-3
        loss = {loss}

        [model.kernel]
        name = "gaussian"
        gamma = 0.5
    """
    for loss, want in ((f'"{SQ_EPS}"', SquaredEpsilonInsensitive()),
                       (f'{{type = "{SQ_EPS}", epsilon = 0.25}}', SquaredEpsilonInsensitive(0.25))):
        (tmp_path / "fit.toml").write_text(textwrap.dedent(model.format(loss=loss)))
        got = load_config(tmp_path / "fit.toml", require_train=False).model_params["loss"]
        assert check_loss(got, 1) == want
    (tmp_path / "fit.toml").write_text(textwrap.dedent(model.format(
        loss=f'{{type = "{SQ_EPS}", epsilon = -1.0}}')))
    with pytest.raises(ConfigError, match="^model.loss: SquaredEpsilonInsensitive"):
        load_config(tmp_path / "fit.toml", require_train=False)
    with pytest.raises(ValueError, match="pcg"):  # PCG solves the squared loss only
        ds.SketchedRegressor(loss=SQ_EPS, sketch=ds.SubSampling(5), solver="pcg").fit(
            np.arange(20.0).reshape(10, 2), np.arange(10.0))


@pytest.mark.parametrize("d", [1, 3])
def test_new_loss_derivatives_conjugate_and_prox(d):
    """What the solvers assume of the loss, against its own ``value``: the gradient and the
    (exact) curvature are its central differences, the majorant bounds the curvature,
    Fenchel–Young holds with equality at the gradient (the certificate's conjugate), and
    ``prox`` satisfies its optimality condition ``(v − z)/t = ∇h(z)``."""
    loss = SquaredEpsilonInsensitive(0.3)
    rng = np.random.default_rng(7)
    R = rng.normal(size=(40, d)) * np.geomspace(0.02, 3.0, 40)[:, None]
    t = np.linalg.norm(R, axis=1)
    R = R[np.abs(t - 0.3) > 1e-3]  # away from the kink of the curvature
    h = 1e-6
    steps = h * np.eye(d)
    fd = np.stack([(loss.value(R + e) - loss.value(R - e)) / (2 * h) for e in steps], axis=1)
    alpha = loss.gradient(R)
    np.testing.assert_allclose(alpha, fd, rtol=1e-7, atol=1e-9)
    jac = np.stack([(loss.gradient(R + e) - loss.gradient(R - e)) / (2 * h) for e in steps],
                   axis=2)  # (b, d, d)
    for exact in (True, False):
        for base in loss.curvature_levels(d, exact=exact):
            curv = loss.curvature(R, exact=exact, base=base)
            assert curv.kind == loss.curvature_kind(d, exact=exact) and curv.base == base
            H = np.broadcast_to(base * np.eye(d), (len(R), d, d)).copy()
            H[curv.rows] += (curv.values[:, None, None] * np.eye(d) if curv.kind == "scalar"
                             else curv.values)
            if exact:
                np.testing.assert_allclose(H, jac, atol=1e-6)
            else:  # a majorant: H − ∇²h ⪰ 0
                assert np.linalg.eigvalsh(H - jac).min() >= -1e-6
    stats = {"aa": np.einsum("ij,ij->j", alpha, alpha),
             "an": np.sqrt(np.einsum("ij,ij->i", alpha, alpha)).sum()}
    fy = loss.value(R).sum() + loss.conjugate_sum(stats, 1.0, np.zeros(d), len(R), 0.0)
    assert fy == pytest.approx(np.einsum("ij,ij->", R, alpha), rel=1e-13)
    for step in (0.3, 2.0):
        Z = loss.prox(R, step)
        np.testing.assert_allclose((R - Z) / step, loss.gradient(Z), atol=1e-13)
    np.testing.assert_array_equal(loss.project_dual(alpha), alpha)


def _sq_eps_dense(model, X, Y, lam, eps, intercept):
    """The fitted model's problem solved densely and independently (docs/design/lipschitz.md,
    "Lipschitz losses"): features ``φ(x) = Tᵀ k(L, x)`` whitened on the fitted landmarks
    ``L`` (``Tᵀ K_LL T = I``), ``P(W, b₀) = (1/n) Σ_i ½ max(‖Wᵀφ_i + b₀ − y_i‖ − ε, 0)²
    + (λ/2)‖W‖²``, minimised by scipy's trust-exact (exact gradient and generalised Hessian,
    the ones written here). Returns ``(objective, a, b₀, P)``: the landmark coefficients
    ``a = T W`` (``f(x) = k(x, L) a + b₀``) and ``P(a, b₀)`` evaluating the objective at any
    such model (the penalty ``(λ/2) Tr(aᵀ K_LL a)``)."""
    from scipy.optimize import minimize

    k, L = model.kernel_, model.landmarks_
    K_LL, K_XL = k(L, L), k(X, L)
    w, V = np.linalg.eigh(K_LL)
    assert w[0] > 1e-10 * w[-1]  # every direction kept, on both sides
    T = V / np.sqrt(w)
    Phi = K_XL @ T
    if intercept:
        Phi = np.hstack([Phi, np.ones((len(X), 1))])
    n, p = Phi.shape
    d = Y.shape[1]
    pen = np.full((p, 1), lam)
    if intercept:
        pen[-1] = 0.0

    def parts(theta):
        W = theta.reshape(p, d)
        res = Phi @ W - Y
        norm = np.linalg.norm(res, axis=1)
        over = np.maximum(norm - eps, 0.0)
        return W, res, norm, over

    def fun(theta):
        W, _, _, over = parts(theta)
        return 0.5 * np.mean(over ** 2) + 0.5 * float(np.sum(pen * W * W))

    def jac(theta):
        W, res, norm, over = parts(theta)
        A = res * np.where(over > 0, over / np.where(norm > 0, norm, 1.0), 0.0)[:, None]
        return (Phi.T @ A / n + pen * W).reshape(-1)

    def hess(theta):
        _, res, norm, over = parts(theta)
        out = over > 0
        g = np.where(out, over / np.where(norm > 0, norm, 1.0), 0.0)
        u = res / np.where(norm > 0, norm, 1.0)[:, None]
        Hr = (g[:, None, None] * np.eye(d)
              + (out - g)[:, None, None] * (u[:, :, None] * u[:, None, :]))
        H = np.einsum("ip,iac,iq->paqc", Phi, Hr, Phi).reshape(p * d, p * d) / n
        return H + np.diag(np.repeat(pen[:, 0], d))

    res = minimize(fun, np.zeros(p * d), jac=jac, hess=hess, method="trust-exact",
                   options={"gtol": 1e-14, "maxiter": 200})
    W = res.x.reshape(p, d)
    assert np.linalg.norm(jac(res.x)) <= 1e-12, res.message
    a = T @ W[:len(w)]
    b0 = W[-1] if intercept else np.zeros(d)

    def P(a, b0):
        out = np.maximum(np.linalg.norm(K_XL @ a + b0 - Y, axis=1) - eps, 0.0)
        return 0.5 * np.mean(out ** 2) + 0.5 * lam * float(np.sum(a * (K_LL @ a)))

    return res.fun, a, b0, P


@pytest.mark.slow
@pytest.mark.parametrize("d, intercept", [(1, True), (1, False), (3, True)])
def test_new_loss_fits_the_dense_objective_on_both_routes_and_saves(tmp_path, d, intercept):
    """Newton (the loss given as an object) and ADMM (by its name) against scipy on the same
    objective, to bounds derived from the certified gap: ``D ≤ P* ≤ P_ref`` gives
    ``P − P_ref ≤ gap``, and ``P`` is λ-strongly convex in the whitened coefficients ``v``
    (``‖v‖² = Tr(aᵀ K_LL a)``; the intercept is unpenalised), so each point lies within
    ``√(2(P − P*)/λ)`` of the optimum: ``‖Δv‖ ≤ √(2 gap/λ) + √(2(P_ref − P + gap)/λ)``, and
    a prediction ``f(x) − b₀`` moves by at most ``‖φ(x)‖ ‖Δv‖``. A semismooth Newton on this
    piecewise-quadratic loss ends in a few sweeps (a wrong curvature would crawl). The model
    saved with the fit loads with identical predictions, and only while the loss is
    registered."""
    rng = np.random.default_rng(11)
    n, lam, eps, tol = 120, 1e-3, 0.1, 1e-9
    X = rng.normal(size=(n, 2))
    Y = np.stack([np.sin(2 * X[:, 0]) + 0.5 * X[:, 1], np.cos(X[:, 0]) - 0.3 * X[:, 1],
                  X[:, 0] * X[:, 1]], axis=1)[:, :d] + 0.1 * rng.normal(size=(n, d))
    Y[:8] += 3.0  # outliers: beyond the tube, where the loss is quadratic
    y = Y[:, 0] if d == 1 else Y
    Xq = rng.normal(size=(15, 2))
    kw = dict(kernel=ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(25), lam=lam, tol=tol,
              fit_intercept=intercept, random_state=0,
              options=ds.EngineOptions(block_dtype="float64", block_rows=50))
    newton = ds.SketchedRegressor(loss=SquaredEpsilonInsensitive(eps), max_iter=50,
                                  store=tmp_path / "m.zarr", **kw).fit(X, y)
    via_admm = ds.SketchedRegressor(loss=SQ_EPS, solver="admm", max_iter=2000, **kw).fit(X, y)
    assert (newton.solver_, via_admm.solver_) == ("newton", "admm")
    assert newton.n_iter_ <= 12
    p_ref, a_ref, b_ref, P = _sq_eps_dense(newton, X, Y, lam, eps, intercept)
    K_LL = newton.kernel_(newton.landmarks_, newton.landmarks_)
    k_q = newton.kernel_(Xq, newton.landmarks_)
    # ‖φ(x)‖ = ‖Tᵀ k(L, x)‖ = √(k(x, L) K_LL⁻¹ k(L, x))
    phi_norm = np.sqrt(np.einsum("ij,ji->i", k_q, np.linalg.solve(K_LL, k_q.T)))
    for model in (newton, via_admm):
        np.testing.assert_array_equal(model.landmarks_, newton.landmarks_)
        p, gap = model.objective_, model.duality_gap_
        assert -1e-13 * p <= gap <= tol * p  # (P − D in float64: it may round below 0)
        gap = max(gap, 0.0)
        a = model.dual_coef_.reshape(-1, d)
        b0 = np.atleast_1d(model.intercept_)
        assert P(a, b0) == pytest.approx(p, rel=1e-12)  # its objective, recomputed densely
        assert p - p_ref <= gap + 1e-15 * p and p_ref - p <= tol * p
        dv = np.sqrt(np.sum((a - a_ref) * (K_LL @ (a - a_ref))))
        bound = np.sqrt(2 * gap / lam) + np.sqrt(2 * max(p_ref - p + gap, 0.0) / lam)
        assert dv <= bound
        moved = np.abs(k_q @ (a - a_ref))
        assert np.all(moved <= phi_norm[:, None] * bound + 1e-12)
        if not intercept:
            np.testing.assert_array_equal(b0, 0.0)
    again = ds.load(tmp_path / "m.zarr")
    assert again.loss == SquaredEpsilonInsensitive(eps)
    np.testing.assert_array_equal(again.predict(Xq), newton.predict(Xq))
    cls = LOSSES.pop(SQ_EPS)
    try:  # a saved model names its loss: loading needs the class registered (imported)
        with pytest.raises(ValueError, match=f"unknown loss '{SQ_EPS}'"):
            ds.load(tmp_path / "m.zarr")
    finally:
        LOSSES[SQ_EPS] = cls
