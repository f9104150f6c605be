"""Which measures carry a gradient, and the warning of those that do not.

Differentiable (the gradient reaches the input): ``isoscore``, ``isoscore_star``,
``participation_ratio`` and their ``*_from_covariance`` forms, ``avg_cosine_similarity``,
``cosine_regularization_term``, ``anisotropy_spectrum``, ``h0_barcode``,
``persistent_entropy``, ``prominent_features``, ``alignment`` and ``uniformity``. Every other
measure computes on a detached copy (its result is a number for a report, dimension indices,
or statistics): given a tensor that requires grad while autograd records, it warns at the
caller's line rather than hand back a constant that a loss would silently not train on.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import torch

__all__ = ["detached_input"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this package, torch and torchmetrics
    (the user's line that called a measure, however deep inside them the check runs)."""
    inside = [_PACKAGE, _TORCH]
    metrics = sys.modules.get("torchmetrics")
    if getattr(metrics, "__file__", None):
        inside.append(os.path.dirname(os.path.abspath(metrics.__file__)) + os.sep)
    level, frame = 2, sys._getframe(2)  # 1: the warning's own caller (detached_input)
    while frame is not None and frame.f_code.co_filename.startswith(tuple(inside)):
        level, frame = level + 1, frame.f_back
    return level


def detached_input(x: Any, measure: str) -> Any:
    """``x`` detached from autograd (as is when not a tensor), after a ``UserWarning`` when
    it requires grad while autograd records (``torch.is_grad_enabled()``): ``measure`` is not
    differentiable, so its result is a constant to autograd. The warning points at the first
    line outside this package.

    >>> detached_input(torch.ones(2, 2), "twonn").requires_grad  # nothing to say
    False
    """
    if not isinstance(x, torch.Tensor):
        return x
    if x.requires_grad and torch.is_grad_enabled():
        warnings.warn(
            f"{measure} is not differentiable: its result is a constant to autograd, so a "
            "loss built on it would not train. Measure a detached tensor (x.detach()) or under "
            "torch.no_grad() to silence this; isoscore_star, avg_cosine_similarity, "
            "uniformity and alignment are differentiable",
            UserWarning, stacklevel=_caller_stacklevel())
    return x.detach()
