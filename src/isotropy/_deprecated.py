"""Old module paths kept as aliases of the modules that replaced them.

A module that moved keeps a file at its old path whose attributes are looked up in the new
module (PEP 562 ``__getattr__``), with one :class:`DeprecationWarning` when it is imported:

>>> import importlib, warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     old = importlib.reload(importlib.import_module("isotropy.training.run_dir"))
>>> old.RunDirectory is importlib.import_module("isotropy.rundir").RunDirectory
True
>>> "isotropy.rundir" in str(caught[0].message)
True
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["moved"]


def moved(old: str, *new: str) -> Callable[[str], Any]:
    """Warn that module ``old`` is now the module(s) ``new``; returns the ``__getattr__`` for
    ``old``, which looks a name up in each of them in turn."""
    where = " or ".join(new)
    warnings.warn(f"{old} is deprecated: import {where} instead", DeprecationWarning,
                  stacklevel=3)
    targets = [importlib.import_module(n) for n in new]

    def __getattr__(name: str) -> Any:
        for target in targets:
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(f"module {old!r} (now {where}) has no attribute {name!r}")

    return __getattr__
