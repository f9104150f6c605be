"""Deprecated alias of :mod:`isotropy.rundir`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.rundir")
