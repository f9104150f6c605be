r"""Persistent-entropy regularizer ("shrink the longest").

For a batch of sentence embeddings split by class label into groups :math:`X_g`,

.. math::  \mathcal{L} = -\beta \sum_g H\big(F(X_g)\big)
           + \gamma \sum_g \operatorname{mean}\big(N(X_g)\big),

where :math:`F(X_g)` and :math:`N(X_g)` are the prominent-feature and noise bars of the
0-dimensional Vietoris--Rips barcode of :math:`X_g`
(:func:`~isotropy.measures.topology.prominent_features`)
and :math:`H` is the persistent entropy. Minimising :math:`\mathcal{L}` maximises the entropy of
the feature bars (the long inter-cluster distances become more even) and, with
:math:`\gamma > 0`, shrinks the in-cluster noise bars.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Literal

import torch

from isotropy._validation import (
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    check_finite_float,
)
from isotropy.distributed import gather_rows
from isotropy.losses.base import Regularizer, RegularizerOutput
from isotropy.measures.topology import h0_barcode, persistent_entropy, prominent_features
from isotropy.models.hidden_states import pool, select_layers

__all__ = ["PersistentEntropyLoss"]

MIN_GROUP_SIZE = 3


class PersistentEntropyLoss(Regularizer):
    r"""Maximise the persistent entropy of each label group's H0 barcode.

    The point cloud is the pooled (``'cls'`` or ``'mean'`` over non-padding tokens) output of
    hidden-state ``layer`` (``-1``: the last layer), gathered over ranks when ``sync_dist``
    (every rank then computes the loss of the global batch). Integer or boolean ``labels``
    split it into groups; ``labels=None`` or floating labels (regression, e.g. STS-B) give one
    group. For every group with at least 3 points: H0 bars (Euclidean MST edge lengths), the
    prominent-feature split when ``select_features`` (else all bars are features and there is
    no noise), and

    .. math:: \text{loss} = -\beta \sum_g H(\text{features}_g)
              + \gamma \sum_g \operatorname{mean}(\text{noise}_g)

    with :math:`\beta` = ``weight`` and :math:`\gamma` = ``in_cluster_weight`` (a group with
    no noise bars adds no :math:`\gamma` term). Groups with fewer than 3 points are skipped
    (``logs['skipped_groups']``), as are groups whose points all coincide (every bar zero, the
    entropy is undefined; ``logs['degenerate_groups']``). When no group is scored the loss is
    an exact zero that is still attached to the embeddings' graph, so ``backward`` works and
    gives zero gradients.

    **Gradient accumulation** (``accumulation_steps = k > 1``, as in the paper: a 64-point cloud
    from 8 micro-batches of 8). In training mode the module keeps the embeddings (and labels)
    of the previous ``k - 1`` calls, *detached*, and each call scores the cloud made of those
    plus the current micro-batch: a sliding window of the last ``k`` micro-batches, so every
    micro-step sees a full-size cloud once ``k - 1`` calls have been made. Gradient flows only
    into the current micro-batch's embeddings; the stored ones are constants. Each micro-batch
    is therefore differentiated exactly once, at its own call, inside the window that ends with
    it: at the last micro-step of an accumulation cycle that window is exactly the cycle's ``k``
    micro-batches; earlier micro-steps see the tail of the previous cycle (embedded with the
    previous parameters) in place of the cycle's micro-batches still to come. The loss is
    returned at every micro-step; scale it like the task loss (e.g. divide by ``k`` if you
    divide the task loss). Call
    :meth:`reset` to empty the window (e.g. at the start of an epoch). In eval mode the window
    is neither used nor updated.

    Logs: ``loss``, ``entropy_sum``, ``entropy_mean`` (per scored group; 0 when none),
    ``noise_mean_sum`` (sum over groups of the mean noise bar), ``n_groups`` (scored groups),
    ``skipped_groups``, ``degenerate_groups``, ``n_features``, ``n_noise``, ``n_points``.

    >>> _ = torch.manual_seed(0)
    >>> reg = PersistentEntropyLoss(weight=1.0)
    >>> out = reg.forward_embeddings(torch.randn(12, 4), torch.tensor([0, 1] * 6))
    >>> out.logs["n_groups"], out.logs["skipped_groups"], bool(out.loss < 0)
    (2.0, 0.0, True)
    """

    def __init__(
        self,
        weight: float = 1.0,
        in_cluster_weight: float = 0.0,
        select_features: bool = True,
        pooling: Literal["cls", "mean"] = "cls",
        layer: int = -1,
        accumulation_steps: int = 1,
        sync_dist: bool = True,
    ) -> None:
        super().__init__()
        self.weight = check_finite_float(weight, "weight")
        self.in_cluster_weight = check_finite_float(in_cluster_weight, "in_cluster_weight")
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
        if not isinstance(layer, int) or isinstance(layer, bool):
            raise TypeError(f"layer must be an integer hidden-state index, got {layer!r}")
        if (
            not isinstance(accumulation_steps, int)
            or isinstance(accumulation_steps, bool)
            or accumulation_steps < 1
        ):
            raise ValueError(
                f"accumulation_steps must be an integer >= 1, got {accumulation_steps!r}"
            )
        self.select_features = bool(select_features)
        self.pooling = pooling
        self.layer = layer
        self.accumulation_steps = accumulation_steps
        self.sync_dist = bool(sync_dist)
        self._window: deque[tuple[torch.Tensor, torch.Tensor | None]] = deque(
            maxlen=max(accumulation_steps - 1, 1)
        )

    def extra_repr(self) -> str:
        return (
            f"weight={self.weight}, in_cluster_weight={self.in_cluster_weight}, "
            f"select_features={self.select_features}, pooling={self.pooling!r}, "
            f"layer={self.layer}, accumulation_steps={self.accumulation_steps}, "
            f"sync_dist={self.sync_dist}"
        )

    def reset(self) -> None:
        """Forget the stored micro-batches of the accumulation window."""
        self._window.clear()

    def forward(
        self,
        hidden_states: Sequence[torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        labels: ArrayLike | None = None,
    ) -> RegularizerOutput:
        """Pool hidden-state ``layer`` and score it (see the class docstring).

        ``hidden_states`` is the ``outputs.hidden_states`` tuple; a single ``(batch, seq, dim)``
        tensor is taken as a one-layer tuple.
        """
        if isinstance(hidden_states, torch.Tensor):
            hidden_states = (hidden_states,)
        states = tuple(hidden_states)
        if not states:
            raise ValueError(
                "hidden_states is empty: call the model with output_hidden_states=True"
            )
        (hidden,) = select_layers(states, self.layer)
        return self.forward_embeddings(pool(hidden, attention_mask, self.pooling), labels)

    def forward_embeddings(
        self, embeddings: ArrayLike, labels: ArrayLike | None = None
    ) -> RegularizerOutput:
        """Score already pooled ``(batch, dim)`` embeddings (see the class docstring)."""
        x = as_point_cloud(embeddings, name="embeddings", min_points=1)
        groups = self._group_ids(labels, x.shape[0], x.device)
        if self.sync_dist:
            x = gather_rows(x)
            if groups is not None:
                groups = gather_rows(groups)
        cloud, cloud_groups = self._with_window(x, groups)
        return self._score(cloud, cloud_groups, x)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _group_ids(
        labels: ArrayLike | None, batch: int, device: torch.device
    ) -> torch.Tensor | None:
        if labels is None:
            return None
        lab = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(labels)
        if lab.ndim == 2 and lab.shape[1] == 1:
            lab = lab[:, 0]
        if lab.ndim != 1 or lab.shape[0] != batch:
            raise ValueError(
                f"labels must have shape ({batch},) to match the {batch} embeddings, "
                f"got {tuple(lab.shape)}"
            )
        if lab.is_floating_point() or lab.is_complex():
            return None  # regression targets: one group
        return lab.detach().to(device=device, dtype=torch.long)

    def _with_window(
        self, x: torch.Tensor, groups: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.accumulation_steps == 1 or not self.training:
            return x, groups
        past = list(self._window)
        for px, pg in past:
            if px.shape[1] != x.shape[1]:
                raise ValueError(
                    f"embedding dimension changed from {px.shape[1]} to {x.shape[1]} within the "
                    "accumulation window; call reset() first"
                )
            if (pg is None) != (groups is None):
                raise ValueError(
                    "class labels were given for some micro-batches of the accumulation window "
                    "and not for others; call reset() first"
                )
        self._window.append((x.detach(), groups))
        if not past:
            return x, groups
        cloud = torch.cat([px.to(x.device, x.dtype) for px, _ in past] + [x], dim=0)
        if groups is None:
            return cloud, None
        return cloud, torch.cat([pg.to(x.device) for _, pg in past] + [groups], dim=0)

    def _score(
        self, cloud: torch.Tensor, groups: torch.Tensor | None, anchor: torch.Tensor
    ) -> RegularizerOutput:
        members = [cloud] if groups is None else [cloud[groups == g] for g in torch.unique(groups)]
        loss = (anchor * 0).sum().to(accumulation_dtype(cloud))  # exact zero, attached to the graph
        entropies: list[float] = []
        noise_means = 0.0
        skipped = degenerate = n_features = n_noise = 0
        for pts in members:
            if pts.shape[0] < MIN_GROUP_SIZE:
                skipped += 1
                continue
            bars = h0_barcode(pts)
            if self.select_features:
                features, noise, _ = prominent_features(bars)
            else:
                features, noise = bars, bars[:0]
            if not float(features.detach().sum()) > 0.0:
                degenerate += 1
                continue
            h = persistent_entropy(features)
            loss = loss - self.weight * h
            entropies.append(float(h.detach()))
            n_features += features.numel()
            n_noise += noise.numel()
            if noise.numel():
                noise_mean = noise.mean()
                noise_means += float(noise_mean.detach())
                if self.in_cluster_weight != 0.0:
                    loss = loss + self.in_cluster_weight * noise_mean
        logs = {
            "loss": float(loss.detach()),
            "entropy_sum": float(sum(entropies)),
            "entropy_mean": float(sum(entropies) / len(entropies)) if entropies else 0.0,
            "noise_mean_sum": noise_means,
            "n_groups": float(len(entropies)),
            "skipped_groups": float(skipped),
            "degenerate_groups": float(degenerate),
            "n_features": float(n_features),
            "n_noise": float(n_noise),
            "n_points": float(cloud.shape[0]),
        }
        return RegularizerOutput(loss=loss, logs=logs)
