"""Reproductions of the papers' experiments."""

from isotropy.experiments.stability import (
    StabilityResult,
    figure2_variances,
    format_stability_table,
    plot_stability,
    run_stability,
    write_stability,
)

__all__ = [
    "StabilityResult",
    "figure2_variances",
    "format_stability_table",
    "plot_stability",
    "run_stability",
    "write_stability",
]
