r"""A sequence classifier that reads the mean of the last layer's tokens instead of [CLS].

A sentence-embedding model (all-MiniLM-L6-v2, all-mpnet-base-v2) was trained to represent a
sentence by the mean of its last layer's non-padding tokens; its [CLS] row and its pooler
never fed a classifier. :class:`MeanPooledClassifier` gives such a model its natural readout:

.. math::

    \bar h = \frac{\sum_t m_t h^{(L)}_t}{\sum_t m_t}, \qquad
    \text{logits} = W\,\mathrm{dropout}(\bar h) + b

with :math:`m` the attention mask. :math:`W, b` and the dropout are those of the wrapped
``AutoModelForSequenceClassification``: a BERT-kind head (``dropout`` and a linear
``classifier``) takes :math:`\bar h` where it took the pooler's output (the pooler, unused,
is removed from the encoder); a RoBERTa-kind head (``classifier.dense`` and
``classifier.out_proj``, which reads position 0 of its input) takes :math:`\bar h` where it
took the [CLS] row. The loss is the Hugging Face one for single-label tasks: mean squared
error for one output (regression), cross-entropy otherwise (multi-label ``problem_type`` is
refused).
"""

from __future__ import annotations

from typing import Any

import torch

from isotropy.clouds import pool
from isotropy.models.wrapping import ReadsWrappedAttributes

__all__ = ["CLASSIFIER_POOLINGS", "MeanPooledClassifier", "set_classifier_pooling"]

CLASSIFIER_POOLINGS = ("cls", "mean")


def _head_kind(model: torch.nn.Module) -> str:
    """``"linear"`` (BERT kind), ``"projection"`` (RoBERTa kind), or a ``ValueError``."""
    head = getattr(model, "classifier", None)
    if isinstance(head, torch.nn.Linear) and isinstance(getattr(model, "dropout", None),
                                                        torch.nn.Dropout):
        return "linear"
    if isinstance(getattr(head, "out_proj", None), torch.nn.Linear):
        return "projection"
    raise ValueError(
        f"mean-pooled classification needs a head of the BERT kind (dropout and a linear "
        f"classifier) or of the RoBERTa kind (classifier.out_proj); "
        f"{type(model).__name__} has classifier {type(head).__name__}"
    )


class MeanPooledClassifier(ReadsWrappedAttributes, torch.nn.Module):
    r"""``model`` (an ``AutoModelFor SequenceClassification``) reading :math:`\bar h`, the
    masked mean of the last layer, instead of [CLS] (module docstring).

    The output is the model's own ``SequenceClassifierOutput`` (``loss`` with ``labels``,
    ``logits``, and ``hidden_states`` when asked). Attributes the wrapper lacks (``config``,
    ...) come from the wrapped model. ``save_pretrained`` writes the wrapped model with
    ``config.classifier_pooling = "mean"``; :meth:`from_pretrained` reads it back into this
    class (``AutoModelForSequenceClassification`` alone would read [CLS]).

    >>> from transformers import BertConfig, BertForSequenceClassification
    >>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                  intermediate_size=16, num_labels=3)
    >>> net = MeanPooledClassifier(BertForSequenceClassification(cfg)).eval()
    >>> ids, mask = torch.tensor([[2, 5, 7, 0]]), torch.tensor([[1, 1, 1, 0]])
    >>> out = net(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    >>> h = out.hidden_states[-1][0, :3].mean(0)  # the three real tokens
    >>> bool(torch.allclose(out.logits[0], net.model.classifier(h), atol=1e-6))
    True
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.head_kind = _head_kind(model)
        if getattr(model, "base_model", None) is None or model.base_model is model:
            raise ValueError(f"{type(model).__name__} has no base model (encoder) to pool")
        if getattr(model.config, "problem_type", None) == "multi_label_classification":
            raise ValueError("mean-pooled classification computes single-label cross-entropy "
                             "or, for one output, mean squared error; multi-label "
                             "classification is not supported")
        if isinstance(getattr(model.base_model, "pooler", None), torch.nn.Module):
            # the pooler reads [CLS] and would hold weights without a gradient (DDP refuses
            # them with gradient checkpointing): the encoder runs without it
            model.base_model.pooler = None
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Encoder -> masked mean of the last layer -> the model's head -> loss."""
        from transformers.modeling_outputs import SequenceClassifierOutput

        out = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                    output_hidden_states=output_hidden_states,
                                    return_dict=True, **kwargs)
        mean = pool(out.last_hidden_state, attention_mask, "mean")
        if self.head_kind == "linear":
            logits = self.model.classifier(self.model.dropout(mean))
        else:
            logits = self.model.classifier(mean.unsqueeze(1))
        loss = None if labels is None else self._loss(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits,
                                        hidden_states=out.hidden_states,
                                        attentions=getattr(out, "attentions", None))

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean squared error for one output, cross-entropy for several."""
        if logits.shape[-1] == 1:
            return torch.nn.functional.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]),
                                                 labels.view(-1))

    def save_pretrained(self, save_directory: str, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``save_pretrained``, its config marked
        ``classifier_pooling = "mean"``."""
        self.model.config.classifier_pooling = "mean"
        return self.model.save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, path: str, **kwargs: Any) -> MeanPooledClassifier:
        """Load a model saved by :meth:`save_pretrained` (its config must say
        ``classifier_pooling = "mean"``)."""
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
        if getattr(model.config, "classifier_pooling", "cls") != "mean":
            raise ValueError(f"{path} holds a [CLS] classifier (its config has no "
                             "classifier_pooling = 'mean'); load it with "
                             "AutoModelForSequenceClassification")
        return cls(model)


def set_classifier_pooling(model: torch.nn.Module, pooling: str) -> torch.nn.Module:
    """``model`` as it is (``"cls"``) or in a :class:`MeanPooledClassifier` (``"mean"``)."""
    if pooling not in CLASSIFIER_POOLINGS:
        raise ValueError(f"classifier pooling must be one of {', '.join(CLASSIFIER_POOLINGS)}, "
                         f"got {pooling!r}")
    return model if pooling == "cls" else MeanPooledClassifier(model)
