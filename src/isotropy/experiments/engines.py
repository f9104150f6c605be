"""Deprecated alias of :mod:`isotropy.sweeps.engines`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.sweeps.engines")
