"""Deprecated alias of :mod:`isotropy.paper.stability`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.paper.stability")
