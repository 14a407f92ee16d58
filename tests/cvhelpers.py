"""Shared by the CV tests: SISOKR refitted densely on each fold's rows (brute force)."""

from __future__ import annotations

import numpy as np

from distsketch.engine.sums import fold_ids


def gauss(A, g):
    """Gaussian kernel matrix ``exp(−g‖a_i − a_j‖²)`` of the rows of ``A``, densely."""
    return np.exp(-g * ((A[:, None, :] - A[None, :, :]) ** 2).sum(-1))


def white(B):
    """Eigen whitening of ``B``: ``U_r diag(s_r^{-1/2})``, eigenvalues above 1e-10·max."""
    s, U = np.linalg.eigh(0.5 * (B + B.T))
    keep = s > 1e-10 * s[-1]
    return U[:, keep] / np.sqrt(s[keep])


def sisokr_brute_force(model, X, Y, lams, ranks, folds, gx, gy):
    """SISOKR on each fold's training rows in the fixed (whitened) feature maps, densely:
    Φ_X = K_X R_Xᵀ T_X, Φ_Y = K_Y R_Yᵀ T_Y, W = Φ_Y,trᵀ Φ_X,tr (Φ_X,trᵀ Φ_X,tr + n_tr λ)^{-1};
    rank p: g ↦ Q_p Q_pᵀ g with Q the principal axes of the training predictions; the
    validation surrogate error ‖ĥ(x) − ψ(y)‖² = k(y,y) − 2 gᵀφ_Y(y) + ‖g‖²."""
    n = len(X)
    Kx, Ky = gauss(X, gx), gauss(Y, gy)
    Rx, Ry = (np.asarray(r.toarray() if hasattr(r, "toarray") else r)
              for r in (model.input_sketch_.matrix(), model.output_sketch_.matrix()))
    Px = Kx @ Rx.T @ white(Rx @ Kx @ Rx.T)
    Py = Ky @ Ry.T @ white(Ry @ Ky @ Ry.T)
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
