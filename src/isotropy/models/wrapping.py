"""What a wrapper module lacks, read from the model it wraps (its ``model`` submodule)."""

from __future__ import annotations

from typing import Any

__all__ = ["ReadsWrappedAttributes"]


class ReadsWrappedAttributes:
    """Mixin for a ``torch.nn.Module`` holding the wrapped model as ``self.model``: an
    attribute the wrapper lacks (``config``, ...) is the wrapped model's. Put it first in the
    bases.

    >>> import torch
    >>> class Wrapper(ReadsWrappedAttributes, torch.nn.Module):
    ...     def __init__(self, model):
    ...         super().__init__()
    ...         self.model = model
    >>> Wrapper(torch.nn.Linear(2, 3)).out_features
    3
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # type: ignore[misc]
        except AttributeError:
            inner = self.__dict__.get("_modules", {}).get("model")
            if inner is None or name.startswith("__"):
                raise
            return getattr(inner, name)
