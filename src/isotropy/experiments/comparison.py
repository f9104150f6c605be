"""Deprecated alias of :mod:`isotropy.paper.demo`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.paper.demo")
