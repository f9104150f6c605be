"""The claims a report judges (:data:`CLAIMS`, with what each needs before it can be judged,
:data:`NEEDS`) and the I-STAR paper's settings they are judged at (:data:`ISTAR_BEST`)."""

from __future__ import annotations

__all__ = ["CLAIMS", "ISTAR_BEST", "METRIC_CLAIMS", "NEEDS", "PAPER_EFFECT", "TASKS", "ZETAS",
           "TABLE1_BERT"]


# I-STAR paper, Table 2 (BERT): the best I-STAR (lambda, zeta) per task, and the paper's Table 1
# (BERT) task metrics for base, CosReg and I-STAR.
ISTAR_BEST = {"sst2": (-5.0, 0.2), "rte": (-1.0, 0.8), "mrpc": (-1.0, 0.6),
              "cola": (-1.0, 0.8), "stsb": (-1.0, 0.2)}
TASKS = ("sst2", "rte", "mrpc", "cola", "stsb")
ZETAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # the paper's Fig. 7 grid
# The summary's rows: key -> (what is tested, +1 for a predicted direction, 0 for a claim
# that something does not rise, 2 for a claim of no difference either way).
CLAIMS: dict[str, tuple[str, int]] = {
    "C1 vs none": ("I-STAR (paper's λ < 0) above no regularizer, task metric", +1),
    "C1 vs CosReg": ("I-STAR (paper's λ < 0) above CosReg, task metric", +1),
    "C2": ("Spearman ρ(IsoScore*, metric) across λ is negative (one ρ per seed)", +1),
    "C3 centres": ("CosReg lowers the mean absolute activation of the last layer", +1),
    "C3 no rise": ("CosReg does not raise IsoScore* of the last layer", 0),
    "C3 no rise, union": ("CosReg does not raise IsoScore* of the union of layers", 0),
    "C4 paper's λ": ("the paper's λ < 0 lowers the TwoNN dimension of [CLS]", +1),
    "C4 λ = -0.3": ("λ = -0.3 lowers the TwoNN dimension of [CLS]", +1),
    "C4 λ = +1": ("λ = +1 raises the TwoNN dimension of [CLS]", +1),
    "C5": ("at λ = -1 the best ζ ∈ (0, 1) is above ζ = 0", +1),
    "C5 ζ = 1": ("at λ = -1 the best ζ ∈ (0, 1) is above ζ = 1 (App. D)", +1),
    "C6 λ = +1 hurts": ("I-STAR at λ = +1 below no regularizer, task metric (§2, §6: raising "
                        "isotropy hurts)", +1),
    "C7 CosReg no gain": ("CosReg does not raise the task metric over no regularizer "
                          "(Table 1)", 0),
    "C8": ("Spearman ρ(TwoNN of [CLS], metric) across λ is negative (§6: lower intrinsic "
           "dimension, better performance; one ρ per seed)", +1),
    "C9 early layers": ("λ = +1 raises IsoScore* of layer 1 more than of the last layer "
                        "(Fig. 6)", +1),
    "P1 grows, raw": ("without a regularizer the raw top-1 share grows (per run)", +1),
    "P1 grows, centred": ("without a regularizer the centred top-1 share grows (per run)", +1),
    "P1 held down": ("the entropy loss (selected bars) lowers the raw top-1 share", +1),
    "P1 held down, centred": ("the entropy loss (selected bars) lowers the centred top-1 "
                              "share", +1),
    "P2": ("the entropy loss (selected bars) raises the last-30% metric", +1),
    "P3 metric": ("selected bars above all bars, last-30% metric", +1),
    "P3 spectrum": ("selected bars below all bars, raw top-1 share", +1),
    "P3 spectrum, centred": ("selected bars below all bars, centred top-1 share", +1),
    "P4 all bars on par": ("the entropy loss with all bars on par with no regularizer, "
                           "last-30% metric", 2),
}


# The claims whose quantity is a difference in the task metric (method minus reference), with
# the factor that turns their oriented values back into that difference (C6's are -Δ).
METRIC_CLAIMS: dict[str, int] = {"C1 vs none": +1, "C1 vs CosReg": +1, "C6 λ = +1 hurts": -1,
                                 "C7 CosReg no gain": +1, "P2": +1, "P3 metric": +1,
                                 "P4 all bars on par": +1}

# I-STAR paper, Table 1, BERT rows (points: accuracy, Matthews and Pearson x 100), 5 seeds.
TABLE1_BERT: dict[str, dict[str, float]] = {
    "istar": {"sst2": 92.65, "rte": 62.53, "mrpc": 86.76, "cola": 59.60, "stsb": 86.44},
    "base": {"sst2": 92.40, "rte": 62.24, "mrpc": 86.51, "cola": 59.22, "stsb": 86.15},
    "cosreg": {"sst2": 92.01, "rte": 61.52, "mrpc": 85.29, "cola": 57.90, "stsb": 86.30},
}


def _table1_effect(method: str, reference: str) -> dict[str, float]:
    return {t: round(TABLE1_BERT[method][t] - TABLE1_BERT[reference][t], 2) for t in TASKS}


# The paper's own effect (points, per task) of the metric claims it gives a number for: the
# persistent-entropy paper's Table 2 numbers are lost in its text, and Fig. 3 (C6) has none.
PAPER_EFFECT: dict[str, dict[str, float]] = {
    "C1 vs none": _table1_effect("istar", "base"),
    "C1 vs CosReg": _table1_effect("istar", "cosreg"),
    "C7 CosReg no gain": _table1_effect("cosreg", "base"),
}


# what each claim needs before it can be judged (said in place of "not run")
_PAPER_SETTING = ("I-STAR at the paper's (λ, ζ) for the task (SST-2: -5, 0.2; RTE: -1, 0.8; "
                  "MRPC: -1, 0.6; CoLA: -1, 0.8; STS-B: -1, 0.2)")
NEEDS: dict[str, str] = {
    "C1 vs none": f"{_PAPER_SETTING} and a base run, same seeds",
    "C1 vs CosReg": f"{_PAPER_SETTING} and CosReg (λ = 1), same seeds",
    "C2": "I-STAR at λ = the paper's, -0.3 and +1 (the paper's ζ), same seeds",
    "C3 centres": "CosReg (λ = 1) and a base run, same seeds",
    "C3 no rise": "CosReg (λ = 1) and a base run, same seeds",
    "C3 no rise, union": "CosReg (λ = 1) and a base run, same seeds",
    "C4 paper's λ": f"{_PAPER_SETTING} and a base run, same seeds",
    "C4 λ = -0.3": "I-STAR at λ = -0.3 (the paper's ζ) and a base run, same seeds",
    "C4 λ = +1": "I-STAR at λ = +1 (the paper's ζ) and a base run, same seeds",
    "C5": "I-STAR at λ = -1 with ζ = 0 and with ζ in (0, 1), same seeds",
    "C5 ζ = 1": "I-STAR at λ = -1 with ζ = 1 and with ζ in (0, 1), same seeds",
    "C6 λ = +1 hurts": "I-STAR at λ = +1 (the paper's ζ) and a base run, same seeds",
    "C7 CosReg no gain": "CosReg (λ = 1) and a base run, same seeds",
    "C8": "I-STAR at λ = the paper's, -0.3 and +1 (the paper's ζ), same seeds",
    "C9 early layers": "I-STAR at λ = +1 (the paper's ζ) and a base run, same seeds",
    "P1 grows, raw": "base runs with at least two evaluations",
    "P1 grows, centred": "base runs with at least two evaluations",
    "P1 held down": "the entropy loss (selected bars) and a base run, same seeds",
    "P1 held down, centred": "the entropy loss (selected bars) and a base run, same seeds",
    "P2": "the entropy loss (selected bars) and a base run, same seeds",
    "P3 metric": "the entropy loss with selected and with all bars, same seeds",
    "P3 spectrum": "the entropy loss with selected and with all bars, same seeds",
    "P3 spectrum, centred": "the entropy loss with selected and with all bars, same seeds",
    "P4 all bars on par": "the entropy loss with all bars and a base run, same seeds",
}
