"""Deprecated alias of :mod:`isotropy.reporting.report`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.reporting.report")
