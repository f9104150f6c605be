r"""I-STAR: IsoScore*-based stable anisotropic regularization (Rudman & Eickhoff, ICLR 2024).

.. math::  L = L_\text{task} + \lambda\,\bigl(1 - \mathrm{IsoScore}^\star(\tilde X, \zeta,
           \Sigma_S)\bigr),

where :math:`\tilde X` is the union of the chosen layers' non-padding token states and
:math:`\Sigma_\zeta = (1-\zeta)\Sigma_{\tilde X} + \zeta\Sigma_S` (:math:`\zeta = 0`: no
shrinkage). :math:`\lambda < 0` makes the representations *less* isotropic, :math:`\lambda > 0`
more. :math:`\Sigma_S` comes from
:func:`~isotropy.models.shrinkage.refresh_shrinkage` (a large sample
of token states, refreshed every epoch); without it the identity is used in its place.

Under ``torch.distributed`` (``sync_dist=True``) the score is that of the *global* batch, built
from all-reduced sufficient statistics; every rank returns the same loss, and each rank's
gradient is ``world_size`` times its share of the single-process gradient, so that DDP's
averaging of parameter gradients reproduces the single-process gradient.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch

from isotropy._validation import (
    ArrayLike,
    as_covariance,
    as_square_matrix,
    check_finite_float,
    check_flag,
    check_zeta,
)
from isotropy.clouds import Layers
from isotropy.distributed import is_distributed
from isotropy.losses.base import Regularizer, RegularizerOutput
from isotropy.measures.isoscore import _isoscore_star
from isotropy.measures.isoscore_device import (
    check_product_dtype,
    isoscore_star_device,
    shrinkage_exponent,
)

__all__ = ["IStarLoss"]


def check_tuning(tuning: float, name: str = "tuning") -> float:
    """Validate a tuning weight: a finite real number (any sign)."""
    return check_finite_float(tuning, name, allow_bool=False)


def check_layers(layers: Layers) -> Layers:
    """Validate a layer selection: ``'all'``, ``'last'``, an integer or a list of integers.

    Whether an index exists is checked against the hidden states in ``forward``.
    """
    what = f"layers must be 'all', 'last', an int or a list of ints, got {layers!r}"
    if isinstance(layers, str):
        if layers not in ("all", "last"):
            raise ValueError(what)
        return layers
    if isinstance(layers, bool):
        raise TypeError(what)
    if isinstance(layers, int):
        return layers
    if isinstance(layers, Sequence):
        idx = list(layers)
        if not idx:
            raise ValueError("layers is empty: give 'all', 'last', an index or a list of indices")
        for i in idx:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"layer indices must be integers, got {i!r}")
        return idx
    raise TypeError(what)


def check_hidden_states(hidden_states: object, layers: Layers) -> tuple[torch.Tensor, ...]:
    """The ``outputs.hidden_states`` tuple, with clear errors for what a model may hand back."""
    if hidden_states is None:
        raise ValueError(
            "hidden_states is None: call the model with output_hidden_states=True "
            "(RegularizedModel does this for you)"
        )
    if isinstance(hidden_states, torch.Tensor):
        raise TypeError(
            "hidden_states must be the tuple outputs.hidden_states (index 0 = embedding output, "
            "1..L = layers), not a single tensor; wrap one layer as (embeddings, layer)"
        )
    hs = tuple(hidden_states)  # type: ignore[arg-type]
    if not hs:
        raise ValueError("hidden_states is empty: call the model with output_hidden_states=True")
    for i, h in enumerate(hs):
        if not isinstance(h, torch.Tensor) or h.ndim != 3:
            shape = tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
            raise ValueError(f"hidden_states[{i}] must be a (batch, seq, dim) tensor, got {shape}")
    if layers == "all" and len(hs) < 2:
        raise ValueError(
            "layers='all' means the transformer layers 1..L, but hidden_states holds only the "
            "embedding output (index 0)"
        )
    return hs


class IStarLoss(Regularizer):
    r"""The I-STAR penalty :math:`\lambda(1 - \mathrm{IsoScore}^\star(\tilde X, \zeta, \Sigma_S))`.

    Args:
        tuning: :math:`\lambda`; negative decreases isotropy, positive increases it
            (the paper tunes over :math:`\{-5, -3, -1, 1, 3, 5\}`).
        zeta: shrinkage weight :math:`\zeta\in[0, 1]` on :math:`\Sigma_S`.
        layers: ``"all"`` (every transformer layer, not the embedding output), ``"last"``, an
            index into ``hidden_states`` or a list of indices; :math:`\tilde X` is the union of
            their non-padding token states.
        shrinkage: :math:`\Sigma_S` of shape ``(dim, dim)``; ``None`` until
            :meth:`set_shrinkage` is called, in which case the identity stands in (with a
            warning, once).
        sync_dist: score the global batch under ``torch.distributed``.
        process_group: the ``torch.distributed`` group (default: the world).
        include_padding: put the padding positions in :math:`\tilde X` (and, through
            :func:`~isotropy.models.shrinkage.refresh_shrinkage`, in :math:`\Sigma_S`) as the
            authors' code does (it flattens the whole ``(batch, seq, dim)`` tensor); default
            ``False``: the attention mask leaves them out.
        eager_checks: ``True``: the score's input checks raise at once (each a host read of
            a value); ``False``: the sync-free route
            (:func:`~isotropy.measures.isoscore_device.isoscore_star_device`: NaN where the
            checks would raise, and the logs are detached tensors, read only when logged;
            the union is every position's row with a row mask, not a selection, so that its
            size is never read on the host; ``isotropy train`` stops with a one-line error at
            the next logging step when the batch score was NaN, e.g. for a batch of fewer
            than 2 tokens). Default ``None``: eager on CPU, sync-free on accelerators.
            Under ``torch.distributed`` with ``sync_dist`` the eager route is always used.
        product_dtype: ``torch.bfloat16``: on the sync-free route, the two products of the
            union (:math:`X_c^\top X_c`, and :math:`X_c M` in the backward pass) take
            bfloat16 operands with float32 sums, as tensor cores do (the bounds on the score's
            and the gradient's error: :mod:`isotropy.measures.isoscore_device`); default
            ``None``: float32 products. The eager route keeps float32 products (a warning
            says so, once).

    ``forward(hidden_states, attention_mask)``: pass the batch's ``attention_mask``. Without
    it every position, padding included, is counted as a token of :math:`\tilde X` (a
    ``UserWarning`` says so, once per instance, unless ``include_padding``).

    ``forward`` returns the loss and ``logs`` with ``isoscore_star`` (the batch's score),
    ``istar_penalty`` (:math:`1 - \mathrm{IsoScore}^\star`) and ``n_points`` (local rows of
    :math:`\tilde X`). Half-precision hidden states are scored with fp32 accumulation, with
    autocast switched off for the computation.

    >>> g = torch.Generator().manual_seed(0)
    >>> h = torch.randn(4, 6, 8, generator=g)
    >>> mask = torch.ones(4, 6, dtype=torch.long)
    >>> loss = IStarLoss(tuning=-1.0, zeta=0.2, shrinkage=torch.eye(8))
    >>> out = loss((h, 2 * h), attention_mask=mask)  # (embeddings, layer 1)
    >>> bool(torch.isclose(out.loss, torch.tensor(out.logs["isoscore_star"] - 1.0)))
    True
    """

    shrinkage: torch.Tensor | None

    def __init__(
        self,
        tuning: float,
        zeta: float = 0.2,
        layers: Layers = "all",
        shrinkage: ArrayLike | None = None,
        sync_dist: bool = True,
        process_group: object | None = None,
        include_padding: bool = False,
        eager_checks: bool | None = None,
        product_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.product_dtype = check_product_dtype(product_dtype)
        self._warned_product = False
        if eager_checks is not None and not isinstance(eager_checks, bool):
            raise TypeError(f"eager_checks must be True, False or None, got {eager_checks!r}")
        self.eager_checks = eager_checks
        self._shrinkage_exp = shrinkage_exponent(None)
        self.tuning = check_tuning(tuning)
        self.zeta = check_zeta(zeta)
        self.include_padding = check_flag(include_padding, "include_padding")
        self.layers = check_layers(layers)
        self.sync_dist = check_flag(sync_dist, "sync_dist")
        self.process_group = process_group
        self._warned_identity = False
        self._warned_no_mask = False
        self.register_buffer("shrinkage", None, persistent=False)
        if shrinkage is not None:
            self.set_shrinkage(shrinkage)

    def set_shrinkage(self, cov: ArrayLike | None) -> None:
        r"""Set :math:`\Sigma_S` (``None`` returns to the identity fallback).

        Checked here, once: square, finite, symmetric, non-negative diagonal, positive
        semi-definite (``ValueError`` naming the smallest eigenvalue otherwise), and the same
        dimension as a :math:`\Sigma_S` set before. Its dimension is checked against the
        hidden size in ``forward``, which does not repeat the other checks.
        """
        if cov is None:
            self.shrinkage = None
            self._shrinkage_exp = shrinkage_exponent(None)
            return
        c = as_square_matrix(cov, name="shrinkage")
        if self.shrinkage is not None and c.shape != self.shrinkage.shape:
            raise ValueError(
                f"shrinkage has shape {tuple(c.shape)} but the one set before has shape "
                f"{tuple(self.shrinkage.shape)}; call set_shrinkage(None) first to change it"
            )
        if c.shape[0] < 2:
            raise ValueError("shrinkage must be at least 2 x 2 (IsoScore* needs dimension >= 2)")
        c = as_covariance(c.detach().clone(), name="shrinkage")
        if self.shrinkage is not None:
            c = c.to(self.shrinkage.device)
        self.shrinkage = c
        self._shrinkage_exp = shrinkage_exponent(c)  # once: the device route's scale guard

    def extra_repr(self) -> str:
        s = "identity" if self.shrinkage is None else f"{tuple(self.shrinkage.shape)}"
        return (
            f"tuning={self.tuning}, zeta={self.zeta}, layers={self.layers!r}, shrinkage={s}, "
            f"sync_dist={self.sync_dist}, include_padding={self.include_padding}"
            + (f", product_dtype={self.product_dtype}" if self.product_dtype is not None else "")
        )

    def forward(
        self,
        hidden_states: Sequence[torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> RegularizerOutput:
        r""":math:`\lambda(1 - \mathrm{IsoScore}^\star)` of the union of the chosen layers'
        non-padding token states (``labels`` is ignored).

        Without ``attention_mask`` every position counts as a token, padding included (warned
        once per instance)."""
        hs = check_hidden_states(hidden_states, self.layers)
        eager = hs[-1].device.type == "cpu" if self.eager_checks is None else self.eager_checks
        sync = self.sync_dist and is_distributed(self.process_group)
        eager = eager or sync
        real = None
        if eager:
            # under sync, NaN/inf is found after the ranks' sums, so that every rank raises (a
            # rank raising alone would leave the others waiting in a collective)
            x = self._token_states(hs, attention_mask, self.layers, check_finite=not sync)
            if x.shape[0] == 0:
                raise ValueError(
                    "the attention mask leaves no token in the batch: I-STAR needs token states"
                )
        else:  # every position's row and a row mask: no selection, no host read
            x, real = self._token_rows(hs, attention_mask, self.layers)
        d = x.shape[1]
        if self.shrinkage is None:
            if not self._warned_identity:
                warnings.warn(
                    "IStarLoss has no shrinkage matrix Sigma_S: using the identity fallback "
                    "(1 - zeta) Sigma_X + zeta I. Call refresh_shrinkage(model, dataloader, loss) "
                    "before each epoch (or loss.set_shrinkage(cov)) for the paper's method.",
                    UserWarning,
                    stacklevel=2,
                )
                self._warned_identity = True
        elif self.shrinkage.shape[0] != d:
            raise ValueError(
                f"shrinkage has shape {tuple(self.shrinkage.shape)} but the hidden states have "
                f"dimension {d}"
            )
        if not eager:
            if self.shrinkage is not None and self.shrinkage.device != x.device:
                self.shrinkage = self.shrinkage.to(x.device)  # once: the buffer follows the rows
            score = isoscore_star_device(x, self.zeta, self.shrinkage,
                                         shrinkage_exp=self._shrinkage_exp,
                                         product_dtype=self.product_dtype, row_mask=real)
            value = score.detach()
            n_points = float(x.shape[0]) if real is None else real.sum().to(value.dtype)
            logs = {"isoscore_star": value, "istar_penalty": 1.0 - value,
                    "n_points": n_points}
            return RegularizerOutput(loss=self.tuning * (1.0 - score), logs=logs)
        if self.product_dtype is not None and not self._warned_product:
            warnings.warn(
                f"IStarLoss(product_dtype={self.product_dtype}) applies to the sync-free route "
                "(eager_checks=False, the default on accelerators); this batch took the eager "
                "route (the default on CPU, and always under torch.distributed with "
                "sync_dist), whose products stay in float32", UserWarning, stacklevel=2)
            self._warned_product = True
        with torch.autocast(device_type=x.device.type, enabled=False):
            score = _isoscore_star(  # Sigma_S was checked once, in set_shrinkage
                x,
                self.zeta,
                self.shrinkage,
                sync_dist=self.sync_dist,
                process_group=self.process_group,
                check_psd_=False,
            )
        penalty = 1.0 - score
        iso = float(score.detach())
        logs = {"isoscore_star": iso, "istar_penalty": 1.0 - iso, "n_points": float(x.shape[0])}
        return RegularizerOutput(loss=self.tuning * penalty, logs=logs)
