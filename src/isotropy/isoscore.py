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
:math:`\partial\iota/\partial X = \frac{2(1-\zeta)}{n-1}(aX_c + bX_c\Sigma_\zeta)`.

Point clouds have shape ``(n_points, dim)``.
"""

from __future__ import annotations

import torch

from isotropy._validation import (
    ArrayLike,
    accumulation_dtype,
    as_covariance,
    as_point_cloud,
    check_zeta,
)
from isotropy.distributed import all_reduce_sum, is_distributed, world_size

__all__ = [
    "isoscore",
    "isoscore_star",
    "isoscore_from_covariance",
    "participation_ratio",
    "participation_ratio_from_covariance",
]


def _pr_terms(trace: torch.Tensor, frob_sq: torch.Tensor) -> torch.Tensor:
    if float(trace) <= 0.0 or float(frob_sq) <= 0.0:
        raise ValueError(
            "the covariance has zero total variance (all points identical, or a zero matrix): "
            "IsoScore is undefined"
        )
    return trace * trace / frob_sq


def participation_ratio_from_covariance(cov: ArrayLike) -> torch.Tensor:
    r"""Participation ratio :math:`(\operatorname{tr}C)^2 / \lVert C\rVert_F^2` in :math:`[1, d]`.

    >>> participation_ratio_from_covariance(torch.diag(torch.tensor([1.0, 1.0, 0.0])))
    tensor(2.)
    """
    c = as_covariance(cov, name="cov")
    c64 = c.to(torch.float64)
    pr = _pr_terms(torch.trace(c64), (c64 * c64).sum())
    return pr.to(accumulation_dtype(c))


def isoscore_from_covariance(cov: ArrayLike) -> torch.Tensor:
    r"""IsoScore of a covariance matrix: :math:`(\mathrm{PR}(C) - 1)/(d - 1)` in :math:`[0, 1]`.

    Differentiable in ``cov``. Symmetry and a non-negative diagonal are checked; positive
    semi-definiteness is assumed (a covariance estimate always is).

    >>> isoscore_from_covariance(torch.eye(4))
    tensor(1.)
    >>> isoscore_from_covariance(torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0])))  # 2 of 4 dims
    tensor(0.3333)
    """
    c = as_covariance(cov, name="cov")
    d = c.shape[0]
    if d < 2:
        raise ValueError("IsoScore needs dimension >= 2 (it is undefined for d = 1)")
    c64 = c.to(torch.float64)
    pr = _pr_terms(torch.trace(c64), (c64 * c64).sum())
    return ((pr - 1.0) / (d - 1)).to(accumulation_dtype(c))


class _IsoScoreStarFunction(torch.autograd.Function):
    """IsoScore* of a point cloud with the analytic gradient (one ``n x d x d`` product each way).

    Under ``torch.distributed`` the covariance is that of the global batch, built from
    all-reduced sufficient statistics (count, sum, centred co-moment).
    """

    @staticmethod
    def forward(ctx, x, shrinkage, zeta, group, sync):  # type: ignore[override]
        n_local, d = x.shape
        if sync:
            stats = all_reduce_sum(
                torch.cat([x.new_tensor([float(n_local)]), x.sum(0)]).to(torch.float64), group
            )
            n = float(stats[0])
            mean = (stats[1:] / max(n, 1.0)).to(x.dtype)
        else:
            n = float(n_local)
            mean = x.mean(0)
        if n < 2:
            raise ValueError(f"IsoScore* needs at least 2 points, got {int(n)}")
        xc = x - mean
        use_gram = (not sync) and n_local < d
        if use_gram:
            # n < d: every term from the n x n Gram matrix and X_c Sigma_S, never Sigma_X.
            gram = xc @ xc.T
            tr_x = torch.trace(gram).double() / (n - 1)
            fro_xx = (gram.double() ** 2).sum() / (n - 1) ** 2
            if shrinkage is None:
                tr_s, fro_ss, inner_xs = float(d), float(d), tr_x
                xs = xc
            else:
                xs = xc @ shrinkage
                s64 = shrinkage.double()
                tr_s, fro_ss = torch.trace(s64), (s64 * s64).sum()
                inner_xs = (xc.double() * xs.double()).sum() / (n - 1)
            tr = (1 - zeta) * tr_x + zeta * tr_s
            fro = (1 - zeta) ** 2 * fro_xx + 2 * zeta * (1 - zeta) * inner_xs + zeta**2 * fro_ss
            sigma = None
            ctx.save_for_backward(xc, gram, xs)
        else:
            comoment = xc.T @ xc
            if sync:
                comoment = all_reduce_sum(comoment, group)
            sigma = comoment * ((1 - zeta) / (n - 1))
            if zeta > 0:
                if shrinkage is None:
                    sigma.diagonal().add_(zeta)
                else:
                    sigma = sigma + zeta * shrinkage
            s64 = sigma.double()
            tr, fro = torch.trace(s64), (s64 * s64).sum()
            ctx.save_for_backward(xc, sigma)
        pr = _pr_terms(tr, fro)
        ctx.use_gram, ctx.zeta, ctx.n, ctx.d = use_gram, zeta, n, d
        ctx.tr, ctx.fro = float(tr), float(fro)
        ctx.grad_scale = world_size(group) if sync else 1
        return ((pr - 1.0) / (d - 1)).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        zeta, n, d, tr, fro = ctx.zeta, ctx.n, ctx.d, ctx.tr, ctx.fro
        a = 2.0 * tr / (fro * (d - 1))
        b = -2.0 * tr * tr / (fro * fro * (d - 1))
        if ctx.use_gram:
            xc, gram, xs = ctx.saved_tensors
            # X_c Sigma_zeta = (1-zeta) (X_c X_c^T) X_c / (n-1) + zeta X_c Sigma_S
            x_sigma = (gram @ xc) * ((1 - zeta) / (n - 1)) + zeta * xs
        else:
            xc, sigma = ctx.saved_tensors
            x_sigma = xc @ sigma
        coef = 2.0 * (1 - zeta) / (n - 1) * ctx.grad_scale
        grad_x = (a * coef) * xc + (b * coef) * x_sigma
        return grad_out.to(grad_x.dtype) * grad_x, None, None, None, None


def isoscore_star(
    X: ArrayLike,
    zeta: float = 0.0,
    shrinkage: ArrayLike | None = None,
    *,
    sync_dist: bool = False,
    process_group: object | None = None,
) -> torch.Tensor:
    r"""IsoScore* of a point cloud ``X`` of shape ``(n_points, dim)``, differentiable in ``X``.

    :math:`\iota(\Sigma_\zeta)` with :math:`\Sigma_\zeta = (1-\zeta)\Sigma_X + \zeta\Sigma_S`.
    ``shrinkage`` (:math:`\Sigma_S`, shape ``(dim, dim)``) defaults to the identity, the
    fallback the authors recommend when no large sample is at hand. It is treated as a
    constant (no gradient). Computed in fp64 for fp64 input, else with fp32 accumulation.
    With ``sync_dist=True`` under ``torch.distributed``, the score is that of the global batch.

    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.randn(5000, 3, generator=g) * torch.tensor([1.0, 1.0, 0.0])
    >>> round(float(isoscore_star(X)), 3)  # two of three dimensions used: (2-1)/(3-1)
    0.5
    >>> round(float(isoscore_star(X, zeta=1.0)), 3)  # only the identity
    1.0
    """
    z = check_zeta(zeta)
    x = as_point_cloud(X)
    d = x.shape[1]
    if d < 2:
        raise ValueError("IsoScore* needs dimension >= 2 (it is undefined for d = 1)")
    dtype = accumulation_dtype(x)
    s = None
    if shrinkage is not None:
        s = as_covariance(shrinkage, dim=d).to(device=x.device, dtype=dtype).detach()
    sync = bool(sync_dist) and is_distributed(process_group)
    return _IsoScoreStarFunction.apply(x.to(dtype), s, z, process_group, sync)


def isoscore(X: ArrayLike) -> torch.Tensor:
    r"""IsoScore (Rudman et al. 2022) of ``X`` (``(n_points, dim)``): :math:`\iota(\Sigma_X)`.

    >>> g = torch.Generator().manual_seed(0)
    >>> round(float(isoscore(torch.randn(20000, 4, generator=g, dtype=torch.float64))), 2)
    1.0
    """
    return isoscore_star(X, zeta=0.0)


def participation_ratio(X: ArrayLike) -> torch.Tensor:
    r"""Participation ratio of the covariance of ``X``: :math:`(\sum\lambda_i)^2/\sum\lambda_i^2`.

    An effective number of dimensions in :math:`[1, d]`; equals
    :math:`1 + (d-1)\,\mathrm{IsoScore}(X)`. Differentiable.

    >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> participation_ratio(X)
    tensor(2.)
    """
    x = as_point_cloud(X, min_points=2)
    d = x.shape[1]
    if d == 1:
        return torch.ones((), dtype=accumulation_dtype(x))
    return 1.0 + (d - 1) * isoscore(x)
