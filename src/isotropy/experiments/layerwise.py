"""Deprecated alias of :mod:`isotropy.probing.layerwise`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.probing.layerwise")
