"""The top-level package: every name of ``__all__`` is reachable, and ``dir(isotropy)``
lists the lazily loaded ones (tab completion), before and after their first use; the
measures and losses load without ``transformers``."""

from __future__ import annotations

import subprocess
import sys

import isotropy


def test_every_public_name_is_reachable_and_listed():
    listed = set(dir(isotropy))
    for name in isotropy.__all__:
        assert name in listed, name
        assert getattr(isotropy, name) is not None


def test_lazy_names_are_listed_before_they_are_loaded():
    code = ("import sys, isotropy; names = dir(isotropy); "
            "print('RegularizedModel' in names, 'isotropy.models.regularized' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["True", "False"]


def test_measures_and_losses_load_without_transformers():
    names = ("isoscore", "isoscore_star", "twonn", "persistent_entropy", "IStarLoss",
             "CosRegLoss", "PersistentEntropyLoss", "OutlierStats")
    code = (f"import sys, isotropy; [getattr(isotropy, n) for n in {names!r}]; "
            "print('transformers' in sys.modules, 'isotropy.models.regularized' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["False", "False"]
