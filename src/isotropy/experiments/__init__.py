"""Deprecated package: its modules moved to :mod:`isotropy.probing` (``layerwise``,
``analyze``), :mod:`isotropy.sweeps` (``sweep`` -> ``spec``, ``engines``),
:mod:`isotropy.reporting` (``report``, ``figures``) and :mod:`isotropy.paper` (``stability``,
``comparison`` -> ``demo``). The old module paths still import, with a DeprecationWarning."""

from typing import Any

from isotropy._deprecated import moved

_PAPER_NAMES = ("StabilityResult", "figure2_variances", "format_stability_table",
                "plot_stability", "run_stability", "write_stability")


def __getattr__(name: str) -> Any:
    """The names this package exported before (I-STAR Fig. 2): now in :mod:`isotropy.paper`."""
    if name not in _PAPER_NAMES:  # a submodule: the import system loads it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return moved(__name__, "isotropy.paper")(name)
