"""Deprecated alias of :mod:`isotropy.clouds`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.clouds")
