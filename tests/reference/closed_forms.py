"""Naive dense formulas from the papers, the reference every numerical path is tested against.

Everything here is written directly from the closed forms with full n × n Gram matrices and
pseudo-inverses (the distinct-landmark solve: the n × m kernel matrix formed); none of it
shares code with the library's pass or solve.
"""

import numpy as np

PINV_RTOL = 1e-10


def dense(R):
    """A sketch matrix (dense or scipy.sparse) as a numpy array."""
    return R.toarray() if hasattr(R, "toarray") else np.asarray(R)


def white(B):
    """Eigen whitening of ``B``: ``U_r diag(s_r^{-1/2})``, eigenvalues above 1e-10·max."""
    s, U = np.linalg.eigh(0.5 * (B + B.T))
    keep = s > 1e-10 * s[-1]
    return U[:, keep] / np.sqrt(s[keep])


def pinv(A):
    """Pseudo-inverse of a symmetric PSD matrix (eigenvalues below PINV_RTOL·max dropped)."""
    A = 0.5 * (A + A.T)
    return np.linalg.pinv(A, rtol=PINV_RTOL, hermitian=True)


def iokr_scores(kx, ky, X, Y, Xq, Yc, lam):
    """IOKR: k(y,y) − 2 k_x(x, X)(K_X + nλI)^{-1} k_Y(Y, y)."""
    n = X.shape[0]
    Kx = kx(X, X)
    alpha = np.linalg.solve(Kx + n * lam * np.eye(n), kx(X, Xq))  # (n, q)
    return np.diag(ky(Yc, Yc))[None, :] - 2.0 * alpha.T @ ky(Y, Yc)


def sisokr_inner(kx, ky, Rx, Ry, X, Y, Xq, lam):
    """Prop. 1 of SISOKR: the matrix Q with ⟨ĥ(x_q), ψ(y)⟩ = k_Y(y, Y) Q[:, q].

    Q = R_Yᵀ (R_Y K_Y R_Yᵀ)^† R_Y K_Y K_X R_Xᵀ (R_X K_X² R_Xᵀ + nλ R_X K_X R_Xᵀ)^† R_X k_X(X, Xq)
    """
    n = X.shape[0]
    Kx, Ky = kx(X, X), ky(Y, Y)
    Rx, Ry = dense(Rx), dense(Ry)
    left = Ry.T @ pinv(Ry @ Ky @ Ry.T) @ Ry @ Ky
    right = Kx @ Rx.T @ pinv(Rx @ Kx @ Kx @ Rx.T + n * lam * Rx @ Kx @ Rx.T) @ Rx @ kx(X, Xq)
    return left @ right


def sisokr_scores(kx, ky, Rx, Ry, X, Y, Xq, Yc, lam):
    Q = sisokr_inner(kx, ky, Rx, Ry, X, Y, Xq, lam)
    return np.diag(ky(Yc, Yc))[None, :] - 2.0 * (ky(Yc, Y) @ Q).T


def sisokr_linear_predict(kx, Rx, Ry, X, Y, Xq, lam):
    """Linear output kernel: ĥ(x) = Yᵀ Q[:, q] (vectors, no decoding)."""
    from distsketch.kernels.families import Linear

    return (Y.T @ sisokr_inner(kx, Linear(), Rx, Ry, X, Y, Xq, lam)).T


def sketched_krr_predict(k, R, X, y, Xq, lam):
    """Chen & Yang eq. 3: f(Xq) = k(Xq, X) Rᵀ (R K² Rᵀ + nλ R K Rᵀ)^† R K y."""
    n = X.shape[0]
    K = k(X, X)
    R = dense(R)
    beta = pinv(R @ K @ K @ R.T + n * lam * R @ K @ R.T) @ R @ K @ y
    return k(Xq, X) @ R.T @ beta


def exact_krr_predict(k, X, y, Xq, lam):
    n = X.shape[0]
    return k(Xq, X) @ np.linalg.solve(k(X, X) + n * lam * np.eye(n), y)


def pass_sums(kx, Rx, X, ky=None, Ry=None, Y=None, targets=None, C=None, D=None):
    """The pass's sums from full matrices: G, B, M, E, b (docs/design/engine.md, "The streaming pass").

    ``C = K_X R_Xᵀ`` and ``D = K_Y R_Yᵀ`` unless given (e.g. the blocks a store holds)."""
    Rx = dense(Rx)
    C = kx(X, X) @ Rx.T if C is None else np.asarray(C, dtype=np.float64)
    out = {"G": C.T @ C, "B": Rx @ C}
    if ky is not None:
        D = ky(Y, Y) @ dense(Ry).T if D is None else np.asarray(D, dtype=np.float64)
        out["M"] = D.T @ C
        out["E"] = dense(Ry) @ D
    if targets is not None:
        out["b"] = C.T @ targets
    return out


def reduced_rank_inner(kx, ky, Rx, Ry, X, Y, Xq, lam, p, lam1=None):
    """Reduced-rank IOKR (Brogat-Motte et al., JMLR 2022, Algorithms 1–2), densely: the
    training predictions ĥ(x_i) = Ψ Q_i of the (sketched) estimator at λ₁ written in explicit
    coordinates of span{ψ(y_j)} (K_Y = U s Uᵀ, ψ(y_j) ↦ row j of U√s), their top-p principal
    directions E_p, and ĥ_p(x) = E_p E_pᵀ ĥ(x) for the estimator at λ. Returns the matrix
    ``(coordinates of ψ(y) in that span)ᵀ ĥ_p(x)`` as a function: ``inner(Yc)`` (q, c)."""
    Ky = ky(Y, Y)
    s, U = np.linalg.eigh(0.5 * (Ky + Ky.T))
    keep = s > PINV_RTOL * s[-1]
    U, s = U[:, keep], s[keep]
    Phi_T = (U * np.sqrt(s)).T  # (q, n): explicit coordinates of ψ(y_1..n)
    train = Phi_T @ sisokr_inner(kx, ky, Rx, Ry, X, Y, X, lam if lam1 is None else lam1)
    w, E = np.linalg.eigh(train @ train.T)
    Ep = E[:, ::-1][:, :p]
    hp = Ep @ (Ep.T @ (Phi_T @ sisokr_inner(kx, ky, Rx, Ry, X, Y, Xq, lam)))  # (q, n_q)

    def inner(Yc):
        coords = (U / np.sqrt(s)).T @ ky(Y, Yc)  # ψ(y) projected onto the span, (q, c)
        return hp.T @ coords

    return inner


def reduced_rank_scores(kx, ky, Rx, Ry, X, Y, Xq, Yc, lam, p, lam1=None):
    inner = reduced_rank_inner(kx, ky, Rx, Ry, X, Y, Xq, lam, p, lam1)
    return np.diag(ky(Yc, Yc))[None, :] - 2.0 * inner(Yc)


def distinct(L):
    """The distinct rows of ``L`` (first occurrences, in order)."""
    _, first = np.unique(np.ascontiguousarray(L), axis=0, return_index=True)
    return L[np.sort(first)]


def dense_distinct(kernel, X, Y, landmarks, lam, *, intercept=True, centre=False):
    """The sketched KRR problem solved densely in the distinct landmarks ``L_u``:
    ``(L_u, α_u, b₀)`` with ``(K_cᵀ K_c + nλ K_uu) α_u = K_cᵀ (Y − 1ȳᵀ)``, ``K_c = K_nu``
    (``− 1 sᵀ/n`` with ``centre``: the jointly fitted intercept, ``b₀ = ȳ − α_uᵀ s/n``; else
    ``b₀ = ȳ``); predictions ``k(x, L_u) α_u + b₀``."""
    Lu = distinct(landmarks)
    n = len(X)
    Y = np.asarray(Y, dtype=np.float64).reshape(n, -1)
    Knu, Kuu = np.asarray(kernel(X, Lu)), np.asarray(kernel(Lu, Lu))
    ybar = Y.mean(axis=0) if intercept else np.zeros(Y.shape[1])
    Kc = Knu - Knu.mean(axis=0) if centre else Knu
    alpha = np.linalg.solve(Kc.T @ Kc + n * lam * Kuu, Kc.T @ (Y - ybar))
    b0 = ybar - Knu.mean(axis=0) @ alpha if centre else ybar
    return Lu, alpha, b0
