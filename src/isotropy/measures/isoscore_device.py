r"""IsoScore* with no host synchronisation: the route of the I-STAR loss on accelerators.

The same value and analytic gradient as :class:`~isotropy.measures.isoscore_autograd.
IsoScoreStarFunction` (its module states the math), with every intermediate a tensor on the
rows' device, so that a training step never waits for the GPU:

* **scale guard on the device.** :math:`e` = the exponent of :math:`\max|X|` (from
  ``torch.frexp``), at least :math:`\lceil e_S/2\rceil` for :math:`\Sigma_S` (``shrinkage_exp``,
  computed once when :math:`\Sigma_S` is set), left at 0 inside the window where squares are
  safe; :math:`X` is scaled by :math:`2^{-e}` and :math:`\Sigma_S` by :math:`2^{-2e}` in two
  exact power-of-two factors (no factor leaves float32's range).
* **no eager checks.** Where the eager route raises (NaN/inf rows, overflow, zero covariance,
  all rows equal at :math:`\zeta = 0`: IsoScore undefined) the value is NaN instead; the
  I-STAR loss and ``isotropy train`` turn a NaN batch score into a one-line error at the next
  logging step (:class:`~isotropy.losses.istar.IStarLoss`). All rows equal at
  :math:`\zeta > 0` give :math:`\Sigma_X = 0` exactly, as in the eager route.

* **bfloat16 products, if asked** (``product_dtype=torch.bfloat16``): the two products of
  the union, :math:`X_c^\top X_c` and :math:`X_c M` (backward), take the centred rows rounded
  to bfloat16 and sum in float32 (tensor cores on CUDA: ``torch.mm(..., out_dtype=float32)``;
  elsewhere the same arithmetic, since a product of two bfloat16 values is exact in float32).
  The centring, the scale guard, :math:`\Sigma_S`, the trace and the Frobenius norm stay in
  float32/float64. With unit roundoff :math:`u = 2^{-8}`, to first order in :math:`u` and
  beside the float32 sums both routes share: the diagonal of :math:`\Sigma_X` moves by at
  most :math:`2u` relatively, and :math:`\lVert\Delta\Sigma_\zeta\rVert_F \le
  2u\,\mathrm{tr}\,\Sigma_\zeta`, so :math:`|\Delta\iota| \le 4u(1+\sqrt{\mathrm{PR}})
  (\iota + \frac{1}{d-1})` (PR of :math:`\Sigma_\zeta`), and the gradient
  :math:`c\,X_c M` (:math:`c = 2(1-\zeta)/(n-1)`, :math:`M = aI + b\Sigma_\zeta`) moves by at
  most :math:`8u(1+\sqrt{\mathrm{PR}})\,c\,\lVert X_c\rVert_F\,(|a|\sqrt d + |b|(\lVert
  \Sigma_\zeta\rVert_F + \mathrm{tr}\,\Sigma_\zeta))`: the rounding of :math:`X_c` and
  :math:`M`, and the error that :math:`\tilde\Sigma` puts into :math:`a`, :math:`b` and
  :math:`\Sigma_\zeta`, which does not shrink with :math:`M` (near isotropy :math:`M \to 0`
  while that error stays, so the gradient's *relative* error is unbounded there).
  ``tests/measures/test_isoscore_device.py`` checks both bounds against float64 on
  hidden-state-like clouds, a whitened one and one whose offset dwarfs its spread (the errors
  seen there: :math:`|\Delta\iota|` below :math:`2\cdot 10^{-6}`, the gradient within
  0.2-1.2% of its norm away from isotropy).

Not for ``torch.distributed`` (the eager route all-reduces host-side counts). The forward and
backward arithmetic are the plain functions :func:`star_terms` and :func:`star_grad`, so that
their device placement can be tested without the autograd engine
(``FakeTensorMode`` cannot run CUDA autograd on a CPU-only build).

>>> g = torch.Generator().manual_seed(0)
>>> X = torch.randn(5000, 3, generator=g) * torch.tensor([1.0, 1.0, 0.0])
>>> round(float(isoscore_star_device(X)), 3)  # as isoscore_star: (2-1)/(3-1)
0.5
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from isotropy._validation import (
    accumulation_dtype,
    check_binary_mask,
    max_abs,
    pow2_exponent,
    window,
)
from isotropy.runtime import autocast_off

__all__ = ["PRODUCT_DTYPES", "check_product_dtype", "isoscore_star_device", "same_rows",
           "shrinkage_exponent", "star_grad", "star_terms"]

PRODUCT_DTYPES = (None, torch.bfloat16)  # the operand dtypes the union's products may take


def check_product_dtype(product_dtype: object) -> torch.dtype | None:
    """``None`` (products in the rows' accumulation dtype) or ``torch.bfloat16``."""
    if product_dtype not in PRODUCT_DTYPES:
        raise ValueError(f"product_dtype must be None or torch.bfloat16, got {product_dtype!r}")
    return product_dtype  # type: ignore[return-value]


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``; for bfloat16 ``a``, ``b`` is rounded to bfloat16 too, and the products
    (exact in float32) are summed in float32, giving a float32 result.

    >>> a = torch.tensor([[1.0 + 2**-9, 3.0]])  # 1 + 2^-9 rounds to 1 in bfloat16
    >>> _mm(a, torch.ones(2, 1)).item(), _mm(a.bfloat16(), torch.ones(2, 1)).item()
    (4.001953125, 4.0)
    """
    if a.dtype != torch.bfloat16:
        return a @ b
    b = b.to(torch.bfloat16)
    if a.device.type == "cuda":
        return torch.mm(a, b, out_dtype=torch.float32)
    return a.float() @ b.float()


def shrinkage_exponent(shrinkage: torch.Tensor | None) -> int:
    r""":math:`\lceil e_S/2\rceil` for the exponent :math:`e_S` of :math:`\max|\Sigma_S|` (1 for
    the identity fallback, whose largest entry is 1): computed once, when :math:`\Sigma_S` is set
    (a host read of a constant, not of a training step).

    >>> shrinkage_exponent(torch.eye(3) * 8.0), shrinkage_exponent(None)
    (2, 1)
    """
    if shrinkage is None:
        return 1
    return -(-pow2_exponent(max_abs(shrinkage)) // 2)


def _pow2(e: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two factors whose product is :math:`2^{-e}` exactly, each inside ``dtype``'s range."""
    half = torch.div(e, 2, rounding_mode="floor")
    one = torch.ones((), dtype=dtype, device=e.device)
    return torch.ldexp(one, -half), torch.ldexp(one, -(e - half))


def scale_exponent(x: torch.Tensor, zeta: float, shrinkage_exp: int) -> torch.Tensor:
    r"""The guard's :math:`e` as a 0-d int tensor on ``x``'s device (0 inside the window)."""
    m = x.detach().abs().amax()
    e = torch.frexp(m.to(torch.float64)).exponent.to(torch.int64)  # 0 for 0; any for NaN/inf
    if zeta >= 1.0:  # the rows do not enter Sigma_zeta
        e = torch.full_like(e, shrinkage_exp)
    elif zeta > 0.0:
        e = torch.clamp(e, min=shrinkage_exp)
    return torch.where(e.abs() <= window(x.dtype), torch.zeros_like(e), e)


def star_terms(xc: torch.Tensor, shrinkage: torch.Tensor | None, zeta: float, eye: torch.Tensor,
               keep: torch.Tensor, kind: str = "iota", n: torch.Tensor | None = None,
               ) -> tuple[torch.Tensor, ...]:
    r"""Forward arithmetic on centred, scaled rows ``xc`` ``(n, d)`` (float32, float64, or
    bfloat16 for bfloat16 products; ``sigma`` is then float32): returns ``(value, sigma,
    a, b)`` with :math:`\Sigma_\zeta` (``sigma``) and the gradient coefficients :math:`a, b`
    of :math:`\partial\,\mathrm{value}/\partial\Sigma_\zeta = aI + b\Sigma_\zeta` (float64
    0-d tensors). ``eye``: the identity fallback's scale (0-d, used when ``shrinkage`` is
    None and :math:`\zeta > 0`); ``keep``: 0-d, 0 when every row is the same (then
    :math:`\Sigma_X = 0` exactly), else 1. ``n``: the number of rows that count (0-d, on the
    device) when ``xc`` holds zero rows for the positions that do not (a row mask), else
    ``xc``'s rows. NaN where IsoScore is undefined (zero :math:`\Sigma_\zeta`, fewer than 2
    rows)."""
    rows, d = xc.shape
    n_rows = rows if n is None else n
    sigma = _mm(xc.T, xc)
    sigma.mul_(keep.to(sigma.dtype) * ((1.0 - zeta) / (n_rows - 1)))
    if zeta > 0.0:
        if shrinkage is None:
            sigma.diagonal().add_(zeta * eye.to(sigma.dtype))
        else:
            sigma.add_(shrinkage, alpha=zeta)
    s64 = sigma.to(torch.float64)
    flat = s64.reshape(-1)
    tr, fro = torch.trace(s64), torch.dot(flat, flat)
    denom = 1.0 if kind == "pr" else float(d - 1)
    pr = tr * tr / fro
    a, b = 2.0 * tr / (fro * denom), -2.0 * tr * tr / (fro * fro * denom)
    value = pr if kind == "pr" else (pr - 1.0) / (d - 1)
    valid = (tr > 0) & (fro > 0)
    if n is not None:
        valid = valid & (n >= 2)
    value = torch.where(valid, value, torch.full_like(value, float("nan")))
    return value, sigma, a * keep, b * keep


def star_grad(xc: torch.Tensor, sigma: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
              zeta: float, grad_out: torch.Tensor, n: torch.Tensor | None = None
              ) -> torch.Tensor:
    r""":math:`\partial/\partial X = \frac{2(1-\zeta)}{n-1}X_c(aI + b\Sigma_\zeta)` times
    ``grad_out``, with :math:`a, b` from :func:`star_terms` (0 when every row is the same);
    ``n`` as for :func:`star_terms` (the zero rows of ``xc`` get a zero gradient)."""
    n_rows = xc.shape[0] if n is None else n
    coef = 2.0 * (1.0 - zeta) / (n_rows - 1)
    m = sigma * (b * coef).to(sigma.dtype)
    m.diagonal().add_((a * coef).to(sigma.dtype))
    return _mm(xc, m).mul_(grad_out.to(sigma.dtype))


class _DeviceStar(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, xs: torch.Tensor, real: torch.Tensor | None,  # type: ignore[override]
                shrinkage: torch.Tensor | None, zeta: float, eye: torch.Tensor, kind: str,
                product_dtype: torch.dtype | None) -> torch.Tensor:
        # real: None (every row counts), or a bool per row with the other rows zero in xs
        n = None if real is None else real.sum().to(xs.dtype)
        if real is None:
            xc = xs - xs.mean(0)
        else:  # the real rows' mean; the other rows stay zero
            xc = torch.where(real.unsqueeze(1), xs - xs.sum(0) / n, xs.new_zeros(()))
        with torch.no_grad():
            keep = 1.0 - same_rows(xs, xc, real).to(xs.dtype)
        if product_dtype is not None and xc.dtype == torch.float32:
            xc = xc.to(product_dtype)  # kept for the backward product too
        value, sigma, a, b = star_terms(xc, shrinkage, zeta, eye, keep, kind, n)
        ctx.save_for_backward(xc, sigma, a, b, *(() if n is None else (n,)))
        ctx.zeta = zeta
        return value.to(xs.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        xc, sigma, a, b, *n = ctx.saved_tensors
        with autocast_off():
            grad = star_grad(xc, sigma, a, b, ctx.zeta, grad_out, n[0] if n else None)
        return grad, None, None, None, None, None, None


def same_rows(xs: torch.Tensor, xc: torch.Tensor, real: torch.Tensor | None = None
              ) -> torch.Tensor:
    r"""0-d bool: every row of ``xs`` (every ``real`` one, if given) is the same. The centred
    sum of squares must be no larger than the rounding residue of the mean (:math:`n d
    (2(n+1)\epsilon\max|x|)^2`, the eager route's bound) and the rows equal exactly."""
    rows, d = xs.shape
    n = rows if real is None else real.sum().to(xs.dtype)
    eps = torch.finfo(xs.dtype).eps
    bound = n * d * (2.0 * (n + 1) * eps * xs.abs().amax()) ** 2
    flat = xc.reshape(-1)
    sum_sq = torch.dot(flat, flat)
    if real is None:
        hi, lo = xs.amax(0), xs.amin(0)
    else:  # over the real rows: no row gives -inf - inf, never 0
        hi = torch.where(real.unsqueeze(1), xs, xs.new_full((), float("-inf"))).amax(0)
        lo = torch.where(real.unsqueeze(1), xs, xs.new_full((), float("inf"))).amin(0)
    span = (hi - lo).amax()  # 0 exactly when every column is constant
    return (sum_sq <= bound) & (span == 0)


def isoscore_star_device(X: torch.Tensor, zeta: float = 0.0,
                         shrinkage: torch.Tensor | None = None, *, shrinkage_exp: int | None = None,
                         kind: str = "iota", product_dtype: torch.dtype | None = None,
                         row_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""IsoScore* (``kind='iota'``) or the participation ratio (``'pr'``) of ``X`` ``(n, d)``
    without host synchronisation (module doc); NaN where the eager route would raise.

    ``shrinkage`` must be a validated :math:`\Sigma_S` (``IStarLoss.set_shrinkage`` checks it
    once) on ``X``'s device; ``shrinkage_exp``: its :func:`shrinkage_exponent`, computed from it
    when not given (one host read). Differentiable in ``X``; float32 accumulation for half
    and float32 rows, float64 for float64. ``product_dtype=torch.bfloat16``: the union's two
    products on bfloat16 operands with float32 sums (module doc: the error bounds); float64
    rows keep float64 products. ``row_mask`` (bool, or 0/1, shape ``(n,)``): score the rows
    where it is true only, as ``X[row_mask.bool()]`` but without selecting them (a selection
    sizes its result, a host synchronisation): the other rows are zeroed and take no part (NaN
    or infinity there included), and get a zero gradient; fewer than 2 rows give NaN. A bool
    mask is used as it is; a floating one is checked for 0/1 on the host (a read), an integer
    one on the CPU only. The work then covers every row, the masked ones included.
    """
    product_dtype = check_product_dtype(product_dtype)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D with shape (n_points, dim), got {tuple(X.shape)}")
    if X.shape[0] < 2:
        raise ValueError(f"IsoScore* needs at least 2 points, got {X.shape[0]}")
    if kind == "iota" and X.shape[1] < 2:
        raise ValueError("IsoScore* needs dimension >= 2 (it is undefined for d = 1)")
    real = None
    if row_mask is not None:
        if not isinstance(row_mask, torch.Tensor) or tuple(row_mask.shape) != (X.shape[0],):
            got = tuple(row_mask.shape) if isinstance(row_mask, torch.Tensor) else row_mask
            raise ValueError(f"row_mask must be a tensor of shape ({X.shape[0]},), got {got!r}")
        check_binary_mask(row_mask, name="row_mask")
        real = row_mask.to(X.device).bool()
    if shrinkage is not None and shrinkage.device != X.device:
        shrinkage = shrinkage.to(X.device)  # a copy, not a host read; IStarLoss moves it once
    with autocast_off():
        acc = accumulation_dtype(X)
        x = X.to(acc)
        if real is not None:
            x = torch.where(real.unsqueeze(1), x, x.new_zeros(()))
        if shrinkage_exp is None:
            shrinkage_exp = shrinkage_exponent(shrinkage if zeta > 0 else None)
        e = scale_exponent(x, zeta, shrinkage_exp)
        f1, f2 = _pow2(e, acc)
        xs = x * f1 * f2
        s = None
        if shrinkage is not None and zeta > 0.0:  # scaled in its own dtype if wider
            wide = torch.promote_types(shrinkage.dtype, acc)
            g1, g2 = f1.to(wide), f2.to(wide)
            s = (shrinkage.detach().to(wide) * (g1 * g1) * (g2 * g2)).to(acc)
        eye = (f1 * f1) * (f2 * f2)
        return _DeviceStar.apply(xs, real, s, float(zeta), eye, kind, product_dtype)
