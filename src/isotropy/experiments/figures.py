"""Deprecated alias of :mod:`isotropy.reporting.figures`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.reporting.figures")
