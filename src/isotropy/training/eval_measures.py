"""Deprecated alias of :mod:`isotropy.probing.eval_measures`."""

from isotropy._deprecated import moved

__getattr__ = moved(__name__, "isotropy.probing.eval_measures")
