"""What a run records of the code that ran it: the libraries' versions and the git commit."""

from __future__ import annotations

import subprocess
from pathlib import Path


def library_versions() -> dict[str, str]:
    """Versions of the libraries a run depends on."""
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version()}
    for name in ("isotropy", "torch", "transformers", "accelerate", "numpy", "scikit-learn",
                 "scipy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit() -> str | None:
    """The commit of the source tree of this package, if it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None
