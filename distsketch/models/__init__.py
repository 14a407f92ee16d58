"""Estimators: the fit template (:mod:`.base`), the ridge family (:mod:`.sisokr`: SISOKR,
:mod:`.krr`: SketchedKRR, and what they share, :mod:`.ridge`), the Lipschitz-loss machines
(:mod:`.regressors`) and the transformer (:mod:`.transformers`)."""

from .krr import SketchedKRR
from .regressors import SketchedQuantileRegressor, SketchedRegressor
from .ridge import (
    KRRClosedForm,
    SisokrClosedForm,
    SisokrTable,
    auto_ridge_route,
    auto_sisokr_route,
    centre_targets,
    centred_rows,
    check_intercept,
    check_sisokr_pcg,
    intercept_sums,
    kernel_expansion,
    with_metric,
)
from .sisokr import SISOKR
from .sisokr_state import OUTPUT_GRAM_BYTES
from .transformers import SketchedFeatures

__all__ = ["SISOKR", "SketchedKRR", "OUTPUT_GRAM_BYTES", "KRRClosedForm", "SisokrClosedForm",
           "SisokrTable", "check_sisokr_pcg", "auto_sisokr_route", "auto_ridge_route",
           "check_intercept", "intercept_sums", "centre_targets", "with_metric", "centred_rows",
           "kernel_expansion", "SketchedRegressor", "SketchedQuantileRegressor", "SketchedFeatures"]
