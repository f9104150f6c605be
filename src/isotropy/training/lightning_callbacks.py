r"""PyTorch Lightning counterparts of the Hugging Face ``Trainer`` callbacks.

:class:`LightningShrinkageRefresh` re-estimates I-STAR's :math:`\Sigma_S` at the start of every
training epoch, as :class:`~isotropy.models.shrinkage.ShrinkageRefreshCallback` does for the
``Trainer``: the covariance (``ddof=1``, float64) of the first ``n_tokens`` rows of
:math:`\tilde X` (non-padding tokens of the loss's layers) read from the training data by the
current model, set on every :class:`~isotropy.losses.istar.IStarLoss` of the module. Under
DDP the statistics of every rank are all-reduced (``IStarLoss(sync_dist=True)``), so every
rank holds the same :math:`\Sigma_S`.

Needs ``lightning`` (``pip install lightning``)::

    model = RegularizedModel(AutoModelForSequenceClassification.from_pretrained(path),
                             IStarLoss(tuning=-1.0, zeta=0.2))

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net, self.iso = model, IsoScoreMetric()
        def training_step(self, batch, _):
            out = self.net(**batch)
            self.log_dict({"task_loss": out.task_loss, **out.regularizer_losses})
            return out.loss
        def validation_step(self, batch, _):
            out = self.net(**batch, output_hidden_states=True)
            self.iso.update(out.hidden_states[-1], batch["attention_mask"])
        def on_validation_epoch_end(self):
            self.log("val_isoscore", self.iso.compute()); self.iso.reset()
        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-5)

    lightning.Trainer(max_epochs=3, callbacks=[LightningShrinkageRefresh()]).fit(Module(), ...)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import lightning
import torch

from isotropy.losses.istar import IStarLoss
from isotropy.models.shrinkage import DEFAULT_N_TOKENS, _check_n_tokens, istar_losses, refresh_all
from isotropy.training.monitor import model_inside

__all__ = ["LightningShrinkageRefresh"]


class LightningShrinkageRefresh(lightning.pytorch.Callback):
    r"""Lightning callback: :math:`\Sigma_S` of every ``IStarLoss`` refreshed at the start of
    every training epoch (module docstring).

    Args:
        losses: the losses to refresh; default: every ``IStarLoss`` inside the module.
        dataloader: the data to read; default: the trainer's training dataloader (the pass
            leaves torch's global random state as it was; a loader's own ``generator`` is
            advanced by it: pass another loader to keep that one's order).
        model: what turns a batch (a dict of model inputs) into ``hidden_states``; default:
            :func:`~isotropy.training.monitor.model_inside` the module (its
            ``RegularizedModel``, else its ``PreTrainedModel``).
        n_tokens: rows of :math:`\tilde X` per refresh (paper: 250,000).

    ``last_shrinkage`` holds each loss's latest :math:`\Sigma_S`, in order.
    """

    def __init__(self, losses: IStarLoss | Iterable[IStarLoss] | None = None,
                 dataloader: Iterable[Mapping[str, Any]] | None = None,
                 model: torch.nn.Module | None = None,
                 n_tokens: int = DEFAULT_N_TOKENS) -> None:
        super().__init__()
        self.losses = None if losses is None else istar_losses(torch.nn.Module(), losses, "")
        self.dataloader = dataloader
        self.model = model
        self.n_tokens = _check_n_tokens(n_tokens)
        self.last_shrinkage: list[torch.Tensor] = []

    def _forward_model(self, pl_module: torch.nn.Module) -> torch.nn.Module:
        return self.model if self.model is not None else model_inside(pl_module)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:  # noqa: D102
        losses = istar_losses(pl_module, self.losses, "LightningShrinkageRefresh")
        data = self.dataloader if self.dataloader is not None else trainer.train_dataloader
        if data is None:
            raise ValueError("LightningShrinkageRefresh has no dataloader: pass dataloader=")
        self.last_shrinkage = refresh_all(self._forward_model(pl_module), data, losses,
                                          self.n_tokens)
