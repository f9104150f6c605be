r"""The autograd function behind :func:`~isotropy.measures.isoscore.isoscore_star`: IsoScore*
(or the participation ratio) of :math:`\Sigma_\zeta = (1-\zeta)\Sigma_X + \zeta\Sigma_S` with
its analytic gradient.

Forward: :math:`t = \operatorname{tr}\Sigma_\zeta`, :math:`f = \lVert\Sigma_\zeta\rVert_F^2`,
:math:`\mathrm{PR} = t^2/f`, :math:`\iota = (\mathrm{PR} - 1)/(d - 1)`, either from
:math:`\Sigma_X = X_c^\top X_c/(n-1)` (:math:`n d^2`) or, when :math:`n < d`, from the Gram
matrix :math:`G = X_cX_c^\top` and :math:`X_c\Sigma_S` without forming :math:`\Sigma_X`.
Backward: :math:`\partial\iota/\partial X = \frac{2(1-\zeta)}{n-1}X_c(aI + b\Sigma_\zeta)` with
:math:`a = 2t/(f(d-1))` and :math:`b = -2t^2/(f^2(d-1))` (one :math:`n\times d\times d`
product, or its Gram twin).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from isotropy._validation import ZERO_VARIANCE, check_finite
from isotropy.distributed import all_reduce_max, all_reduce_sum, world_size
from isotropy.runtime import autocast_off

__all__ = ["IsoScoreStarFunction"]


def _nonfinite_error(x: torch.Tensor, sync: bool) -> ValueError:
    check_finite(x, name="X")  # raises with the count when the local rows hold NaN / inf
    where = " (NaN/inf in another rank's rows, or overflow)" if sync else " (overflow)"
    return ValueError(
        f"IsoScore* is not finite{where}: the input values are too large for "
        f"{x.dtype} accumulation; rescale X"
    )


def _may_be_constant(sum_sq: float, n: float, d: int, m: float, dtype: torch.dtype) -> bool:
    r"""True when :math:`\sum_{ij}(x_{ij} - \bar x_j)^2` is no larger than the residue that the
    rounding of the mean leaves when every row is the same (:math:`|\delta| \le (n+1)\epsilon m`
    per entry, :math:`m = \max|x|`, with a factor 2 to spare)."""
    eps = torch.finfo(dtype).eps
    return sum_sq <= n * d * (2.0 * (n + 1) * eps * m) ** 2


def _rows_identical(x: torch.Tensor, group: object | None, sync: bool) -> bool:
    """Whether every row of ``x`` (of every rank's ``x`` with ``sync``) is the same, exactly."""
    if not sync:
        return bool((x == x[0]).all())
    d = x.shape[1]
    if x.shape[0]:
        lo, hi = torch.aminmax(x.detach(), dim=0)
    else:
        lo = torch.full((d,), math.inf, dtype=x.dtype, device=x.device)
        hi = -lo
    both = all_reduce_max(torch.cat([hi, -lo]), group)
    return bool((both[:d] == -both[d:]).all())


def _centred(x: torch.Tensor, group: object | None, sync: bool) -> tuple[float, torch.Tensor]:
    """``(n, X - mean)``: the number of rows and the centred rows (the global count and mean
    under ``sync``, from all-reduced sums)."""
    if sync:
        head = torch.cat(
            [x.new_tensor([float(x.shape[0])], dtype=torch.float64), x.sum(0, dtype=torch.float64)]
        )
        head = all_reduce_sum(head, group)
        n = float(head[0])
        mean = (head[1:] / max(n, 1.0)).to(x.dtype)
    else:
        n = float(x.shape[0])
        mean = x.mean(0)
    if n < 2:
        raise ValueError(f"IsoScore* needs at least 2 points, got {int(n)}")
    return n, x - mean


def _gram_terms(xc: torch.Tensor, gram: torch.Tensor, shrinkage: torch.Tensor | None,
                zeta: float, eye: float, n: float, d: int
                ) -> tuple[float, float, torch.Tensor | None]:
    r"""``(t, f, X_c Sigma_S)`` from the Gram matrix: :math:`\operatorname{tr}\Sigma_X =
    \operatorname{tr}G/(n-1)`, :math:`\lVert\Sigma_X\rVert_F^2 = \lVert G\rVert_F^2/(n-1)^2`,
    :math:`\langle\Sigma_X,\Sigma_S\rangle = \langle X_c, X_c\Sigma_S\rangle/(n-1)`."""
    g64 = gram.to(torch.float64).reshape(-1)
    tr_x = torch.trace(gram).double() / (n - 1)
    fro_xx = torch.dot(g64, g64) / (n - 1) ** 2
    if shrinkage is None:
        tr_s, fro_ss, inner_xs = d * eye, d * eye * eye, tr_x * eye
        xs = None
    else:
        xs = xc @ shrinkage
        s64 = shrinkage.to(torch.float64).reshape(-1)
        tr_s, fro_ss = float(torch.trace(shrinkage)), float(torch.dot(s64, s64))
        inner_xs = torch.dot(xc.reshape(-1).double(), xs.reshape(-1).double()) / (n - 1)
    tr = float((1 - zeta) * tr_x + zeta * tr_s)
    fro = float((1 - zeta) ** 2 * fro_xx + 2 * zeta * (1 - zeta) * inner_xs + zeta**2 * fro_ss)
    return tr, fro, xs


def _sigma_zeta(moment: torch.Tensor, shrinkage: torch.Tensor | None, zeta: float, eye: float,
                n: float) -> tuple[float, float, torch.Tensor]:
    r"""``(t, f, Sigma_zeta)``: :math:`\Sigma_\zeta` built in place from the co-moment
    :math:`X_c^\top X_c` (the identity times ``eye`` when no :math:`\Sigma_S` is given)."""
    sigma = moment
    sigma.mul_((1 - zeta) / (n - 1))
    if zeta > 0:
        if shrinkage is None:
            sigma.diagonal().add_(zeta * eye)
        else:
            sigma.add_(shrinkage, alpha=zeta)
    s64 = sigma.to(torch.float64)
    flat = s64.reshape(-1)
    return float(torch.trace(s64)), float(torch.dot(flat, flat)), sigma


class IsoScoreStarFunction(torch.autograd.Function):
    """IsoScore* (``kind='iota'``) or the participation ratio (``kind='pr'``) of
    :math:`\\Sigma_\\zeta` with the analytic gradient (one ``n x d x d`` product each way).

    ``x`` and ``shrinkage`` arrive scaled by :math:`2^{-e}` and :math:`2^{-2e}`; the identity
    fallback is then ``eye`` :math:`= 2^{-2e}` times the identity, and ``max_abs_x`` is
    :math:`\\max|x|` of the scaled rows. Under ``torch.distributed`` (``sync``) the covariance is
    that of the global batch, built from all-reduced sufficient statistics (count, sum,
    centred co-moment); the gradient of the local rows is ``world_size`` times their
    single-process gradient.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shrinkage: torch.Tensor | None, zeta: float,  # type: ignore[override]
                eye: float, max_abs_x: float, group: object | None, sync: bool,
                kind: str) -> torch.Tensor:
        d = x.shape[1]
        n, xc = _centred(x, group, sync)
        if zeta == 0.0:
            shrinkage = None  # Sigma_zeta = Sigma_X
        # Gram route: G = X_c X_c^T (n^2 d) instead of X_c^T X_c (n d^2); it pays off when
        # n < d, or n < d/2 when X_c Sigma_S (n d^2) has to be formed anyway.
        use_gram = (not sync) and (x.shape[0] < d if shrinkage is None else 2 * x.shape[0] < d)
        moment = xc @ xc.T if use_gram else xc.T @ xc
        if sync:
            moment = all_reduce_sum(moment, group)
        sum_sq = float(torch.trace(moment))  # sum_ij xc_ij^2
        if _may_be_constant(sum_sq, n, d, max_abs_x, x.dtype) and _rows_identical(x, group, sync):
            if zeta == 0.0:
                raise ValueError(
                    f"X has {ZERO_VARIANCE}: its covariance is zero, so IsoScore and the "
                    "participation ratio are undefined"
                )
            xc.zero_()  # Sigma_X is exactly 0: drop the residue of the rounded mean
            moment.zero_()
        if use_gram:
            tr, fro, xs = _gram_terms(xc, moment, shrinkage, zeta, eye, n, d)
            ctx.save_for_backward(xc, moment, xs)
        else:
            tr, fro, sigma = _sigma_zeta(moment, shrinkage, zeta, eye, n)
            ctx.save_for_backward(xc, sigma)
        if not (math.isfinite(tr) and math.isfinite(fro)):
            raise _nonfinite_error(x, sync)
        if tr <= 0.0 or fro <= 0.0:
            raise ValueError(
                f"the covariance Sigma_zeta is zero ({ZERO_VARIANCE}, or a zero shrinkage "
                "matrix): IsoScore is undefined"
            )
        pr = tr * tr / fro
        # d(PR)/d(Sigma_zeta) = a I + b Sigma_zeta; iota = (PR - 1)/(d - 1).
        denom = 1.0 if kind == "pr" else float(d - 1)
        ctx.a, ctx.b = 2.0 * tr / (fro * denom), -2.0 * tr * tr / (fro * fro * denom)
        ctx.use_gram, ctx.zeta, ctx.n, ctx.eye = use_gram, zeta, n, eye
        ctx.grad_scale = world_size(group) if sync else 1
        value = pr if kind == "pr" else (pr - 1.0) / (d - 1)
        return torch.tensor(value, dtype=x.dtype, device=x.device)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        with autocast_off():  # a backward() called inside an autocast block
            return IsoScoreStarFunction._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        zeta, n = ctx.zeta, ctx.n
        coef = 2.0 * (1 - zeta) / (n - 1) * ctx.grad_scale
        a, b = ctx.a * coef, ctx.b * coef
        if ctx.use_gram:
            xc, gram, xs = ctx.saved_tensors
            # X_c Sigma_zeta = ((1-zeta)/(n-1)) G X_c + zeta X_c Sigma_S
            k = gram * (b * (1 - zeta) / (n - 1))
            if xs is None:
                k.diagonal().add_(a + b * zeta * ctx.eye)
                grad_x = k @ xc
            else:
                k.diagonal().add_(a)
                grad_x = torch.addmm(xs, k, xc, beta=b * zeta)
        else:
            xc, sigma = ctx.saved_tensors
            m = sigma * b
            m.diagonal().add_(a)
            grad_x = xc @ m
        return grad_x.mul_(grad_out.to(grad_x.dtype)), None, None, None, None, None, None, None
