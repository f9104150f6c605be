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
            # from_pretrained returns the model in eval mode (dropout off), and Lightning
            # keeps each submodule's mode: put it in training mode
            self.net, self.iso = model.train(), IsoScoreMetric()
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

At the start of every training epoch the callback warns when the module or any of its
submodules is in eval mode (dropout off while training), naming the first few.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import lightning
import torch

from isotropy.losses.istar import IStarLoss
from isotropy.models.forward import model_device
from isotropy.models.shrinkage import (
    DEFAULT_N_TOKENS,
    _check_n_tokens,
    istar_losses,
    refresh_all,
    set_saved_shrinkage,
)
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

    ``last_shrinkage`` holds each loss's latest :math:`\Sigma_S`, in order. A checkpoint keeps
    them with the epoch they were estimated for (:meth:`state_dict`): resumed mid-epoch, that
    epoch's :math:`\Sigma_S` is reused instead of estimated from the mid-epoch model.
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
        self.shrinkage_epoch: int | None = None
        self._saved: dict[str, Any] | None = None
        self._resumed_epoch: int | None = None  # whose Sigma_S on_train_start set

    @property
    def state_key(self) -> str:
        """Lightning's key of this callback's state: its settings, so that two instances
        refreshing different losses can live in one Trainer."""
        losses = None if self.losses is None else [repr(loss.layers) for loss in self.losses]
        return self._generate_state_key(losses=losses, n_tokens=self.n_tokens)

    def state_dict(self) -> dict[str, Any]:
        """Sigma_S of every loss and the epoch it was estimated for (saved in checkpoints)."""
        return {"epoch": self.shrinkage_epoch,
                "shrinkage": [c.detach().cpu() for c in self.last_shrinkage]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's Sigma_S for the epoch it was estimated for."""
        self._saved = dict(state_dict)

    def _forward_model(self, pl_module: torch.nn.Module) -> torch.nn.Module:
        return self.model if self.model is not None else model_inside(pl_module)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """On a run resumed from a checkpoint of the current epoch, set that epoch's Sigma_S
        (Lightning resumes mid-epoch without calling ``on_train_epoch_start``)."""
        saved, self._saved = self._saved, None
        self._resumed_epoch = None
        if saved is None or saved.get("epoch") != trainer.current_epoch:
            return
        losses = istar_losses(pl_module, self.losses, "LightningShrinkageRefresh")
        set_saved_shrinkage(losses, saved["shrinkage"], model_device(pl_module))
        self.last_shrinkage = list(saved["shrinkage"])
        self.shrinkage_epoch = trainer.current_epoch
        self._resumed_epoch = trainer.current_epoch

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        """Warn of submodules in eval mode (:func:`warn_eval_submodules`); refresh Sigma_S
        (on the epoch of a resumed run, set at ``on_train_start``: nothing more)."""
        warn_eval_submodules(pl_module, trainer.current_epoch)
        resumed, self._resumed_epoch = self._resumed_epoch, None
        if resumed == trainer.current_epoch:
            return  # the resumed epoch's Sigma_S is set (on_train_start)
        losses = istar_losses(pl_module, self.losses, "LightningShrinkageRefresh")
        data = self.dataloader if self.dataloader is not None else trainer.train_dataloader
        if data is None:
            raise ValueError("LightningShrinkageRefresh has no dataloader: pass dataloader=")
        self.last_shrinkage = refresh_all(self._forward_model(pl_module), data, losses,
                                          self.n_tokens, progress=trainer.is_global_zero)
        self.shrinkage_epoch = trainer.current_epoch


def warn_eval_submodules(module: torch.nn.Module, epoch: int) -> list[str]:
    """Warn when ``module`` or any submodule is in eval mode at the start of training epoch
    ``epoch``: their dropout is off, so the model trains without it (``from_pretrained``
    returns a model in eval mode, and Lightning keeps each submodule's mode). Returns the
    names of those modules (``""`` for ``module`` itself).

    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
    >>> warn_eval_submodules(net.train(), 0)
    []
    """
    names = [name for name, m in module.named_modules() if not m.training]
    if names:
        shown = ", ".join(repr(n) if n else "the module itself" for n in names[:3])
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        warnings.warn(
            f"training epoch {epoch} starts with {len(names)} module(s) of "
            f"{type(module).__name__} in eval mode ({shown}{more}): dropout is off there. "
            "from_pretrained returns a model in eval mode and Lightning keeps each "
            "submodule's mode: call .train() on the model in the LightningModule's __init__",
            UserWarning, stacklevel=2)
    return names
