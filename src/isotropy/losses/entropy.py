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

import warnings
from collections import deque
from collections.abc import Sequence
from typing import Literal

import torch

from isotropy._validation import (
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    check_finite_float,
    check_flag,
)
from isotropy.clouds import pool, select_layers
from isotropy.distributed import gather_rows
from isotropy.losses.base import (
    Regularizer,
    RegularizerOutput,
    _user_stacklevel,
    warn_no_attention_mask,
)
from isotropy.measures.topology import h0_barcode, persistent_entropy, prominent_features

__all__ = ["PersistentEntropyLoss"]


def _integral(labels: torch.Tensor) -> bool:
    """Whether every value of floating ``labels`` is a whole number (a host read).

    >>> _integral(torch.tensor([0.0, 1.0, 2.0])), _integral(torch.tensor([0.0, 3.8]))
    (True, False)
    """
    lab = labels.detach()
    return bool(((lab == lab.round()) & lab.isfinite()).all())  # one reduction, one read


MIN_GROUP_SIZE = 3
ACCUMULATIONS = ("exact", "window")


class PersistentEntropyLoss(Regularizer):
    r"""Maximise the persistent entropy of each label group's H0 barcode.

    The point cloud is the pooled (``'cls'`` or ``'mean'`` over non-padding tokens) output of
    hidden-state ``layer`` (``-1``: the last layer), gathered over ranks when ``sync_dist``
    (every rank then computes the loss of the global batch). Integer or boolean ``labels``
    split it into groups; ``labels=None`` or floating labels (regression, e.g. STS-B) give one
    group (when the first floating labels an instance sees are all whole numbers, they look
    like class labels stored as floats: a ``UserWarning``). For every group with at least 3
    points: H0 bars (Euclidean MST edge lengths), the prominent-feature split when
    ``select_features`` (else all bars are features and there is no noise), and

    .. math:: \text{loss} = -\beta \sum_g H(\text{features}_g)
              + \gamma \sum_g \operatorname{mean}(\text{noise}_g)

    with :math:`\beta` = ``weight`` and :math:`\gamma` = ``in_cluster_weight`` (a group with
    no noise bars adds no :math:`\gamma` term). Groups with fewer than 3 points are skipped
    (``logs['skipped_groups']``), as are groups whose points all coincide (every bar zero, the
    entropy is undefined; ``logs['degenerate_groups']``). When no group is scored the loss is
    an exact zero that is still attached to the embeddings' graph, so ``backward`` works and
    gives zero gradients.

    **Gradient accumulation** (``accumulation_steps = k > 1``, as in the paper: a 64-point cloud
    from 8 micro-batches of 8). Two ways, chosen by ``accumulation``:

    * ``"exact"`` (default; the authors' objective): per optimizer step, the mean task loss
      plus :math:`\mathcal{L}` of the cloud of the *whole* cycle, entering once with weight
      :math:`\beta`, its gradient reaching every point of the cycle. Without keeping ``k``
      graphs alive: before the cycle, a no-grad forward of its micro-batches gives their
      embeddings :math:`e_i` (:meth:`embed`), and :meth:`prepare_cycle` computes
      :math:`\mathcal{L}` of their union and :math:`g_i = \partial\mathcal{L}/\partial e_i`;
      then each micro-batch's normal forward (dropout's random state replayed, so that it
      computes the same :math:`e_i`) returns :math:`c\,(\langle g_i, e_i\rangle - \langle
      g_i, e_i\rangle_{\text{stop-grad}}) + c\,\mathcal{L}/m` for the ``m`` micro-batches of
      the cycle, :math:`c` = ``loss_divisor`` (what the training loop divides each
      micro-batch's loss by: the Hugging Face ``Trainer`` divides by the accumulation steps).
      After that division the cycle's losses add up to :math:`\mathcal{L}` and their gradient
      is exactly :math:`\sum_i g_i^\top \partial e_i/\partial\theta`. Cost: one extra forward
      pass without gradients per micro-batch, one graph of memory.
      :func:`~isotropy.models.regularized.prepare_exact_cycle` does the no-grad pass for a
      :class:`~isotropy.models.regularized.RegularizedModel`; ``RegularizedTrainer`` and
      ``IsotropyTrainer`` call it (:class:`~isotropy.training.exact_cycle.ExactCycleMixin`).
      In training mode with ``k > 1`` a call without a prepared micro-batch raises.
    * ``"window"`` (cheap, not the authors' objective): the module keeps the embeddings (and
      labels) of the previous ``k - 1`` calls, *detached*, and each call scores the cloud made
      of those plus the current micro-batch: a sliding window of the last ``k``
      micro-batches. Gradient flows only into the current micro-batch's embeddings; earlier
      micro-steps see the tail of the previous cycle (embedded with the previous parameters)
      in place of the cycle's micro-batches still to come. The loss is returned at every
      micro-step; a loop that divides it by ``k`` like the task loss gives the entropy term
      weight :math:`\beta/k` per optimizer step (the authors': :math:`\beta`). Call
      :meth:`reset` to empty the window (e.g. at the start of an epoch).

    In eval mode neither the window nor a prepared cycle is used. That is this module's own
    mode: inside a :class:`~isotropy.models.regularized.RegularizedModel` it follows the
    model's ``train()``/``eval()``; a loss called on its own in a loop must be switched with
    ``loss.eval()`` and ``loss.train()`` too, or validation batches enter the window.

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
        accumulation: Literal["exact", "window"] = "exact",
    ) -> None:
        super().__init__()
        self.weight = check_finite_float(weight, "weight", allow_bool=False)
        self.in_cluster_weight = check_finite_float(in_cluster_weight, "in_cluster_weight",
                                                    allow_bool=False)
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
        if accumulation not in ACCUMULATIONS:
            raise ValueError(
                f"accumulation must be one of {', '.join(ACCUMULATIONS)}, got {accumulation!r}"
            )
        self.accumulation = accumulation
        self._cycle: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        self._cycle_logs: dict[str, float] = {}
        self._warned_replay = False
        self._checked_float_labels = False
        self._warned_no_mask = False
        self.select_features = check_flag(select_features, "select_features")
        self.pooling = pooling
        self.layer = layer
        self.accumulation_steps = accumulation_steps
        self.sync_dist = check_flag(sync_dist, "sync_dist")
        self._window: deque[tuple[torch.Tensor, torch.Tensor | None]] = deque(
            maxlen=max(accumulation_steps - 1, 1)
        )

    def extra_repr(self) -> str:
        return (
            f"weight={self.weight}, in_cluster_weight={self.in_cluster_weight}, "
            f"select_features={self.select_features}, pooling={self.pooling!r}, "
            f"layer={self.layer}, accumulation_steps={self.accumulation_steps}, "
            f"accumulation={self.accumulation!r}, sync_dist={self.sync_dist}"
        )

    def reset(self) -> None:
        """Forget the stored micro-batches of the accumulation window and any prepared cycle."""
        self._window.clear()
        self._cycle = []

    def window_state(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """The stored micro-batches of the ``"window"`` mode (to save with a checkpoint)."""
        return list(self._window)

    def load_window_state(self, state: Sequence[tuple[torch.Tensor, torch.Tensor | None]]
                          ) -> None:
        """Restore :meth:`window_state` (an empty prepared cycle)."""
        self.reset()
        self._window.extend(state)

    def embed(self, hidden_states: Sequence[torch.Tensor] | torch.Tensor,
              attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The pooled ``(batch, dim)`` cloud of hidden-state ``layer`` that is scored."""
        if isinstance(hidden_states, torch.Tensor):
            hidden_states = (hidden_states,)
        states = tuple(hidden_states)
        if not states:
            raise ValueError(
                "hidden_states is empty: call the model with output_hidden_states=True"
            )
        (hidden,) = select_layers(states, self.layer)
        if self.pooling == "mean" and attention_mask is None and not self._warned_no_mask:
            warn_no_attention_mask(type(self).__name__)  # the mean would take in the padding
            self._warned_no_mask = True
        return pool(hidden, attention_mask, self.pooling)

    def prepare_cycle(self, embeddings: Sequence[torch.Tensor],
                      labels: Sequence[ArrayLike | None], loss_divisor: float = 1.0
                      ) -> RegularizerOutput:
        r"""Score the cloud of a whole accumulation cycle (``"exact"`` mode, class doc).

        ``embeddings[i]`` (``(b_i, dim)``, from :meth:`embed` of a no-grad forward) and
        ``labels[i]`` are micro-batch ``i``'s; under ``torch.distributed`` with ``sync_dist``
        the cloud is every rank's cycle (a collective). The next ``len(embeddings)`` training
        calls consume the result in order. Returns the cycle's loss (detached) and logs.
        """
        if self.accumulation != "exact":
            raise ValueError("prepare_cycle is for accumulation='exact'")
        if not embeddings or len(embeddings) != len(labels):
            raise ValueError(f"prepare_cycle needs one label entry per micro-batch, got "
                             f"{len(embeddings)} embeddings and {len(labels)} labels")
        divisor = check_finite_float(loss_divisor, "loss_divisor")
        if divisor <= 0:
            raise ValueError(f"loss_divisor must be > 0, got {loss_divisor}")
        parts = [as_point_cloud(e, name="embeddings", min_points=1).detach() for e in embeddings]
        sizes = [p.shape[0] for p in parts]
        local = torch.cat(parts).to(accumulation_dtype(parts[0])).requires_grad_(True)
        ids = [self._group_ids(lab, n, local.device) for lab, n in zip(labels, sizes,
                                                                        strict=True)]
        if any(i is None for i in ids) and not all(i is None for i in ids):
            raise ValueError("class labels were given for some micro-batches of the cycle and "
                             "not for others")
        groups = None if ids[0] is None else torch.cat(ids)  # type: ignore[arg-type]
        x = gather_rows(local) if self.sync_dist else local
        if self.sync_dist and groups is not None:
            groups = gather_rows(groups)
        with torch.enable_grad():
            out = self._score(x, groups, local)
            (grad,) = torch.autograd.grad(out.loss, local)
        m = len(parts)
        value = float(out.loss.detach())
        self._cycle = [(g, e, value * divisor / m)
                       for g, e in zip(grad.split(sizes), parts, strict=True)]
        self._cycle_divisor = divisor
        self._cycle_logs = dict(out.logs)
        return RegularizerOutput(loss=out.loss.detach(), logs=dict(out.logs))

    def _from_cycle(self, x: torch.Tensor) -> RegularizerOutput:
        """The surrogate loss of the next prepared micro-batch (class doc)."""
        g, e, value = self._cycle.pop(0)
        if tuple(g.shape) != tuple(x.shape):
            self._cycle = []
            raise ValueError(f"the prepared micro-batch has {tuple(g.shape)} embeddings, this "
                             f"call {tuple(x.shape)}: the cycle's micro-batches must come in "
                             "the order they were prepared")
        xd = x.to(g.dtype)
        inner = (xd * g).sum()
        loss = self._cycle_divisor * (inner - inner.detach()) + value
        diff = float((x.detach().to(e.dtype) - e).abs().max())
        if diff > 1e-3 * (float(e.abs().max()) + 1e-12) and not self._warned_replay:
            self._warned_replay = True
            warnings.warn(
                f"the training forward's embeddings differ from the no-grad pass's by {diff:.3g}"
                ": dropout's random state was not replayed (another consumer of random "
                "numbers, or non-deterministic kernels), so the entropy gradient belongs to "
                "another cloud; use accumulation='window' or find what draws random numbers "
                "between the two passes", RuntimeWarning, stacklevel=2)
        logs = {**self._cycle_logs, "loss": value, "replay_max_abs_diff": diff}
        return RegularizerOutput(loss=loss, logs=logs)

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
        return self.forward_embeddings(self.embed(hidden_states, attention_mask), labels)

    def forward_embeddings(
        self, embeddings: ArrayLike, labels: ArrayLike | None = None
    ) -> RegularizerOutput:
        """Score already pooled ``(batch, dim)`` embeddings (see the class docstring)."""
        x = as_point_cloud(embeddings, name="embeddings", min_points=1)
        if self.accumulation == "exact" and self.training:
            if self._cycle:
                return self._from_cycle(x)
            if self.accumulation_steps > 1:
                raise ValueError(
                    f"accumulation='exact' with accumulation_steps={self.accumulation_steps} "
                    "needs prepare_cycle() before every accumulation cycle (IsotropyTrainer "
                    "and isotropy.models.regularized.prepare_exact_cycle do it); use "
                    "accumulation='window' for a sliding window instead"
                )
        groups = self._group_ids(labels, x.shape[0], x.device)
        if self.sync_dist:
            x = gather_rows(x)
            if groups is not None:
                groups = gather_rows(groups)
        cloud, cloud_groups = self._with_window(x, groups)
        return self._score(cloud, cloud_groups, x)

    # ------------------------------------------------------------------ helpers

    def _group_ids(
        self, labels: ArrayLike | None, batch: int, device: torch.device
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
            # checked on the first floating labels only: one host read, and regression targets
            # of later batches (which may hold only whole numbers by chance) never warn
            if not self._checked_float_labels and not lab.is_complex():
                self._checked_float_labels = True
                if _integral(lab):
                    warnings.warn(
                        "PersistentEntropyLoss: the labels are floating point, so they are "
                        "taken as regression targets and the batch is one group, but every "
                        "value of the first batch is a whole number: if they are class labels, "
                        "pass them as integers (labels.long()) to split the batch by class",
                        UserWarning, stacklevel=_user_stacklevel())
            return None  # regression targets: one group
        if lab.device.type == "cpu" and lab.dtype != torch.bool and bool((lab < 0).any()):
            raise ValueError(
                "labels hold negative values (-100 is Hugging Face's label of an ignored "
                "example): the entropy loss splits the batch by class, and would score them as "
                "a class of their own; leave those examples out, or pass labels=None for one "
                "group")
        return lab.detach().to(device=device, dtype=torch.long)

    def _with_window(
        self, x: torch.Tensor, groups: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.accumulation_steps == 1 or not self.training or self.accumulation == "exact":
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
        # an exact zero attached to the graph, formed in the accumulation dtype: a float16 zero
        # would turn the incoming gradient into inf * 0 = NaN at a loss scale >= 2^16
        loss = (anchor.to(accumulation_dtype(cloud)) * 0).sum()
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
