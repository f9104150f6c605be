"""Input checks shared by every measurement, and the one-line form of an error message.

Convention (loud, because the original IsoScore code used the transpose): a point cloud is
an array of shape ``(n_points, dim)`` -- one row per point.
"""

from __future__ import annotations

import functools
import math
import warnings
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

from isotropy._text import accept_negative_numbers, one_line  # noqa: F401 (re-exported)

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


def result_dtype(x: ArrayLike) -> torch.dtype:
    """The dtype of a measure's result on the cloud ``x`` (:func:`accumulation_dtype` of its
    dtype: float64 for float64 input, float32 for any other), read without converting it.

    >>> result_dtype(np.zeros((2, 3))), result_dtype(torch.zeros(2, 3, dtype=torch.bfloat16))
    (torch.float64, torch.float32)
    """
    if isinstance(x, torch.Tensor):
        return accumulation_dtype(x)
    if isinstance(x, np.ndarray) and x.dtype.kind in "fiub":
        return torch.float64 if x.dtype.kind != "f" or x.dtype == np.float64 else torch.float32
    return accumulation_dtype(as_tensor(x))


def check_finite(t: torch.Tensor, *, name: str = "X") -> None:
    """Raise ``ValueError`` if ``t`` holds NaN or infinity (never let them pass silently)."""
    if t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")


def check_binary_mask(m: torch.Tensor, *, name: str = "mask") -> None:
    """Raise ``ValueError`` unless the mask ``m`` holds only 0 and 1 (``True``/``False``).

    An additive mask (0 = keep, -1e4 or -inf = drop) read as a 0/1 mask would keep the
    padding rows and drop the real ones. Checked where it costs no accelerator
    synchronisation: a boolean mask needs no check, a floating one is always read (such masks
    are rare), an integer one only on the CPU.

    >>> try:
    ...     check_binary_mask(torch.tensor([[0.0, -1e4]]), name="attention_mask")
    ... except ValueError as err:
    ...     print(str(err)[:44])
    attention_mask must hold 0 and 1 (1 = a real
    """
    if m.dtype == torch.bool or not (m.is_floating_point() or m.device.type == "cpu"):
        return
    if m.numel() and not bool(((m == 0) | (m == 1)).all()):
        raise ValueError(
            f"{name} must hold 0 and 1 (1 = a real token), but it holds other values: "
            "an additive mask (0 = keep, a large negative value = padding)? Pass the "
            "tokenizer's 0/1 attention_mask")


_F = TypeVar("_F", bound=Callable[..., Any])


def positional_options_deprecated(*names: str, cloud_was: str | None = None
                                  ) -> Callable[[_F], _F]:
    """Decorate a measure whose options ``names`` were positional and are now keyword-only:
    a call that still passes them by position works as before and warns (``FutureWarning``).
    ``cloud_was``: the old keyword name of the first argument (now ``X``), read with a warning.

    >>> @positional_options_deprecated("k")
    ... def top(X, *, k=1):
    ...     return sorted(X)[-k:]
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     top([3, 1, 2], 2)
    [2, 3]
    >>> print(caught[0].category.__name__, caught[0].message)  # doctest: +ELLIPSIS
    FutureWarning top(X, 2): pass the option by keyword, k=...; options given by position...
    """

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def measure(*args: Any, **kwargs: Any) -> Any:
            if cloud_was is not None and cloud_was in kwargs:
                if args or "X" in kwargs:
                    raise TypeError(f"{fn.__name__}() got the cloud twice (X and {cloud_was})")
                warnings.warn(f"{fn.__name__}({cloud_was}=...): the cloud is X now (or give it "
                              "by position); the old name will be refused in a later release",
                              FutureWarning, stacklevel=2)
                args = (kwargs.pop(cloud_was),)
            if len(args) > 1:
                extra = args[1:]
                if len(extra) > len(names):
                    raise TypeError(f"{fn.__name__}() takes 1 positional argument (the cloud) "
                                    f"but {len(args)} were given")
                given = dict(zip(names[:len(extra)], extra, strict=True))
                twice = sorted(set(given) & set(kwargs))
                if twice:
                    raise TypeError(f"{fn.__name__}() got multiple values for {twice[0]!r}")
                forms = ", ".join(f"{name}=" for name in given)
                warnings.warn(
                    f"{fn.__name__}(X, {', '.join(map(repr, extra))}): pass the option by "
                    f"keyword, {forms}...; options given by position are deprecated and will "
                    "be refused in a later release", FutureWarning, stacklevel=2)
                kwargs.update(given)
                args = args[:1]
            return fn(*args, **kwargs)

        return measure  # type: ignore[return-value]

    return decorate


def masked_rows(x: ArrayLike, attention_mask: ArrayLike | None, *,
                name: str = "X") -> ArrayLike:
    """The real tokens' rows ``x[attention_mask.bool()]`` of hidden states ``x`` of shape
    ``(batch, seq, dim)`` under a 0/1 ``attention_mask`` of shape ``(batch, seq)`` (any
    leading shape: the mask's shape is ``x.shape[:-1]``); ``x`` itself when the mask is
    ``None``. Autograd is kept; an additive mask or a shape that does not match is a
    ``ValueError``.

    >>> h = torch.arange(12.0).reshape(2, 2, 3)  # (batch, seq, dim)
    >>> masked_rows(h, torch.tensor([[1, 1], [1, 0]])).tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    """
    if attention_mask is None:
        return x
    if not isinstance(x, (torch.Tensor, np.ndarray, list, tuple)):
        raise TypeError(f"attention_mask applies to hidden states (a tensor or an array), not "
                        f"to {type(x).__name__}: accumulate the statistics from the real "
                        "tokens' rows")
    t = as_tensor(x, name=name)
    if isinstance(attention_mask, torch.Tensor):
        m = attention_mask
    else:
        try:
            m = torch.as_tensor(np.asarray(attention_mask))
        except (TypeError, ValueError) as err:
            raise TypeError("attention_mask must be a tensor or an array of 0 and 1") from err
    if t.ndim < 2 or tuple(m.shape) != tuple(t.shape[:-1]):
        raise ValueError(
            f"attention_mask must have the shape of {name} without its last dimension "
            f"(batch, seq) = {tuple(t.shape[:-1])}, got {tuple(m.shape)} for {name} of "
            f"shape {tuple(t.shape)}")
    check_binary_mask(m, name="attention_mask")
    return t[m.to(t.device).bool()]


def as_point_cloud(
    x: ArrayLike, *, name: str = "X", min_points: int = 1, check_values: bool = True
) -> torch.Tensor:
    """Validate a point cloud of shape ``(n_points, dim)`` and return it as a float tensor."""
    t = as_tensor(x, name=name)
    if t.ndim == 3:
        raise ValueError(
            f"{name} must be 2-D with shape (n_points, dim), got shape {tuple(t.shape)}: "
            "hidden states of shape (batch, seq, dim)? Pass attention_mask= to measure the "
            "real tokens' rows (or take h[attention_mask.bool()], or "
            "isotropy.clouds.token_cloud(hidden_states, attention_mask)); "
            "h.reshape(-1, dim) would keep the padding rows"
        )
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


def check_flag(value: Any, name: str) -> bool:
    """A yes/no option: ``True`` or ``False`` (NumPy's booleans too), nothing else, so that
    ``'false'`` or ``'no'`` never counts as true.

    >>> check_flag(False, "include_padding")
    False
    >>> check_flag("no", "include_padding")
    Traceback (most recent call last):
    ...
    TypeError: include_padding must be True or False, got 'no'
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


def check_zeta(zeta: float) -> float:
    """Validate the shrinkage weight: a real number in [0, 1] (``True``/``False`` are not
    numbers here)."""
    if isinstance(zeta, (bool, np.bool_)):
        raise TypeError(f"zeta must be a real number in [0, 1], got {zeta!r}")
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
    """Validate a covariance matrix: square, finite, symmetric, non-negative diagonal and
    positive semi-definite (:func:`check_psd`)."""
    t = as_square_matrix(c, name=name, dim=dim)
    check_finite(t, name=name)
    scale = float(t.abs().max()) if t.numel() else 0.0
    asym = float((t - t.T).abs().max()) if t.numel() else 0.0
    if asym > rtol * scale:
        raise ValueError(f"{name} is not symmetric (max |C - C^T| = {asym:.3g})")
    if bool((torch.diagonal(t) < 0).any()):
        raise ValueError(f"{name} has a negative diagonal entry: not a covariance matrix")
    check_psd(t, name=name)
    return t


# ----------------------------------------------------------------------------- scale
#
# Every scale-invariant measurement multiplies its input by a power of two 2^-e chosen from
# the largest absolute value before anything is squared. Such a product is exact (short of
# leaving the normal range), so the result is the same number as without it wherever the
# unscaled arithmetic neither overflows nor underflows; inputs whose largest value is within
# 2^-W .. 2^W (W below) are therefore left as they are, which costs nothing.

ZERO_VARIANCE = "zero variance (all points identical)"


def max_abs(t: torch.Tensor) -> float:
    r""":math:`\max|t|` as a Python float (0 for an empty tensor; NaN if ``t`` holds NaN)."""
    if t.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(t.detach())
    return max(-float(lo), float(hi))


def pow2_exponent(m: float) -> int:
    r"""The ``e`` with :math:`m\,2^{-e} \in [1/2, 1)` (0 for 0, NaN or infinity)."""
    if m == 0.0 or not math.isfinite(m):
        return 0
    return math.frexp(m)[1]


def window(dtype: torch.dtype) -> int:
    """Largest ``|e|`` left unscaled: 2^(4 e) is far inside the range of the accumulation."""
    return 128 if dtype == torch.float64 else 16


def rescale_exponent(m: float, dtype: torch.dtype) -> int:
    """``e`` such that dividing by :math:`2^e` brings ``m`` into :math:`[1/2, 1)`, or 0 when
    ``m`` is already in the window where squares and fourth powers are safe in ``dtype``."""
    e = pow2_exponent(m)
    return 0 if abs(e) <= window(dtype) else e


def scale_pow2(t: torch.Tensor, k: int) -> torch.Tensor:
    r""":math:`t\,2^{k}`, exactly (each factor applied is a normal number of ``t.dtype``)."""
    if k == 0:
        return t
    step = 1000 if t.dtype == torch.float64 else 100
    while k != 0:
        part = max(-step, min(step, k))
        t = t * math.ldexp(1.0, part)
        k -= part
    return t


def pow2_tensor(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Exact :math:`2^{k}` for an integer tensor ``k`` of exponents in the normal range of
    ``dtype`` (fp32 or fp64), built from the exponent bits."""
    if dtype == torch.float64:
        return ((k.to(torch.int64) + 1023) << 52).view(torch.float64)
    return ((k.to(torch.int32) + 127) << 23).view(torch.float32)


def scale_rows_pow2(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x`` with each row where ``rows`` is true multiplied by a power of two bringing its
    largest absolute value into :math:`[1/2, 1)` (exact; zero rows stay zero)."""
    m = x.detach()[rows].abs().amax(1)
    k = -torch.frexp(m).exponent.to(torch.int64)
    k[m == 0] = 0
    lo = k // 2  # two factors, each a normal number even for subnormal or huge rows
    f1 = torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
    f2 = f1.clone()
    f1[rows] = pow2_tensor(lo, x.dtype)
    f2[rows] = pow2_tensor(k - lo, x.dtype)
    return x * f1.unsqueeze(1) * f2.unsqueeze(1)


# ----------------------------------------------------------------------------- PSD
_PSD_RTOL = 1e-4
_PSD_CHECKED: list[tuple[weakref.ref, int]] = []


def _psd_cached(t: torch.Tensor) -> bool:
    return any(ref() is t and t._version == ver for ref, ver in _PSD_CHECKED)


def _remember_psd(t: torch.Tensor) -> None:
    _PSD_CHECKED[:] = [(r, v) for r, v in _PSD_CHECKED if r() is not None][-7:]
    _PSD_CHECKED.append((weakref.ref(t), t._version))


def check_psd(c: torch.Tensor, *, name: str, rtol: float = _PSD_RTOL) -> None:
    r"""Raise ``ValueError`` unless the symmetric, finite ``c`` is positive semi-definite:
    :math:`\lambda_{\min} \ge -\text{rtol}\cdot\lambda_{\max}` (``rtol`` = 1e-4 absorbs the
    rounding of a covariance accumulated in fp32).

    A Cholesky factorisation of :math:`C + \text{rtol}\,\hat\lambda I` in fp64, with
    :math:`\hat\lambda = \max(\max_i C_{ii}, \lVert C\rVert_F/\sqrt d) \le \lambda_{\max}`,
    proves the bound in :math:`d^3/3` flops; only when it fails are the eigenvalues computed.
    A tensor that passed and has not been modified since (same object, same version) is not
    checked again.
    """
    if c.shape[0] == 0 or _psd_cached(c):
        return
    with torch.no_grad():
        c64 = c.detach().to(torch.float64)
        e = pow2_exponent(max_abs(c64))
        c64 = scale_pow2(c64, -e)
        d = c64.shape[0]
        lam = max(float(torch.diagonal(c64).max()), float(torch.linalg.norm(c64)) / math.sqrt(d))
        shifted = c64 + torch.eye(d, dtype=c64.dtype, device=c64.device) * (rtol * lam)
        if int(torch.linalg.cholesky_ex(shifted).info) != 0:
            eig = torch.linalg.eigvalsh(c64)
            lo, hi = float(eig[0]), float(eig[-1])
            if lo < -rtol * max(hi, 0.0):
                lo, hi = math.ldexp(lo, e), math.ldexp(hi, e)
                raise ValueError(
                    f"{name} is not positive semi-definite: its smallest eigenvalue is {lo:.6g} "
                    f"(largest {hi:.6g}; allowed down to -{rtol:g} x largest)"
                )
    _remember_psd(c)
