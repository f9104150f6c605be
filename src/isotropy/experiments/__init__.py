"""Deprecated package: its modules moved to :mod:`isotropy.probing` (``layerwise``,
``analyze``), :mod:`isotropy.sweeps` (``sweep`` -> ``spec``, ``engines``),
:mod:`isotropy.reporting` (``report``, ``figures``) and :mod:`isotropy.paper` (``stability``,
``comparison`` -> ``demo``). The old module paths still import, with a DeprecationWarning."""

from typing import Any

from isotropy._deprecated import moved

_paper_getattr = None


def __getattr__(name: str) -> Any:
    """The names this package exported before (I-STAR Fig. 2): now in :mod:`isotropy.paper`."""
    global _paper_getattr
    if _paper_getattr is None:
        _paper_getattr = moved(__name__, "isotropy.paper")
    return _paper_getattr(name)
