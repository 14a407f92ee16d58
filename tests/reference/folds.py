"""Cross-validation by brute force: SISOKR refitted densely on each fold's rows."""

from __future__ import annotations

import numpy as np

from distsketch.engine.sums import fold_ids
from reference.closed_forms import dense, white
from reference.kernels import gaussian_gram


def width_sketch(sketch, kernel, landmarks):
    """The realised sketch a fit used at ``kernel``: ``sketch`` itself, or, for a pre-whitened
    one (``EngineOptions.prewhiten``: each width of a grid whitened for its own kernel), the
    drawn sketch whitened for ``kernel`` as the pass does (``T`` is a function of the kernel,
    the landmarks and the threshold)."""
    from distsketch.engine.prewhiten import prewhitened
    from distsketch.sketches import WhitenedSketch

    if not isinstance(sketch, WhitenedSketch):
        return sketch
    return prewhitened(sketch.inner, kernel, landmarks, rtol=sketch.rtol)


def whitened_features(model, X, Y, gx, gy):
    """``(Φ_X, Φ_Y, K_Y)``: the fixed (whitened) feature maps of a fitted SISOKR(CV)
    ``model``'s realised sketches with Gaussian kernels of widths ``gx``, ``gy``,
    ``Φ_X = K_X R_Xᵀ T_X``, ``Φ_Y = K_Y R_Yᵀ T_Y`` (``Tᵀ R K Rᵀ T = I``), densely; a
    pre-whitened input sketch as the pass used it at width ``gx`` (:func:`width_sketch`)."""
    from distsketch.kernels import Gaussian

    Kx, Ky = gaussian_gram(X, gamma=gx), gaussian_gram(Y, gamma=gy)
    sx = width_sketch(model.input_sketch_, Gaussian(gx), model.input_landmarks_)
    Rx, Ry = (dense(r) for r in (sx.matrix(), model.output_sketch_.matrix()))
    Px = Kx @ Rx.T @ white(Rx @ Kx @ Rx.T)
    Py = Ky @ Ry.T @ white(Ry @ Ky @ Ry.T)
    return Px, Py, Ky


def sisokr_brute_force(model, X, Y, lams, ranks, folds, gx, gy):
    """SISOKR on each fold's training rows in the fixed (whitened) feature maps, densely:
    Φ_X = K_X R_Xᵀ T_X, Φ_Y = K_Y R_Yᵀ T_Y, W = Φ_Y,trᵀ Φ_X,tr (Φ_X,trᵀ Φ_X,tr + n_tr λ)^{-1};
    rank p: g ↦ Q_p Q_pᵀ g with Q the principal axes of the training predictions; the
    validation surrogate error ‖ĥ(x) − ψ(y)‖² = k(y,y) − 2 gᵀφ_Y(y) + ‖g‖²."""
    n = len(X)
    Px, Py, Ky = whitened_features(model, X, Y, gx, gy)
    f = fold_ids(0, n, n, folds)
    grid = [(lam, p) for lam in lams for p in (ranks or [None])]
    out = np.empty((f.max() + 1, len(grid)))
    for k in range(f.max() + 1):
        tr, va = f != k, f == k
        for j, (lam, p) in enumerate(grid):
            A = Px[tr].T @ Px[tr] + tr.sum() * lam * np.eye(Px.shape[1])
            W = Py[tr].T @ Px[tr] @ np.linalg.inv(A)
            g = Px[va] @ W.T
            if p is not None:
                pred = Px[tr] @ W.T
                w, Q = np.linalg.eigh(pred.T @ pred)
                Qp = Q[:, ::-1][:, :p]
                g = g @ Qp @ Qp.T
            err = np.diag(Ky)[va] - 2 * np.einsum("ij,ij->i", g, Py[va]) \
                + np.einsum("ij,ij->i", g, g)
            out[k, j] = -err.mean()
    return out
