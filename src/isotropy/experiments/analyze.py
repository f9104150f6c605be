"""Deprecated alias of :mod:`isotropy.probing.analyze`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.probing.analyze")
