"""Deprecated alias of :mod:`isotropy.sweeps.spec`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.sweeps.spec")
