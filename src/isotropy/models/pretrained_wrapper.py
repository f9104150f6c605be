r"""A ``transformers.PreTrainedModel`` around a wrapped module, which a ``Trainer`` saves,
loads and resizes as the wrapped model itself (:class:`WrappedPreTrainedModel`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import PretrainedConfig, PreTrainedModel

from isotropy.models.wrapping import ReadsWrappedAttributes

__all__ = ["WrappedPreTrainedModel"]


def _forwarded(name: str) -> property:
    """A class attribute of ``PreTrainedModel`` read from the wrapped model instead."""

    def get(self: WrappedPreTrainedModel) -> Any:
        inner = self.__dict__.get("_modules", {}).get("model")
        return getattr(inner, name, getattr(PreTrainedModel, name, None))

    return property(get)


class WrappedPreTrainedModel(ReadsWrappedAttributes, PreTrainedModel):
    """A ``transformers.PreTrainedModel`` around a wrapped module (``self.model``), so that a
    plain ``Trainer`` saves it with ``save_pretrained``: that writes the wrapped model only (a
    plain torch module: its state dict as ``model.safetensors``), which
    ``AutoModelFor....from_pretrained`` loads back, and :meth:`load_state_dict` takes such a
    checkpoint back into the wrapped model. ``config``, the class attributes the ``Trainer``
    reads (``main_input_name``, ...), the embeddings' getters and setters,
    ``resize_token_embeddings``, ``tie_weights`` and gradient checkpointing are the wrapped
    model's; other attributes the wrapper lacks come from the wrapped model too
    (:class:`ReadsWrappedAttributes`).

    >>> inner = torch.nn.Linear(2, 3)
    >>> outer = WrappedPreTrainedModel(inner)
    >>> outer.out_features, sorted(outer.state_dict())
    (3, ['model.bias', 'model.weight'])
    >>> outer.load_state_dict(inner.state_dict())  # the wrapped model's own keys
    <All keys matched successfully>
    """

    base_model_prefix = "model"
    # what the Trainer reads of a PreTrainedModel's class, taken from the wrapped model
    main_input_name = _forwarded("main_input_name")
    supports_gradient_checkpointing = _forwarded("supports_gradient_checkpointing")
    _no_split_modules = _forwarded("_no_split_modules")
    _keys_to_ignore_on_save = _forwarded("_keys_to_ignore_on_save")
    _tied_weights_keys = _forwarded("_tied_weights_keys")
    _keep_in_fp32_modules = _forwarded("_keep_in_fp32_modules")
    model_tags = _forwarded("model_tags")

    def __init__(self, model: torch.nn.Module) -> None:
        # PreTrainedModel.__init__ is skipped: it would rewrite the shared config's attention
        # implementation for this class; what it sets is read from the wrapped model instead
        torch.nn.Module.__init__(self)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        config = getattr(model, "config", None)
        self.config = config if isinstance(config, PretrainedConfig) else PretrainedConfig()

    def save_pretrained(self, save_directory: str, *args: Any, **kwargs: Any) -> Any:
        """Save the wrapped model (``model.save_pretrained``), as ``from_pretrained`` of its
        class loads it; the wrapper's own submodules (e.g. ``RegularizedModel``'s regularizers) are
        not written. A ``state_dict`` given (the
        Trainer's, under FSDP or DeepSpeed) is the wrapper's: it is cut to the wrapped model's
        keys."""
        saved = self._saved_module()
        state = kwargs.get("state_dict")
        if state is not None:  # cut to the keys of the module that writes its weights
            prefix = next(name for name, m in self.named_modules() if m is saved) + "."
            state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            kwargs["state_dict"] = state
        save = getattr(self.model, "save_pretrained", None)
        if save is not None:
            return save(save_directory, *args, **kwargs)
        # a plain torch module: its state dict, as the Trainer writes one for such a model
        import os

        import safetensors.torch

        if kwargs.get("is_main_process", True):
            os.makedirs(save_directory, exist_ok=True)
            weights = state if state is not None else self.model.state_dict()
            safetensors.torch.save_file({k: v.contiguous() for k, v in weights.items()},
                                        os.path.join(save_directory, "model.safetensors"),
                                        metadata={"format": "pt"})
        return None

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:
        """``torch.nn.Module.load_state_dict``; a state dict of the wrapped model alone (a
        checkpoint written by :meth:`save_pretrained`, as the Trainer writes them) is loaded
        into the wrapped model."""
        given, own = set(state_dict), set(self.state_dict())
        saved = self._saved_module()
        if given and given <= set(saved.state_dict()) and not given <= own:
            return saved.load_state_dict(state_dict, strict=strict, assign=assign)
        if given and not given & own:  # strict=False (the Trainer's) would load nothing
            raise ValueError(
                f"none of the {len(given)} weights given (e.g. {sorted(given)[0]!r}) belongs to "
                f"this {type(self).__name__} or to the {type(saved).__name__} it saves")
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _saved_module(self) -> torch.nn.Module:
        """The module whose weights :meth:`save_pretrained` writes: the wrapped model, or the
        ``PreTrainedModel`` inside a wrapper of it (e.g. a ``MeanPooledClassifier``)."""
        module = self.model
        while not isinstance(module, PreTrainedModel) and isinstance(
                getattr(module, "model", None), torch.nn.Module):
            module = module.model
        return module

    def get_input_embeddings(self) -> torch.nn.Module:
        """The wrapped model's input embeddings."""
        return self.model.get_input_embeddings()

    def get_output_embeddings(self) -> torch.nn.Module | None:
        """The wrapped model's output embeddings."""
        get = getattr(self.model, "get_output_embeddings", None)
        return get() if get is not None else None

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        """The wrapped model's ``set_input_embeddings``."""
        self.model.set_input_embeddings(value)

    def set_output_embeddings(self, value: torch.nn.Module) -> None:
        """The wrapped model's ``set_output_embeddings``."""
        self.model.set_output_embeddings(value)

    def resize_token_embeddings(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``resize_token_embeddings``."""
        return self.model.resize_token_embeddings(*args, **kwargs)

    def tie_weights(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``tie_weights`` (nothing for a model without one)."""
        tie = getattr(self.model, "tie_weights", None)
        return tie(*args, **kwargs) if tie is not None else None

    def gradient_checkpointing_enable(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's gradient checkpointing."""
        return self.model.gradient_checkpointing_enable(*args, **kwargs)

    def gradient_checkpointing_disable(self) -> Any:
        """The wrapped model's gradient checkpointing off."""
        return self.model.gradient_checkpointing_disable()
