"""Deprecated alias of :mod:`isotropy.sweeps.spec`, :mod:`~isotropy.sweeps.presets`,
:mod:`~isotropy.sweeps.points` and :mod:`~isotropy.sweeps.state`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.sweeps.spec", "isotropy.sweeps.presets",
                    "isotropy.sweeps.points", "isotropy.sweeps.state")
