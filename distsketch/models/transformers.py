"""Sketched kernel features as a scikit-learn transformer.

:class:`SketchedFeatures` is scikit-learn's ``Nystroem`` for any sketch, fitted out of core by
the streaming pass: ``φ(x) = T_Xᵀ R k(X, x)`` with ``T_X`` the whitening of ``B = R K Rᵀ``, so
that ``φ(x)ᵀ φ(x') = k(x, X) Rᵀ (R K Rᵀ)^† R k(X, x')`` is the sketched kernel
(docs/design/math.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from ..engine.features import FeatureMap
from ..options import with_blas_limit
from ..solvers.direct import feature_sums, solve_features
from .base import FitSpec, SketchedEstimator, checks_feature_names
from .growing import Growing

if TYPE_CHECKING:
    import zarr

    from ..kernels.base import Kernel
    from ..options import EngineOptions
    from ..sketches.base import Sketch

__all__ = ["SketchedFeatures"]


def _is_dask(X) -> bool:
    import sys

    dask_array = sys.modules.get("dask.array")
    return dask_array is not None and isinstance(X, dask_array.Array)


class SketchedFeatures(Growing, SketchedEstimator):
    """Whitened sketched kernel features ``φ_X(x) = T_Xᵀ R k(X, x)``: a transformer like
    scikit-learn's ``Nystroem``, for every sketch, fitted by one streaming pass.

    ``fit(X)`` runs the pass for ``B = R K Rᵀ`` alone (no ``CᵀC``) and whitens it
    (``T_Xᵀ B T_X = I``, ``T_X T_Xᵀ = B^†`` on its retained eigenspace, relative threshold
    ``EngineOptions.rtol``); ``transform(X)`` returns the features, so that::

        transform(X) @ transform(X2).T == k(X, X_train) Rᵀ (R K Rᵀ)^† R k(X_train, X2)

    — the sketched kernel. Ridge regression on these features is sketched KRR:
    ``make_pipeline(SketchedFeatures(k, sketch=S, random_state=r), Ridge(alpha=n·λ,
    fit_intercept=False))`` predicts as ``SketchedKRR(k, sketch=S, lam=λ, random_state=r)``
    (the same sketch is drawn from the same ``random_state``), because
    ``(1/n) Σ (f(x_i) − y_i)² + λ‖f‖²`` is ``(1/n)`` times Ridge's
    ``‖y − Φw‖² + α‖w‖²`` with ``α = nλ`` and ``‖f‖ = ‖w‖`` for ``f = φ(·)ᵀw``. With
    ``fit_intercept=True`` Ridge adds an unpenalised intercept, which SketchedKRR has not.

    Parameters
    ----------
    kernel : kernel, str or callable
        See :mod:`distsketch.kernels`.
    sketch : Sketch or None
        ``None``: exact (``R = I``; n features, the whitened Gram matrix).
    random_state : None, int or numpy.random.Generator
        Seeds the sketch (one generator per fit).
    store : None, path or zarr.Group
        Where the pass is written (and the fitted transformer saved); see
        :class:`~distsketch.SISOKR`.
    options : EngineOptions or None
        Engine knobs; they do not change the features.

    Attributes
    ----------
    kernel_ : Kernel
    sketch_ : RealizedSketch
    landmarks_ : array of shape (s', d)
        The support rows ``X_J``.
    whitening_ : ndarray of shape (m, r)
        ``T_X``.
    feature_map_ : FeatureMap
        ``(kernel_, landmarks_, R_mixᵀ T_X)``.
    n_components_ : int
        ``r``, the number of features (the retained rank of ``R K Rᵀ``).
    n_features_in_ : int
        Number of input columns seen at fit.
    feature_names_in_ : ndarray of str of shape (``n_features_in_``,)
        Column names of a data frame ``X`` given at fit (pandas, dask; only when all are
        strings). Prediction methods refuse a frame whose names differ or come in another
        order, and warn when names are on one side only (scikit-learn's rule).
    store_ : str or None
        Path of the kept store.

    See Also
    --------
    SketchedKRR : Ridge regression on the same features, from the same pass.

    References
    ----------
    .. [1] C. K. I. Williams and M. Seeger, "Using the Nyström method to speed up kernel
       machines", Advances in Neural Information Processing Systems 13, 2001.
    .. [2] Y. Yang, M. Pilanci and M. J. Wainwright, "Randomized sketches for kernels: fast
       and optimal nonparametric regression", The Annals of Statistics 45(3), 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SketchedFeatures
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.sketches import SubSampling
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> features = SketchedFeatures(Gaussian(gamma=0.5), sketch=SubSampling(50),
    ...                             random_state=0).fit(X)
    >>> Z = features.transform(X[:4])
    >>> Z.shape == (4, features.n_components_)
    True
    """

    _estimator_type = "transformer"
    _param_kinds = {"kernel": "kernel", "sketch": "sketch", "random_state": "random_state",
                    "store": "store", "options": "options"}
    _input = ("kernel", "sketch")
    _targets = None

    def __init__(self, kernel: Kernel | str | Callable = "gaussian", *,
                 sketch: Sketch | None = None,
                 random_state: int | np.random.Generator | None = None,
                 store: str | os.PathLike | zarr.Group | None = None,
                 options: EngineOptions | None = None) -> None:
        self.kernel = kernel
        self.sketch = sketch
        self.random_state = random_state
        self.store = store
        self.options = options

    def fit(self, X: Any, y: Any = None) -> Self:
        """Fit the features on ``X``: one streaming pass and the whitening of ``R K Rᵀ``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs: a numpy, scipy.sparse, dask or zarr array (or a data frame).
        y : None
            Ignored (scikit-learn's transformer signature).

        Returns
        -------
        self
            The fitted transformer.
        """
        return super().fit(X, None)

    def _sums(self, spec: FitSpec) -> tuple[str, ...]:
        return feature_sums(x_exact=spec.exact("sketch"))

    def _solve(self, spec: FitSpec, res) -> None:
        T, P = solve_features(res.sums, res.x_sketch, rtol=spec.options.eig_rtol)
        self.kernel_ = spec.kernels["kernel"]
        self.sketch_ = res.x_sketch
        self.landmarks_ = res.x_landmarks
        self.whitening_ = T
        self.feature_map_ = FeatureMap(self.kernel_, res.x_landmarks, P, spec.options.gram_chunk,
                                       spec.options.tuning)
        self.n_components_ = int(T.shape[1])

    @checks_feature_names
    @with_blas_limit
    def transform(self, X: Any) -> Any:
        """The features ``φ_X(x)`` of every row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs: a numpy, scipy.sparse, dask or zarr array (or a data frame).

        Returns
        -------
        ndarray, dask array or data frame of shape (n_samples, ``n_components_``)
            Dask in, dask out (lazy); a pandas or polars frame with :meth:`set_output`
            (columns :meth:`get_feature_names_out`, a pandas input's index kept).
        """
        self._check_fitted()
        container = getattr(self, "_sklearn_output_config", {}).get("transform", "default")
        if container != "default" and _is_dask(X):
            raise ValueError(f"X: a dask array cannot become a {container} frame without "
                             f"computing it; compute X first, or set_output(transform="
                             f"\"default\") for lazy dask features")
        Z = self._feature_map(self.feature_map_).transform(
            X, block_memory=self._options().block_memory, model="SketchedFeatures")
        if container == "default":
            return Z
        columns = list(self.get_feature_names_out())
        if container == "pandas":
            import pandas as pd

            index = X.index if isinstance(X, pd.DataFrame) else None
            return pd.DataFrame(np.asarray(Z), columns=columns, index=index)
        import polars as pl

        return pl.DataFrame(np.asarray(Z), schema=columns)

    def set_output(self, *, transform: str | None = None) -> Self:
        """Output container of :meth:`transform` and :meth:`fit_transform` (scikit-learn's
        ``set_output`` API, so ``Pipeline(...).set_output(transform="pandas")`` reaches it).

        Parameters
        ----------
        transform : {"default", "pandas", "polars"} or None
            ``"default"``: numpy (dask for dask input); ``"pandas"`` / ``"polars"``: a data
            frame (the library must be installed); None: unchanged.

        Returns
        -------
        self
            The transformer, configured.
        """
        if transform is None:
            return self
        if transform not in ("default", "pandas", "polars"):
            raise ValueError(f"set_output: transform must be 'default', 'pandas', 'polars' or "
                             f"None, got {transform!r}")
        if transform != "default":
            import importlib.util

            if importlib.util.find_spec(transform) is None:
                raise ImportError(f"set_output: transform={transform!r} needs {transform}, "
                                  f"which is not installed: pip install {transform}")
        self._sklearn_output_config = {**getattr(self, "_sklearn_output_config", {}),
                                       "transform": transform}
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit on ``X`` and return its features: ``fit(X).transform(X)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs.
        y : None
            Ignored.

        Returns
        -------
        ndarray, dask array or data frame of shape (n_samples, ``n_components_``)
            The features of the training rows (as :meth:`transform`).
        """
        return self.fit(X, y).transform(X)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of the output features (scikit-learn's convention).

        Parameters
        ----------
        input_features : None
            Ignored: the features do not correspond to input columns.

        Returns
        -------
        ndarray of str of shape (``n_components_``,)
            ``sketchedfeatures0, sketchedfeatures1, …``.
        """
        self._check_fitted()
        return np.asarray([f"sketchedfeatures{i}" for i in range(self.n_components_)],
                          dtype=object)

    def _get_state(self):
        arrays, state = super()._get_state()
        self._put_side("input", self.kernel_, self.sketch_, self.landmarks_, arrays, state)
        arrays.update(whitening=self.whitening_, projection=self.feature_map_.projection)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.kernel_, self.sketch_, self.landmarks_ = self._get_side("input", arrays, state)
        self.whitening_ = arrays["whitening"]
        options = self._options()
        self.feature_map_ = FeatureMap(self.kernel_, self.landmarks_, arrays["projection"],
                                       options.gram_chunk, options.tuning)
        self.n_components_ = int(self.whitening_.shape[1])

    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    transformer_tags=TransformerTags(),
                    input_tags=InputTags(sparse=True, allow_nan=False))
