r"""IsoScore and IsoScore* in closed form.

For a symmetric positive semi-definite covariance :math:`\Sigma` of dimension :math:`d`,
the eigenvalues satisfy :math:`\sum\lambda_i = \operatorname{tr}\Sigma` and
:math:`\lVert\Lambda\rVert_2 = \lVert\Sigma\rVert_F`, so Algorithm 2 of Rudman et al. reduces to

.. math::  \mathrm{PR}(\Sigma) = \frac{(\operatorname{tr}\Sigma)^2}{\lVert\Sigma\rVert_F^2},
           \qquad \iota(\Sigma) = \frac{\mathrm{PR}(\Sigma) - 1}{d - 1}.

IsoScore is :math:`\iota(\Sigma_X)`; IsoScore* is :math:`\iota(\Sigma_\zeta)` with
:math:`\Sigma_\zeta = (1-\zeta)\Sigma_X + \zeta\Sigma_S` (Algorithm 1; :math:`\zeta = 0` means no
shrinkage). No eigendecomposition is needed. The gradient is analytic:
:math:`\partial\iota/\partial\Sigma_\zeta = aI + b\Sigma_\zeta` with
:math:`a = 2t/(f(d-1))`, :math:`b = -2t^2/(f^2(d-1))`, :math:`t = \operatorname{tr}`,
:math:`f = \lVert\cdot\rVert_F^2`, hence
:math:`\partial\iota/\partial X = \frac{2(1-\zeta)}{n-1}X_c(aI + b\Sigma_\zeta)`.

When :math:`n < d` every term comes from the :math:`n\times n` Gram matrix
:math:`G = X_cX_c^\top` (:math:`\operatorname{tr}\Sigma_X = \operatorname{tr}G/(n-1)`,
:math:`\lVert\Sigma_X\rVert_F = \lVert G\rVert_F/(n-1)`) and from :math:`X_c\Sigma_S`
(:math:`\langle\Sigma_X,\Sigma_S\rangle = \langle X_c, X_c\Sigma_S\rangle/(n-1)`), without forming
:math:`\Sigma_X`.

Point clouds have shape ``(n_points, dim)``.
"""

from __future__ import annotations

import math
import warnings

import torch

from isotropy._validation import (
    ZERO_VARIANCE,
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    as_square_matrix,
    as_tensor,
    check_finite,
    check_psd,
    check_zeta,
    masked_rows,
    max_abs,
    positional_options_deprecated,
    pow2_exponent,
    rescale_exponent,
    scale_pow2,
    window,
)
from isotropy.distributed import all_reduce_max, is_distributed
from isotropy.measures.isoscore_autograd import IsoScoreStarFunction
from isotropy.runtime import autocast_off

__all__ = [
    "isoscore",
    "isoscore_star",
    "isoscore_from_covariance",
    "participation_ratio",
    "participation_ratio_from_covariance",
]

_SYM_RTOL = 1e-5
_FRO_SAFE_LO = 2.0**-600  # below this, squares of entries may have lost precision
_PROBES: dict[tuple[int, str, torch.dtype], torch.Tensor] = {}


def _probe(d: int, like: torch.Tensor) -> torch.Tensor:
    """A fixed random +-1 vector of length ``d`` (cached per size, device and dtype)."""
    key = (d, str(like.device), like.dtype)
    r = _PROBES.get(key)
    if r is None:
        gen = torch.Generator().manual_seed(20240101 + d)
        r = (torch.randint(0, 2, (d,), generator=gen) * 2 - 1).to(like.device, like.dtype)
        if len(_PROBES) > 32:
            _PROBES.clear()
        _PROBES[key] = r
    return r


def _square_matrix(c: ArrayLike, *, name: str, dim: int | None = None) -> torch.Tensor:
    """``c`` as a non-empty floating tensor of shape ``(dim, dim)`` (shape checks only)."""
    t = as_square_matrix(c, name=name, dim=dim)
    if t.shape[0] == 0:
        raise ValueError(f"{name} is an empty (0, 0) matrix")
    return t


def _check_covariance_values(
    c: torch.Tensor, fro: float, *, name: str, source_dtype: torch.dtype
) -> None:
    r"""Raise ``ValueError`` unless ``c`` (finite, :math:`\lVert c\rVert_F^2` = ``fro``) is a
    plausible covariance: non-negative diagonal and symmetric.

    Symmetry is probed in :math:`O(d^2)` with contiguous reads: for a fixed random
    :math:`r\in\{\pm1\}^d`, :math:`\lVert(C - C^\top)r\rVert_\infty` must not exceed
    ``rtol`` :math:`\cdot\lVert C\rVert_F` (``rtol`` = 1e-5, or 16 machine epsilons of
    ``source_dtype`` for half precision). Any asymmetry of that size is caught unless its
    entries cancel exactly against the probe.
    """
    with torch.no_grad():
        if bool((torch.diagonal(c) < 0).any()):
            raise ValueError(f"{name} has a negative diagonal entry: not a covariance matrix")
        if c.shape[0] < 2:
            return
        cw = c if c.dtype in (torch.float32, torch.float64) else c.float()
        r = _probe(c.shape[0], cw)
        asym = float((torch.mv(cw, r) - torch.mv(cw.T, r)).abs().max())
    rtol = max(_SYM_RTOL, 16 * torch.finfo(source_dtype).eps)
    if asym > rtol * math.sqrt(fro):
        raise ValueError(
            f"{name} is not symmetric (max |(C - C^T) r| = {asym:.3g} for a +-1 probe r, "
            f"||C||_F = {math.sqrt(fro):.3g})"
        )


def _trace_and_frobenius(
    c: ArrayLike, *, name: str, psd: bool = True
) -> tuple[torch.Tensor, torch.Tensor, int]:
    r"""Validated :math:`\operatorname{tr}C` and :math:`\lVert C\rVert_F^2` in float64
    (differentiable in ``c``), and the dimension ``d``. When the squares overflow or may have
    underflowed (:math:`\lVert C\rVert_F^2 < 2^{-600}`), both are those of ``c`` times
    :math:`2^{-e}`, a power of two that brings its largest entry near 1: the ratio
    :math:`(\operatorname{tr}C)^2/\lVert C\rVert_F^2` is scale free. ``psd``: also check
    positive semi-definiteness."""
    t = _square_matrix(c, name=name)
    e = 0
    c64 = t.to(torch.float64)
    flat = c64.reshape(-1)
    tr, fro = torch.trace(c64), torch.dot(flat, flat)
    fro_f, tr_f = float(fro.detach()), float(tr.detach())
    if not _FRO_SAFE_LO <= fro_f < math.inf:  # squares overflowed or (may have) underflowed
        m = max_abs(t)
        if not math.isfinite(m):
            check_finite(t, name=name)
        e = pow2_exponent(m)
        c64 = scale_pow2(c64, -e)
        flat = c64.reshape(-1)
        tr, fro = torch.trace(c64), torch.dot(flat, flat)
        fro_f, tr_f = float(fro.detach()), float(tr.detach())
    # the symmetry probe reads the input itself where it can (half the bytes for float32)
    probed = t if e == 0 and t.dtype in (torch.float32, torch.float64) else c64
    _check_covariance_values(probed.detach(), fro_f, name=name, source_dtype=t.dtype)
    if fro_f <= 0.0 or tr_f <= 0.0:
        raise ValueError(
            f"{name} is a zero matrix ({ZERO_VARIANCE}, or no rows): IsoScore is undefined"
        )
    if psd:
        check_psd(t, name=name)
    return tr, fro, t.shape[0]


def participation_ratio_from_covariance(cov: ArrayLike) -> torch.Tensor:
    r"""Participation ratio :math:`(\operatorname{tr}C)^2 / \lVert C\rVert_F^2` in :math:`[1, d]`.

    ``cov`` must be symmetric, with a non-negative diagonal, and positive semi-definite
    (all checked; see :func:`isotropy._validation.check_psd`). Scale free: computed on ``cov``
    times a power of two that brings its largest entry near 1. Differentiable in ``cov``.

    - **Reference:** step 5 of IsoScore (Rudman, Gillman, Rayne & Eickhoff (2022), "IsoScore:
      measuring the uniformity of embedding space utilization").
    - **Input:** ``cov``, a covariance matrix of shape ``(dim, dim)``.
    - **Returns:** a 0-d tensor in :math:`[1, d]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for a matrix that is not square, not symmetric, not positive
      semi-definite or zero, and NaN or infinity.

    >>> participation_ratio_from_covariance(torch.diag(torch.tensor([1.0, 1.0, 0.0])))
    tensor(2.)
    """
    c = as_tensor(cov, name="cov")
    with autocast_off():
        tr, fro, _ = _trace_and_frobenius(c, name="cov")
    return (tr * tr / fro).to(accumulation_dtype(c))


def isoscore_from_covariance(cov: ArrayLike) -> torch.Tensor:
    r"""IsoScore of a covariance matrix: :math:`(\mathrm{PR}(C) - 1)/(d - 1)` in :math:`[0, 1]`.

    :math:`O(d^2)` plus a one-off :math:`O(d^3)` check that ``cov`` is positive semi-definite
    (``ValueError`` naming its smallest eigenvalue otherwise; a tensor checked before and not
    modified since is not checked again). Symmetry and a non-negative diagonal are checked too;
    a zero matrix (zero variance: all points identical) raises ``ValueError``. Scale free
    (computed on ``cov`` times an exact power of two); differentiable in ``cov``.

    - **Reference:** Rudman, Gillman, Rayne & Eickhoff (2022), "IsoScore: measuring the
      uniformity of embedding space utilization".
    - **Input:** ``cov``, a covariance matrix of shape ``(dim, dim)``, ``dim`` at least 2.
    - **Returns:** a 0-d tensor in :math:`[0, 1]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for a matrix that is not square, not symmetric, not positive
      semi-definite, of dimension below 2 or zero, and NaN or infinity.

    >>> isoscore_from_covariance(torch.eye(4))
    tensor(1.)
    >>> isoscore_from_covariance(torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0])))  # 2 of 4 dims
    tensor(0.3333)
    """
    c = as_tensor(cov, name="cov")
    if c.ndim == 2 and c.shape[0] == c.shape[1] == 1:
        raise ValueError("IsoScore needs dimension >= 2 (it is undefined for d = 1)")
    with autocast_off():
        tr, fro, d = _trace_and_frobenius(c, name="cov")
    return ((tr * tr / fro - 1.0) / (d - 1)).to(accumulation_dtype(c))


def _scale_exponent(
    x: torch.Tensor, s: torch.Tensor | None, zeta: float, group: object | None, sync: bool
) -> tuple[int, float]:
    r"""``(e, m)``: scaling ``X`` by :math:`2^{-e}` and :math:`\Sigma_S` by :math:`2^{-2e}` brings
    the larger of :math:`\max|X|^2` and :math:`\max|\Sigma_S|` (the identity when ``s`` is None
    and :math:`\zeta > 0`) near 1 (``e = 0`` inside the safe window); ``m`` is :math:`\max|X|`
    (over all ranks with ``sync``; infinite if any value is not finite)."""
    m = max_abs(x)
    if not math.isfinite(m):
        m = math.inf
    if sync:
        m = float(all_reduce_max(torch.tensor([m], dtype=torch.float64, device=x.device), group))
    candidates = []
    if zeta < 1.0 and 0.0 < m < math.inf:
        candidates.append(pow2_exponent(m))
    if zeta > 0.0:
        m_s = 1.0 if s is None else max_abs(s)
        if m_s > 0.0:
            candidates.append(-(-pow2_exponent(m_s) // 2))  # ceil(e_s / 2)
    e = max(candidates, default=0)
    return (0 if abs(e) <= window(x.dtype) else e), m


def _prepare(
    X: ArrayLike, shrinkage: ArrayLike | None, sync: bool, check_psd_: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The rows in the accumulation dtype and the validated shrinkage (detached, on the rows'
    device, in its own dtype or that of the rows if wider; not yet in the accumulation dtype).
    """
    x = as_point_cloud(X, min_points=0 if sync else 2, check_values=False)
    d = x.shape[1]
    dtype = accumulation_dtype(x)
    s = None
    if shrinkage is not None:
        s0 = _square_matrix(shrinkage, name="shrinkage", dim=d)
        m = max_abs(s0)
        if not math.isfinite(m):
            check_finite(s0, name="shrinkage")
        s = s0.detach().to(device=x.device, dtype=torch.promote_types(s0.dtype, dtype))
        probe = scale_pow2(s, -rescale_exponent(m, s.dtype))
        flat = probe.reshape(-1)
        fro = float(torch.dot(flat, flat).double())
        _check_covariance_values(probe, fro, name="shrinkage", source_dtype=s0.dtype)
        if check_psd_:
            check_psd(s0, name="shrinkage")
    return x.to(dtype), s


def _isoscore_star(
    X: ArrayLike,
    zeta: float,
    shrinkage: ArrayLike | None,
    *,
    sync_dist: bool = False,
    process_group: object | None = None,
    kind: str = "iota",
    check_psd_: bool = True,
) -> torch.Tensor:
    """:func:`isoscore_star` (``kind='iota'``) or :func:`participation_ratio` (``'pr'``);
    ``check_psd_=False`` skips the positive semi-definiteness check of a shrinkage matrix
    validated before (the loss checks it once, when it is set)."""
    with autocast_off():  # our own accumulation dtype, whatever autocast would choose
        return _isoscore_star_body(X, zeta, shrinkage, sync_dist, process_group, kind,
                                   check_psd_)


def _isoscore_star_body(X: ArrayLike, zeta: float, shrinkage: ArrayLike | None,
                        sync_dist: bool, process_group: object | None, kind: str,
                        check_psd_: bool) -> torch.Tensor:
    z = check_zeta(zeta)
    sync = bool(sync_dist) and is_distributed(process_group)
    x, s = _prepare(X, shrinkage, sync, check_psd_)
    if kind == "iota" and x.shape[1] < 2:
        raise ValueError("IsoScore* needs dimension >= 2 (it is undefined for d = 1)")
    if z == 0.0:
        s = None
    e, m = _scale_exponent(x, s, z, process_group, sync)
    x = scale_pow2(x, -e)
    if s is not None:
        s = scale_pow2(s, -2 * e).to(x.dtype)
    eye = math.ldexp(1.0, -2 * e) if z > 0.0 else 0.0  # <= 1/4: e >= 1 when z > 0
    m = math.ldexp(m, -e) if math.isfinite(m) else m
    return IsoScoreStarFunction.apply(x, s, z, eye, m, process_group, sync, kind)


@positional_options_deprecated("zeta", "shrinkage")
def isoscore_star(
    X: ArrayLike,
    *,
    zeta: float = 0.0,
    shrinkage: ArrayLike | None = None,
    sync_dist: bool = False,
    process_group: object | None = None,
    attention_mask: ArrayLike | None = None,
) -> torch.Tensor:
    r"""IsoScore* of a point cloud ``X`` of shape ``(n_points, dim)``, differentiable in ``X``.

    :math:`\iota(\Sigma_\zeta)` with :math:`\Sigma_\zeta = (1-\zeta)\Sigma_X + \zeta\Sigma_S`.
    ``shrinkage`` (:math:`\Sigma_S`, shape ``(dim, dim)``) defaults to the identity, the
    fallback the authors recommend when no large sample is at hand. It is treated as a
    constant (no gradient) and must be symmetric positive semi-definite (checked; a tensor
    checked before and not modified since is not checked again). Computed in fp64 for fp64
    input, else with fp32 accumulation, on ``X`` and :math:`\Sigma_S` scaled by :math:`2^{-e}`
    and :math:`2^{-2e}` (exact), so that :math:`\zeta = 0` gives the same value for ``X * s``
    and, with :math:`\Sigma_S s^2`, so does :math:`\zeta > 0`. All rows equal (zero variance)
    raise ``ValueError`` when :math:`\zeta = 0`; otherwise :math:`\Sigma_X = 0` exactly.
    With ``sync_dist=True`` under ``torch.distributed``, the score is that of the global batch
    (a rank may hold no rows); see :mod:`isotropy.distributed` for the gradient convention.
    :math:`\zeta > 0` without ``shrinkage`` mixes :math:`\Sigma_X` with :math:`I`, whose
    scale is fixed: the score then depends on the scale of ``X`` (a ``UserWarning`` says so).

    - **Reference:** Rudman & Eickhoff (2024), "Stable anisotropic regularization" (ICLR).
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a 0-d tensor in :math:`[0, 1]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, a dimension below 2, a
      ``shrinkage`` of another shape or not positive semi-definite, ``zeta`` outside :math:`[0,
      1]`, and zero variance when :math:`\zeta = 0`.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.randn(5000, 3, generator=g) * torch.tensor([1.0, 1.0, 0.0])
    >>> round(float(isoscore_star(X)), 3)  # two of three dimensions used: (2-1)/(3-1)
    0.5
    >>> round(float(isoscore_star(X, zeta=1.0)), 3)  # only the identity
    1.0
    """
    X = masked_rows(X, attention_mask, name="X")
    if shrinkage is None:
        warn_identity_shrinkage(check_zeta(zeta), "isoscore_star", stacklevel=3)
    return _isoscore_star(
        X, zeta, shrinkage, sync_dist=sync_dist, process_group=process_group
    )


def warn_identity_shrinkage(zeta: float, where: str, *, stacklevel: int = 2) -> None:
    r"""Warn that a checked ``zeta > 0`` with the identity :math:`\Sigma_S` makes IsoScore*
    depend on the scale of the points (nothing at ``zeta = 0``)."""
    if zeta > 0:
        warnings.warn(
            f"{where}: zeta = {zeta:g} with no shrinkage matrix mixes Sigma_X with the identity, "
            "so the score depends on the scale of the points (X and 10 * X score "
            "differently); pass shrinkage= (e.g. the covariance of a large sample of the same "
            "states, isotropy.collect_covariance) for a scale-free score",
            UserWarning, stacklevel=stacklevel)


def isoscore(X: ArrayLike, *, attention_mask: ArrayLike | None = None) -> torch.Tensor:
    r"""IsoScore (Rudman et al. 2022) of ``X`` (``(n_points, dim)``): :math:`\iota(\Sigma_X)`
    :math:`= (\mathrm{PR}(\Sigma_X) - 1)/(d - 1)`, equal to Algorithm 2 of the paper for any
    covariance, in :math:`[0, 1]`. Differentiable: the gradient reaches the input.

    - **Reference:** Rudman, Gillman, Rayne & Eickhoff (2022), "IsoScore: measuring the
      uniformity of embedding space utilization".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a 0-d tensor in :math:`[0, 1]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, a dimension below 2 and zero
      variance (all rows equal).

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> g = torch.Generator().manual_seed(0)
    >>> round(float(isoscore(torch.randn(20000, 4, generator=g, dtype=torch.float64))), 2)
    1.0
    """
    X = masked_rows(X, attention_mask, name="X")
    return isoscore_star(X, zeta=0.0)


def participation_ratio(X: ArrayLike, *, attention_mask: ArrayLike | None = None) -> torch.Tensor:
    r"""Participation ratio of the covariance of ``X``: :math:`(\sum\lambda_i)^2/\sum\lambda_i^2`.

    An effective number of dimensions in :math:`[1, d]`; equals
    :math:`1 + (d-1)\,\mathrm{IsoScore}(X)`. Differentiable.

    - **Reference:** the participation ratio of the covariance, step 5 of IsoScore (Rudman,
      Gillman, Rayne & Eickhoff (2022), "IsoScore: measuring the uniformity of embedding space
      utilization").
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a 0-d tensor in :math:`[1, d]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, and zero variance (all rows
      equal).

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> participation_ratio(X)
    tensor(2.)
    """
    X = masked_rows(X, attention_mask, name="X")
    return _isoscore_star(X, 0.0, None, kind="pr")
