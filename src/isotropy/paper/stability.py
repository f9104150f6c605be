r"""Mini-batch stability of IsoScore* (Figure 2 of the I-STAR paper).

A zero-mean Gaussian in :math:`d` dimensions (default 768) with covariance
:math:`\mathrm{diag}(10, 6, 4, 4, 1, \dots, 1)`. :math:`\Sigma_S` is the sample covariance of
``shrinkage_points`` (default 75,000) draws. Sub-samples :math:`X_n` of growing size :math:`n` are
fresh draws, hence disjoint from the shrinkage sample, and each is scored with
:math:`\mathrm{IsoScore}^*(X_n, \zeta, \Sigma_S)` for every :math:`\zeta` (the same :math:`X_n`
for all :math:`\zeta`). :math:`\zeta = 0` is plain IsoScore, which underestimates the isotropy of
the distribution when :math:`n` is not much larger than :math:`d`. The reference line is the
IsoScore of the true covariance (0.867 for the default, computed, not hard-coded).

All computation is in float64.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from isotropy.io import write_csv_atomic, write_json_atomic, write_with_atomic
from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import isoscore_from_covariance, isoscore_star
from isotropy.progress import progress_bar

__all__ = [
    "DEFAULT_SIZES",
    "DEFAULT_ZETAS",
    "StabilityResult",
    "check_arguments",
    "figure2_variances",
    "memory_needed",
    "format_stability_table",
    "plot_stability",
    "run_stability",
    "write_stability",
]

DEFAULT_DIM = 768
DEFAULT_SIZES: tuple[int, ...] = (
    10, 25, 50, 100, 200, 300, 400, 500, 600, 700, 800, 1000, 1500, 2000,
)
DEFAULT_ZETAS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8)
DEFAULT_SHRINKAGE_POINTS = 75_000
DEFAULT_REPEATS = 5
_CHUNK = 8192


def figure2_variances(dim: int = DEFAULT_DIM) -> torch.Tensor:
    """The diagonal of the covariance: ``(10, 6, 4, 4, 1, ..., 1)`` of length ``dim`` (>= 4).

    >>> figure2_variances(6).tolist()
    [10.0, 6.0, 4.0, 4.0, 1.0, 1.0]
    """
    if int(dim) != dim or dim < 4:
        raise ValueError(
            f"dim must be an integer >= 4 (the covariance starts 10, 6, 4, 4), got {dim}"
        )
    v = torch.ones(int(dim), dtype=torch.float64)
    v[:4] = torch.tensor([10.0, 6.0, 4.0, 4.0], dtype=torch.float64)
    return v


@dataclass
class StabilityResult:
    """Scores per ``(size, zeta)``: ``values[(size, zeta)]`` is the list over repeats."""

    dim: int
    sizes: list[int]
    zetas: list[float]
    shrinkage_points: int
    repeats: int
    seed: int
    population: float
    shrinkage_isoscore: float
    values: dict[tuple[int, float], list[float]] = field(default_factory=dict)
    seconds: float = 0.0

    def summary_rows(self) -> list[dict[str, Any]]:
        """One row per ``(size, zeta)`` with mean, std (sample, ddof=1), min, max."""
        rows = []
        for n in self.sizes:
            for z in self.zetas:
                v = torch.tensor(self.values[(n, z)], dtype=torch.float64)
                rows.append(
                    {
                        "dim": self.dim,
                        "n_points": n,
                        "zeta": z,
                        "mean": float(v.mean()),
                        "std": float(v.std()),
                        "min": float(v.min()),
                        "max": float(v.max()),
                        "repeats": int(v.numel()),
                        "population": self.population,
                    }
                )
        return rows

    def mean(self, size: int, zeta: float) -> float:
        """Mean over repeats of the score at one sub-sample size and one ``zeta``."""
        return float(torch.tensor(self.values[(size, zeta)], dtype=torch.float64).mean())

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": "isoscore_star_minibatch_stability",
            "config": {
                "dim": self.dim,
                "covariance_diagonal": "10, 6, 4, 4, 1, ..., 1",
                "sizes": self.sizes,
                "zetas": self.zetas,
                "shrinkage_points": self.shrinkage_points,
                "repeats": self.repeats,
                "seed": self.seed,
            },
            "population_isoscore": self.population,
            "shrinkage_isoscore": self.shrinkage_isoscore,
            "seconds": self.seconds,
            "summary": self.summary_rows(),
            "values": [
                {"n_points": n, "zeta": z, "values": self.values[(n, z)]}
                for n in self.sizes
                for z in self.zetas
            ],
        }


def memory_needed(dim: int, sizes: Sequence[int]) -> int:
    """Bytes the experiment holds at once, about (an upper estimate, float64): a few
    ``dim × dim`` covariances and their eigendecompositions, and the rows of a chunk of the
    shrinkage sample and of the largest sub-sample with their scaled copies,
    ``8 (4 d² + 2 (chunk + max n) d)``.

    >>> round(memory_needed(768, [10, 5000]) / 2**20)  # 8 (4·768² + 2·13192·768) bytes
    173
    """
    return 8 * (4 * dim * dim + 2 * (_CHUNK + max(sizes)) * dim)


def _physical_memory() -> int | None:
    """This machine's physical memory in bytes, where the system says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_arguments(
    dim: int, sizes: Sequence[int], zetas: Sequence[float], shrinkage_points: int, repeats: int
) -> tuple[list[int], list[float]]:
    """The sizes and zetas, sorted and without repeats; ``ValueError`` for settings the
    experiment cannot run, before any work (one too large for this machine's memory too)."""
    figure2_variances(dim)
    sizes = [int(n) for n in sizes]
    if not sizes:
        raise ValueError("sizes is empty: give at least one sub-sample size")
    if any(n < 2 for n in sizes):
        raise ValueError(f"every sub-sample size must be >= 2, got {sizes}")
    zetas = [float(z) for z in zetas]
    if not zetas:
        raise ValueError("zetas is empty: give at least one shrinkage weight in [0, 1]")
    if any(not 0.0 <= z <= 1.0 for z in zetas):
        raise ValueError(f"every zeta must lie in [0, 1], got {zetas}")
    if shrinkage_points < 2:
        raise ValueError(f"shrinkage_points must be >= 2, got {shrinkage_points}")
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 (the result is a mean and spread over "
                         f"repeats; one value has no spread), got {repeats}")
    need, have = memory_needed(dim, sizes), _physical_memory()
    if have is not None and need > have:
        raise ValueError(f"dim {dim} with sub-samples of up to {max(sizes):,} rows needs about "
                         f"{need / 2**30:,.1f} GiB (float64 covariances of {dim} × {dim}); "
                         f"this machine has {have / 2**30:,.1f} GiB")
    return sorted(set(sizes)), sorted(set(zetas))


def run_stability(
    dim: int = DEFAULT_DIM,
    sizes: Sequence[int] = DEFAULT_SIZES,
    zetas: Sequence[float] = DEFAULT_ZETAS,
    shrinkage_points: int = DEFAULT_SHRINKAGE_POINTS,
    repeats: int = DEFAULT_REPEATS,
    seed: int = 0,
    *,
    progress: bool = True,
) -> StabilityResult:
    """Run the experiment; deterministic for a given ``seed``. ``progress``: bars of the
    shrinkage sample's points and of the sub-samples where stderr is a terminal.

    The shrinkage sample and the sub-samples use separate random streams, so changing
    ``shrinkage_points`` leaves the sub-samples unchanged.

    >>> r = run_stability(dim=8, sizes=[4, 50], zetas=[0.0, 0.5], shrinkage_points=2000,
    ...                   repeats=2)
    >>> sorted(r.values) == [(4, 0.0), (4, 0.5), (50, 0.0), (50, 0.5)]
    True
    """
    sizes, zetas = check_arguments(dim, sizes, zetas, shrinkage_points, repeats)
    t0 = time.perf_counter()
    variances = figure2_variances(dim)
    std = variances.sqrt()
    population = float(isoscore_from_covariance(torch.diag(variances)))

    g_s = torch.Generator().manual_seed(int(seed))
    stats = CovarianceStats.empty(dim)
    with progress_bar("Sigma_S sample", shrinkage_points, unit="point",
                      show=progress) as advance:
        for start in range(0, shrinkage_points, _CHUNK):
            m = min(_CHUNK, shrinkage_points - start)
            stats.update(torch.randn(m, dim, generator=g_s, dtype=torch.float64) * std)
            advance(m)
    sigma_s = stats.covariance()
    sigma_s = (sigma_s + sigma_s.T) / 2

    g_x = torch.Generator().manual_seed(int(seed) + 1_000_003)
    values: dict[tuple[int, float], list[float]] = {(n, z): [] for n in sizes for z in zetas}
    with progress_bar("sub-samples", len(sizes) * repeats, unit="sample",
                      show=progress) as advance:
        for n in sizes:
            for _ in range(repeats):
                x = torch.randn(n, dim, generator=g_x, dtype=torch.float64) * std
                for z in zetas:
                    values[(n, z)].append(float(isoscore_star(x, zeta=z, shrinkage=sigma_s)))
                advance(1)
    return StabilityResult(
        dim=int(dim),
        sizes=sizes,
        zetas=zetas,
        shrinkage_points=int(shrinkage_points),
        repeats=int(repeats),
        seed=int(seed),
        population=population,
        shrinkage_isoscore=float(isoscore_from_covariance(sigma_s)),
        values=values,
        seconds=time.perf_counter() - t0,
    )


def plot_stability(result: StabilityResult, path: str | os.PathLike[str]) -> Path:
    """Draw Figure 2 (mean ± std over repeats per ``zeta``) and save it atomically to ``path``."""
    import matplotlib
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 4.5))  # Agg canvas, no pyplot state or GUI backend involved
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["viridis"]
    for i, z in enumerate(result.zetas):
        mean = [result.mean(n, z) for n in result.sizes]
        std = [float(torch.tensor(result.values[(n, z)], dtype=torch.float64).std())
               for n in result.sizes]
        label = f"ζ = {z:g}" + (" (IsoScore)" if z == 0 else "")
        ax.errorbar(result.sizes, mean, yerr=std, marker="o", markersize=3, capsize=2,
                    color=cmap(i / max(len(result.zetas) - 1, 1)), label=label)
    ax.axhline(result.population, color="black", linestyle="--",
               label=f"population IsoScore = {result.population:.3f}")
    ax.axvline(result.dim, color="grey", linestyle=":", linewidth=1, label=f"n = d = {result.dim}")
    ax.set_xscale("log")
    ax.set_xlabel("points in the sub-sample, n = |X|")
    ax.set_ylabel("IsoScore*(X, ζ, Σ_S)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(
        f"Mini-batch stability of IsoScore* (d = {result.dim}, |S| = {result.shrinkage_points:,}, "
        f"{result.repeats} repeats)",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return write_with_atomic(path, lambda tmp: fig.savefig(tmp, dpi=150))


def format_stability_table(result: StabilityResult) -> str:
    """A plain-text table: one row per size, one column (mean ± std) per ``zeta``."""
    head = f"{'n':>6} | " + " | ".join(f"{'zeta=' + format(z, 'g'):>15}" for z in result.zetas)
    lines = [head, "-" * len(head)]
    for n in result.sizes:
        cells = []
        for z in result.zetas:
            v = torch.tensor(result.values[(n, z)], dtype=torch.float64)
            s = float(v.std()) if v.numel() > 1 else 0.0
            cells.append(f"{float(v.mean()):.3f} ± {s:.3f}".rjust(15))
        lines.append(f"{n:>6} | " + " | ".join(cells))
    lines.append(
        f"population IsoScore (true covariance): {result.population:.4f}; "
        f"IsoScore of Σ_S: {result.shrinkage_isoscore:.4f}"
    )
    return "\n".join(lines)


def write_stability(result: StabilityResult, output_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``stability.csv`` (summary), ``stability.json`` (config + raw values) and
    ``stability.png`` into ``output_dir``; returns their paths."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "csv": write_csv_atomic(out / "stability.csv", result.summary_rows()),
        "json": write_json_atomic(out / "stability.json", result.to_dict()),
        "png": plot_stability(result, out / "stability.png"),
    }
    return paths
