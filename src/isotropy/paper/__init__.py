"""The papers' stand-alone experiments and the demo: ``stability`` (I-STAR Fig. 2, the
stability of IsoScore* on mini-batches) and ``demo`` (``isotropy demo``: a short fine-tuning
comparison of the methods)."""

from isotropy.paper.stability import (
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
