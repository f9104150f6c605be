"""Input checks shared by every measurement.

Convention (loud, because the original IsoScore code used the transpose): a point cloud is
an array of shape ``(n_points, dim)`` -- one row per point.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

ArrayLike = Any  # torch.Tensor | np.ndarray | nested sequences


def as_tensor(x: ArrayLike, *, name: str = "X") -> torch.Tensor:
    """Return ``x`` as a floating torch tensor without copying torch inputs (autograd is kept)."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            # a contiguous copy: torch cannot wrap negative strides (a[::-1])
            t = torch.as_tensor(np.ascontiguousarray(x))
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be a torch tensor or an array-like of numbers") from err
    integer = (torch.int32, torch.int64, torch.int16, torch.uint8)
    if not (t.is_floating_point() or t.dtype in integer):
        raise TypeError(f"{name} must hold real numbers, got dtype {t.dtype}")
    if not t.is_floating_point():
        t = t.to(torch.float64)
    return t


def accumulation_dtype(t: torch.Tensor) -> torch.dtype:
    """fp64 stays fp64; every other float (fp32, fp16, bf16) is computed in fp32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def check_finite(t: torch.Tensor, *, name: str = "X") -> None:
    """Raise ``ValueError`` if ``t`` holds NaN or infinity (never let them pass silently)."""
    if t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")


def as_point_cloud(
    x: ArrayLike, *, name: str = "X", min_points: int = 1, check_values: bool = True
) -> torch.Tensor:
    """Validate a point cloud of shape ``(n_points, dim)`` and return it as a float tensor."""
    t = as_tensor(x, name=name)
    if t.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D with shape (n_points, dim), got shape {tuple(t.shape)}; "
            "reshape a single vector with X.reshape(1, -1) or X.reshape(-1, 1)"
        )
    n, d = t.shape
    if d == 0:
        raise ValueError(f"{name} has dimension 0")
    if n < min_points:
        raise ValueError(f"{name} has {n} point(s); at least {min_points} are needed")
    if check_values:
        check_finite(t, name=name)
    return t


def check_finite_float(value: float, name: str, *, allow_bool: bool = True) -> float:
    """Validate a finite real number (any sign); ``allow_bool=False`` also rejects booleans."""
    if not allow_bool and isinstance(value, bool):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a real number, got {value!r}") from err
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def check_zeta(zeta: float) -> float:
    """Validate the shrinkage weight: a real number in [0, 1]."""
    try:
        z = float(zeta)
    except (TypeError, ValueError) as err:
        raise TypeError(f"zeta must be a real number in [0, 1], got {zeta!r}") from err
    if not math.isfinite(z) or not 0.0 <= z <= 1.0:
        raise ValueError(f"zeta must lie in [0, 1], got {zeta!r}")
    return z


def as_square_matrix(c: ArrayLike, *, name: str, dim: int | None = None) -> torch.Tensor:
    """``c`` as a floating tensor of shape ``(dim, dim)`` (shape checks only)."""
    t = as_tensor(c, name=name)
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ValueError(f"{name} must be a square (dim, dim) matrix, got shape {tuple(t.shape)}")
    if dim is not None and t.shape[0] != dim:
        raise ValueError(
            f"{name} has shape {tuple(t.shape)} but the point cloud has dimension {dim}"
        )
    return t


def as_covariance(
    c: ArrayLike, *, dim: int | None = None, name: str = "shrinkage", rtol: float = 1e-5
) -> torch.Tensor:
    """Validate a covariance matrix: square, finite, symmetric, non-negative diagonal."""
    t = as_square_matrix(c, name=name, dim=dim)
    check_finite(t, name=name)
    scale = float(t.abs().max()) if t.numel() else 0.0
    asym = float((t - t.T).abs().max()) if t.numel() else 0.0
    if asym > rtol * max(scale, 1e-300):
        raise ValueError(f"{name} is not symmetric (max |C - C^T| = {asym:.3g})")
    if bool((torch.diagonal(t) < 0).any()):
        raise ValueError(f"{name} has a negative diagonal entry: not a covariance matrix")
    return t
